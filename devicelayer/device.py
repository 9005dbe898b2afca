"""Device and Program: compile, launch and the in-order submission every backend shares."""

from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Sequence


from . import lifecycle
from .errors import BackendUnavailable, CompileError, DeviceLayerError, InvalidArgument, LaunchError
from .events import (CompletedEvent, DeferredEvent, Event, callback_threads, check_events, dependency_error,
                     dispatcher)
from .interrupts import install as install_sigint, protected
from .info import DeviceInfo
from .memory import Buffer, MemoryPool
from .geometry import check_geometry
from .tuning import TunedChoices
from .signature import Arg, Signature, _float_max, _int_range, check_buffer, check_scalar, parse_signature

if TYPE_CHECKING:
    from .recording import Recording


class Program:
    """A compiled kernel of one device; ``signature`` lists its arguments."""

    __slots__ = ("device", "entry", "source", "options", "key", "handle", "signature", "released", "lock", "label",
                 "checks")

    def __init__(self, device: "Device", entry: str, source: Any, options: tuple[str, ...], key: str,
                 handle: Any, signature: Signature | None) -> None:
        self.device = device
        self.entry = entry
        self.source = source
        self.options = options
        self.key = key
        self.handle = handle
        self.signature = signature
        self.released = False
        self.lock = threading.Lock()
        self.label = f"launch {entry} on {device.id}"
        self.checks = _check_plan(signature)

    def __repr__(self) -> str:
        return f"<Program {self.entry} on {self.device.id}{' released' if self.released else ''}>"


Op = Callable[[list[Event]], Event]

_BUFFER, _INT, _FLOAT, _OTHER = range(4)
_INF = float("inf")


def _check_plan(signature: Signature | None) -> tuple[tuple[int, Any, int, int], ...] | None:
    """Per argument: how to check it fast (kind code, dtype, int range)."""
    if signature is None:
        return None
    plan = []
    for arg in signature:
        if arg.kind == "buffer":
            plan.append((_BUFFER, arg.dtype, 0, 0))  # the element type a typed buffer must hold (None: any)
        elif arg.kind == "scalar" and arg.dtype is not None and arg.dtype.kind in "iu":
            lo, hi = _int_range(arg.dtype)
            plan.append((_INT, arg.dtype.type, lo, hi))
        elif arg.kind == "scalar" and arg.dtype is not None and arg.dtype.kind == "f":
            plan.append((_FLOAT, arg.dtype.type, 0, _float_max(arg.dtype)))
        else:
            plan.append((_OTHER, None, 0, 0))
    return tuple(plan)


def refuse_forked(devices: Sequence["Device"]) -> None:
    """BackendUnavailable where one of ``devices`` was created before this (forked) process began."""
    for device in devices:
        if device._forked:
            device._check_open()


