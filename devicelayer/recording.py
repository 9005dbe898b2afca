"""Recordings: launches and copies checked and recorded once on one device, replayed as one submission.

A recording binds its buffers and arguments when it is made; a replay costs
one submission however many launches it holds (a CUDA graph, one Vulkan
command buffer, pre-bound OpenCL kernels, one host task).  The buffers it
names must stay allocated while it may be replayed: the recording keeps them.
"""

from __future__ import annotations

from typing import Any, Sequence

from .errors import InvalidArgument
from .events import Event
from .interrupts import protected
from .memory import Buffer, frees


class Item:
    """One recorded piece of work: ``kind`` is "launch", "copy" or "call"; ``label`` names it in errors."""

    __slots__ = ("kind", "label", "program", "args", "global_size", "local_size", "dst", "src", "fn", "call_args")

    def __init__(self, kind: str, label: str) -> None:
        self.kind = kind
        self.label = label
        self.program: Any = None
        self.args: list[Any] = []
        self.global_size: tuple[int, ...] = ()
        self.local_size: tuple[int, ...] | None = None
        self.dst: Buffer | None = None
        self.src: Buffer | None = None
        self.fn: Any = None
        self.call_args: tuple[Any, ...] = ()


class Recording:
    """Work recorded on ``device`` (``Device.record()``); ``finish()`` then ``replay(wait=)`` any number of times."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self.items: list[Item] = []
        self.buffers: list[Buffer] = []
        self._frees_seen = -1  # ``memory.frees()`` when the replay last found every buffer alive
        self.native: Any = None
        self.finished = False
        self.released = False

    def __len__(self) -> int:
        return len(self.items)

    def _open(self, what: str) -> None:
        if self.device._forked:
            self.device._check_open()
        if self.released:
            raise InvalidArgument(f"recording on {self.device.id}: {what} after release()")
        if self.finished:
            raise InvalidArgument(f"recording on {self.device.id}: {what} after finish()")

    def launch(self, program: Any, args: Sequence[Any], global_size: Any, local_size: Any = None,
               label: str | None = None) -> None:
        """Record a launch, checked now as ``Device.launch`` checks it."""
        self._open("launch")
        checked, gsize, lsize, buffers = self.device._check_launch(program, args, global_size, local_size)
        item = Item("launch", label or program.label)
        item.program, item.args, item.global_size, item.local_size = program, checked, gsize, lsize
        self.items.append(item)
        self.buffers.extend(buffers)

    def copy(self, dst: Buffer, src: Buffer, label: str | None = None) -> None:
        """Record a copy within the device's pool (``MemoryPool.copy``'s rules)."""
        self._open("copy")
        self.device.pool._check_copy(dst, src)
        item = Item("copy", label or f"copy {src.nbytes} B on {self.device.id}")
        item.dst, item.src = dst, src
        self.items.append(item)
        self.buffers.extend((dst, src))

    def call(self, fn: Any, args: Sequence[Any], buffers: Sequence[Buffer], label: str) -> None:
        """Record vendor-library work: ``fn.native(*args, natives) -> Event`` runs it inside a submission."""
        self._open("call")
        if not callable(getattr(fn, "native", None)):
            raise InvalidArgument(f"recording on {self.device.id}: {label} cannot be recorded (no native form)")
        item = Item("call", label)
        item.fn, item.call_args = fn, tuple(args)
        self.items.append(item)
        self.buffers.extend(buffers)

    @protected
    def finish(self) -> "Recording":
        """Close the recording and build the device's native form of it."""
        self._open("finish")
        self.finished = True
        self.native = self.device._build_recording(self.items)
        self._roots = list({id(b.root): b.root for b in self.buffers}.values())  # what a replay checks and holds
        self._keep = (self.native, [b.handle for b in self._roots])
        return self

    def replay(self, wait: Sequence[Event] = ()) -> Event:
        """Submit the whole recording after ``wait``; the event completes when its last item has."""
        if self.released:
            raise InvalidArgument(f"recording on {self.device.id}: replay after release()")
        if not self.finished:
            raise InvalidArgument(f"recording on {self.device.id}: replay before finish()")
        roots, dev, native = self._roots, self.device, self.native
        seen = frees()
        if seen != self._frees_seen or dev._forked:  # (a buffer freed since the last check, in any pool)
            if dev._forked or any(b._freed for b in roots):  # (roots: allocations, whose own flag tells)
                for b in roots:
                    b.check_alive(f"replay on {dev.id}")
            self._frees_seen = seen
        return dev._submit(f"replay of {len(self.items)} item(s) on {dev.id}",
                           lambda waits: dev._replay_recording(native, waits), wait, self._keep, roots)

    @protected
    def release(self) -> None:
        """Drop the native form (after the replays already submitted finish); the recording cannot be used again.

        Releasing it again raises InvalidArgument, as ``Device.release`` of a program does.
        """
        if self.device._forked:
            self.device._check_open()
        if self.released:
            raise InvalidArgument(f"recording on {self.device.id}: release() again (it was already released)")
        self.released = True
        if self.finished:
            self.device._release_recording(self.native)