class Device:
    """One compute device: ``info``, ``pool``, ``compile``, ``launch``, ``release``, ``synchronize``.

    Work on a device runs in submission order, like a CUDA stream or an in-order
    OpenCL queue; ``wait=`` adds dependencies on events of any device.  Waits the
    device can express natively stay on the device; others defer the submission
    (the caller never blocks), and later work queues behind it to keep the order.
    """

    pool: MemoryPool
    #: True in a forked child on the devices the parent created: every call raises BackendUnavailable
    _forked = False

    def __init__(self, info: DeviceInfo) -> None:
        self.info = info
        install_sigint()  # Ctrl-C never lands half-way through a submission (devicelayer/interrupts.py)
        self._programs: dict[str, Program] = {}
        self._compile_lock = threading.Lock()
        self._submit_lock = threading.RLock()
        #: (event, op, waits, held): a held op waits for its waits to complete, native ones too
        self._backlog: deque[tuple[DeferredEvent, Op, tuple[Event, ...], bool]] = deque()
        self._closed = False
        #: the latest submission (in-order: it finishes last), weakly: a device holds no finished work
        self._tail: weakref.ref[Event] | None = None
        self._tuned_choices: dict[str, TunedChoices] = {}
        lifecycle.track(self)

    @property
    def id(self) -> str:
        """The device id, as ``devicelayer.device()`` takes it."""
        return self.info.id

    # -- measured choices ----------------------------------------------------------
    def _tuning_identity(self) -> str:
        """What a choice measured on this device holds for: its model, driver and API (backends add the vendor
        libraries that take part)."""
        i = self.info
        return (f"{i.backend}|{i.name}|{i.vendor}|{i.driver_version}|{i.api_version}|{i.compute_units}|"
                f"{i.local_memory}|{i.memory_total}")

    def _tuned(self, kind: str) -> TunedChoices:
        """The choices of ``kind`` measured for this device (``_tuning_identity``), kept in the disk cache."""
        found = self._tuned_choices.get(kind)
        if found is None:
            found = self._tuned_choices.setdefault(kind, TunedChoices(kind, self._tuning_identity()))
        return found

    # -- backend hooks -------------------------------------------------------------
    def _build(self, source: Any, entry: str, options: tuple[str, ...]) -> tuple[Any, Signature | None]:
        """Compile; return the native program and its signature (None when unknown). Raise CompileError."""
        raise NotImplementedError

    def _launch(self, program: Program, args: list[Any], global_size: tuple[int, ...],
                local_size: tuple[int, ...] | None, waits: list[Event]) -> Event:
        """Submit a launch with checked arguments after ``waits`` (native events of this device)."""
        raise NotImplementedError

    def _default_local_size(self, program: Program, global_size: tuple[int, ...]) -> tuple[int, ...] | None:
        """The work-group size a launch of ``program`` without ``local_size`` gets; None where the driver picks one
        that divides ``global_size`` (the launch check counts the work-groups with it)."""
        return None

    def _release_program(self, program: Program) -> None:
        """Drop the device's hold on the native program; submitted launches keep it alive through their events."""

    def _synchronize(self) -> None:
        """Block until all submitted work of the device has finished."""
        raise NotImplementedError

    def _close(self) -> None:
        """Free everything the device holds (its work has finished)."""

    def vendor_op(self, name: str) -> Callable[..., Event] | None:
        """A vendor-library implementation of op ``name`` (cuBLAS matmul...), or None to use the op's kernels.

        Called as ``fn(inputs, outputs, attrs, in_buffers, out_buffers, wait) -> Event`` with
        TensorTypes, checked attributes and buffers of this device.  ``fn.accepts(inputs, outputs,
        attrs)``, where present, limits it to the cases it serves; ``fn.native(..., natives)``
        (the work inside a submission) lets recordings hold it; ``fn.specialize(inputs, outputs,
        attrs, constants)``, where present, returns the op for a plan whose inputs ``constants``
        (index -> NumPy array) never change, so it can prepare them once.  An op with
        ``private_layout`` (a name), ``layout_input(index)`` and ``with_layout(in_private,
        out_private)`` can exchange tensors in a layout of its own with its neighbours in a plan
        (``devicelayer/graph/layout.py``); ``offers_layout(inputs, outputs, attrs)``, where
        present, limits that to the calls it serves faster so.
        """
        return None

    def _is_native(self, event: Event) -> bool:
        """True when the device can wait on ``event`` inside its own queue."""
        return event.device is self and not isinstance(event, DeferredEvent)

    # -- compile -------------------------------------------------------------------
    def compile(self, source: Any, entry: str, options: Sequence[str] = (),
                signature: str | Sequence[Any] | None = None) -> Program:
        """Compile ``entry`` of ``source`` (cached by source, options and device); ``CompileError`` carries the log.

        ``signature`` (``"const float* a, int n"``) states the arguments where the
        backend cannot read them from the compiled kernel.
        """
        self._check_open()
        if not isinstance(entry, str) or not entry.isidentifier():
            raise InvalidArgument(f"compile: entry must be an identifier, got {entry!r}")
        if isinstance(source, str):
            if "\0" in source:
                raise InvalidArgument(f"compile: the source has a NUL character at {source.index(chr(0))} (compilers "
                                      f"stop reading there)")
            try:
                source.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidArgument(f"compile: the source is not text UTF-8 can hold ({exc.reason} at "
                                      f"{exc.start})") from None
        if isinstance(options, str):
            options = tuple(options.split())
        if not all(isinstance(o, str) for o in options):
            raise InvalidArgument("compile: options must be strings")
        options = tuple(options)
        sig = parse_signature(signature) if signature is not None else None
        key = self._cache_key(source, entry, options)
        with self._compile_lock:
            program = self._programs.get(key)
            if program is not None and not program.released:
                return program
            try:
                handle, found = self._build(source, entry, options)
            except (CompileError, InvalidArgument):
                raise
            except DeviceLayerError:
                raise
            except Exception as exc:
                raise CompileError(f"{self.id}: compiling {entry!r} failed: {exc}") from exc
            program = Program(self, entry, source, options, key, handle, sig if sig is not None else found)
            self._programs[key] = program
            return program

    def _cache_key(self, source: Any, entry: str, options: tuple[str, ...]) -> str:
        if isinstance(source, (bytes, bytearray, memoryview)):
            blob = bytes(source)
        elif isinstance(source, str):
            blob = source.encode()
        elif callable(source):
            blob = f"callable:{id(source)}".encode()
        else:
            raise InvalidArgument(f"compile: source must be text, bytes or (host) a callable, got {type(source).__name__}")
        h = hashlib.sha256(blob)
        h.update("\0".join((entry, *options, self.id, self.info.driver_version)).encode())
        return h.hexdigest()

    def release(self, program: Program) -> None:
        """Drop a compiled program; launching it afterwards is an error."""
        if not isinstance(program, Program) or program.device is not self:
            raise InvalidArgument(f"release: not a program of {self.id}")
        if self._forked:
            self._check_open()
        with self._compile_lock:
            if program.released:
                raise InvalidArgument(f"release: program {program.entry!r} was already released")
            program.released = True
            if self._programs.get(program.key) is program:
                del self._programs[program.key]
        self._release_program(program)

    # -- launch --------------------------------------------------------------------
    def launch(self, program: Program, args: Sequence[Any], global_size: Any,
               local_size: Any = None, wait: Sequence[Event] = ()) -> Event:
        """Run ``program`` over ``global_size`` work items (groups of ``local_size``) after ``wait``.

        Work items past the end of a kernel's data must be skipped by the kernel:
        a backend may round ``global_size`` up to whole work-groups.  Sizes beyond a limit the
        device states (``devicelayer.geometry``), and a typed buffer for a parameter of another
        element type, raise InvalidArgument before the driver sees them.
        """
        checked, gsize, lsize, buffers = self._check_launch(program, args, global_size, local_size)
        # the event keeps the native memory alive, not the Buffer objects: a Buffer records its latest
        # event, and a Buffer <-> Event cycle would leave native objects to the cycle collector's order
        return self._submit(program.label,
                            lambda waits: self._launch(program, checked, gsize, lsize, waits),
                            wait, (program, [b.handle for b in buffers]), buffers)

    def _check_launch(self, program: Program, args: Sequence[Any], global_size: Any,
                      local_size: Any) -> tuple[list[Any], tuple[int, ...], tuple[int, ...] | None, list[Buffer]]:
        """Check a launch: the checked arguments, sizes and the buffers it uses (InvalidArgument if wrong)."""
        if not isinstance(program, Program):
            raise InvalidArgument(f"launch: expected a Program, got {type(program).__name__}")
        if program.device is not self:
            raise InvalidArgument(f"launch: program was compiled for {program.device.id}, not {self.id}")
        if program.released:
            raise InvalidArgument(f"launch: program {program.entry!r} was released")
        where = program.label
        gsize, lsize = check_geometry(self.info, global_size, local_size, self._default_local_size, program, where)
        checked, buffers = self._check_args(program, args, where)
        return checked, gsize, lsize, buffers

    # -- recordings ------------------------------------------------------------------
    def record(self) -> "Recording":
        """A new recording: launches and copies checked once, replayed as one submission."""
        from .recording import Recording

        self._check_open()
        return Recording(self)

    def _build_recording(self, items: list[Any]) -> Any:
        """The native form of recorded items (default: the items, replayed one submission each)."""
        return list(items)

    def _replay_recording(self, native: Any, waits: list[Event]) -> Event:
        """Submit a recording's native form after ``waits`` (native events); returns the last item's event."""
        event: Event | None = None
        for item in native:
            if item.kind == "launch":
                event = self._launch(item.program, item.args, item.global_size, item.local_size, waits)
            elif item.kind == "copy":
                event = self.pool._copy(item.dst, item.src, waits)
            else:
                event = item.fn.native(*item.call_args, waits)
            waits = [event]
        return event if event is not None else CompletedEvent("empty replay", device=self)

    def _release_recording(self, native: Any) -> None:
        """Free a recording's native objects once submitted replays have finished."""

    def _check_args(self, program: Program, args: Sequence[Any], where: str) -> tuple[list[Any], list[Buffer]]:
        if type(args) not in (list, tuple):
            if not isinstance(args, (list, tuple)):
                raise InvalidArgument(f"{where}: args must be a list or tuple, got {type(args).__name__}")
        plan = program.checks
        if plan is not None and len(args) == len(plan):
            # fast path: the common, valid cases; anything else gets the full check and its message
            pool, align = self.pool, self.info.view_alignment
            checked: list[Any] = []
            buffers: list[Buffer] = []
            for value, (code, ctype, lo, hi) in zip(args, plan):
                t = type(value)
                if code == _BUFFER:
                    if t is Buffer and value.pool is pool and not (value.base or value)._freed \
                            and not value.offset % align and (ctype is None or value.dtype is None
                                                              or value.dtype is ctype):
                        buffers.append(value)
                        checked.append(value)
                        continue
                elif code == _INT:
                    if t is int and lo <= value <= hi:
                        checked.append(ctype(value))
                        continue
                elif code == _FLOAT:
                    if t is float and not hi < abs(value) < _INF:  # (a finite value beyond the type: full check)
                        checked.append(ctype(value))
                        continue
                break
            else:
                return checked, buffers
        return self._check_args_fully(program, args, where)

    def _check_args_fully(self, program: Program, args: Sequence[Any], where: str) -> tuple[list[Any], list[Buffer]]:
        sig = program.signature
        if sig is not None and len(args) != len(sig):
            raise InvalidArgument(f"{where}: kernel takes {len(sig)} arguments, got {len(args)}")
        checked: list[Any] = []
        buffers: list[Buffer] = []
        align = self.info.view_alignment
        pool = self.pool
        for i, value in enumerate(args):
            spec = sig[i] if sig is not None else Arg(f"#{i}", "any")
            if isinstance(value, Buffer):
                if spec.kind == "scalar":
                    raise InvalidArgument(f"{where}: argument {spec.name!r} is a {spec.dtype} scalar, got a buffer")
                if value.pool is not pool:
                    raise InvalidArgument(f"{where}: argument {spec.name!r} is a buffer of {value.pool.device.id}, "
                                          f"not of {self.id}")
                value.check_alive(where)
                if value.offset % align:
                    raise InvalidArgument(f"{where}: argument {spec.name!r} is a view at offset {value.offset}, "
                                          f"not a multiple of the device's view alignment ({align} bytes)")
                check_buffer(value, spec, where)
                buffers.append(value)
                checked.append(value)
            elif spec.kind == "buffer":
                raise InvalidArgument(f"{where}: argument {spec.name!r} must be a Buffer, got {type(value).__name__}")
            else:
                checked.append(check_scalar(value, spec, where))
        return checked, buffers

    # -- in-order submission ---------------------------------------------------------
    @protected
    def _submit(self, label: str, op: Op, wait: Sequence[Event], keepalive: Sequence[Any],
                buffers: Sequence[Buffer], hold: bool = False) -> Event:
        """Run ``op(native_waits)`` now if every wait is native or done, else defer it behind them; ``hold``
        defers it until every wait is complete, native ones too (an op that reads host memory when enqueued).

        The returned event keeps ``keepalive`` (host arrays, buffers, programs) alive until it completes.
        """
        if wait:
            wait = check_events(wait, label)
        hold = hold and any(not e.done for e in wait)
        with self._submit_lock:
            if self._closed:
                self._check_open()
            if self._backlog or hold:
                event = self._defer(label, op, wait, keepalive, hold)
            else:
                natives = self._natives(wait, label) if wait else []
                if natives is None:
                    event = self._defer(label, op, wait, keepalive)
                elif type(natives) is list:
                    event = self._run_op(op, natives, label)
                    if not event._done:
                        event._keepalive = keepalive
                else:
                    event = natives
            self._tail = weakref.ref(event)
        if not event._done:  # (a freed buffer waits for pending work only; this device's earlier work is done too)
            key = id(self)
            for b in buffers:
                (b if b.base is None else b.base)._uses[key] = event  # (its root's)
        return event

    def _natives(self, wait: tuple[Event, ...], label: str) -> list[Event] | Event | None:
        """Native events to wait on; a failed Event if a wait failed; None if a wait must be deferred."""
        natives = []
        for e in wait:
            if isinstance(e, DeferredEvent) and e.native is not None and self._is_native(e.native):
                e = e.native
            if self._is_native(e):
                if e._done and e._error is not None:
                    return CompletedEvent(label, dependency_error(e, label), self)
                natives.append(e)
            elif e.done:
                if e.error is not None:
                    return CompletedEvent(label, dependency_error(e, label), self)
            else:
                return None
        return natives

    def _run_op(self, op: Op, natives: list[Event], label: str) -> Event:
        try:
            return op(natives)
        except DeviceLayerError:
            raise
        except MemoryError as exc:
            from .errors import OutOfMemory
            raise OutOfMemory(f"{label}: {exc}") from exc
        except Exception as exc:
            raise LaunchError(f"{label}: {exc}") from exc

    def _defer(self, label: str, op: Op, wait: tuple[Event, ...], keepalive: Sequence[Any],
               hold: bool = False) -> Event:
        event = DeferredEvent(label, self, keepalive)
        self._backlog.append((event, op, wait, hold))
        for e in wait:
            if hold or not self._is_native(e):
                e._on_done(self._kick)
        if len(self._backlog) == 1:
            dispatcher.post(self._drain)
        return event

    def _kick(self, _: Event) -> None:
        dispatcher.post(self._drain)

    def _drain(self) -> None:
        """Submit deferred work from the head of the backlog while its waits allow (dispatcher thread)."""
        with self._submit_lock:
            while self._backlog:
                event, op, wait, hold = self._backlog[0]
                if hold and not all(e.done for e in wait):
                    return
                natives = self._natives(wait, event.label)
                if natives is None:
                    return
                self._backlog.popleft()
                if isinstance(natives, Event):
                    event._finish(natives.error)
                    continue
                if self._closed:
                    event._finish(LaunchError(f"{event.label}: device {self.id} was closed"))
                    continue
                try:
                    event.bind(self._run_op(op, natives, event.label))
                except Exception as exc:
                    event._finish(exc)

    # -- lifetime --------------------------------------------------------------------
    def synchronize(self) -> None:
        """Block until all work submitted to the device so far has finished."""
        if self._forked:
            self._check_open()
        callback_thread = callback_threads.enter_wait()
        try:
            self._wait_backlog(None)
            self._synchronize()
        finally:
            if callback_thread:
                callback_threads.leave_wait()

    def close(self, timeout: float | None = None) -> None:
        """Wait for the device's work, then free everything it holds. Further use raises.

        ``timeout``: how long to wait for work still deferred behind events that have not completed (a user
        event never set); that work then fails with LaunchError instead of holding the close forever."""
        if self._closed:
            return
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                    or not timeout >= 0):
            raise InvalidArgument(f"close: timeout must be a number of seconds >= 0, or None; got {timeout!r}")
        try:
            if not self._wait_backlog(timeout):
                self._fail_backlog(f"device {self.id} was closed before the work it waited for completed")
            self.synchronize()
        finally:
            with self._submit_lock:
                self._closed = True
            self._close()

    def _wait_backlog(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the deferred work to be submitted; False if some is still waiting."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._submit_lock:
                tail = self._backlog[-1][0] if self._backlog else None
            if tail is None:
                return True
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not tail._signal().wait(left):
                return False

    def _fail_backlog(self, why: str) -> None:
        """Fail every deferred submission with LaunchError(``why``): their waits will not complete."""
        with self._submit_lock:
            pending = list(self._backlog)
            self._backlog.clear()
        for event, _op, wait, _hold in pending:
            event._finish(LaunchError(f"{event.label}: {why}"))

    def _check_open(self) -> None:
        if self._closed:
            if self._forked:
                raise BackendUnavailable(
                    f"{self.id}: device was created before os.fork(); its threads, driver state and queued work "
                    f"stay in the parent process, so this child cannot use it (nor its buffers, programs, "
                    f"recordings, tensors or plans).  Get devices afresh in the child with devicelayer.device() "
                    f"(where the backend allows it), or start processes that use devices with multiprocessing's "
                    f"'spawn' or 'forkserver' method")
            raise InvalidArgument(f"{self.id}: device was closed")

    # -- process lifecycle (devicelayer/lifecycle.py) ---------------------------------------------------------
    def _after_fork_in_child(self) -> None:
        """In a forked child: refuse every further call; fresh locks (a thread of the parent may have held one)."""
        self._forked = True
        self._closed = True
        self._submit_lock = threading.RLock()
        self._compile_lock = threading.Lock()
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool._lock = threading.Lock()

    def _has_pending_work(self) -> bool:
        """True while work submitted to the device has not finished (asked of the driver without blocking)."""
        if self._closed:
            return False
        if self._backlog:
            return True
        tail = self._tail() if self._tail is not None else None
        try:
            return tail is not None and not tail.done
        except Exception:  # the driver cannot say: count it as running
            return True

    def __repr__(self) -> str:
        return f"<Device {self.id}: {self.info.name}>"
