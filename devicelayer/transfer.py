"""transfer(): move a buffer to any pool by the fastest path available."""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from . import lifecycle
from .errors import InvalidArgument
from .events import Event, check_events, when_all
from .interrupts import protected
from .memory import Buffer, MemoryPool, check_same_dtype

#: bytes per chunk when staging through host memory (two chunks in flight)
STAGING_CHUNK = 8 << 20


@protected
def transfer(src: Buffer, dst_pool: MemoryPool, wait: Sequence[Event] = ()) -> tuple[Buffer, Event]:
    """Copy ``src`` into a new buffer of ``dst_pool``; returns (buffer, event). Never blocks.

    Paths, fastest first: a copy within the pool; a direct (peer) copy the pools
    offer; a download or upload when one side is host memory; otherwise staged
    through pinned host memory in chunks, so that both legs overlap.
    """
    if not isinstance(src, Buffer):
        raise InvalidArgument(f"transfer: expected a Buffer, got {type(src).__name__}")
    if not isinstance(dst_pool, MemoryPool):
        raise InvalidArgument(f"transfer: expected a MemoryPool, got {type(dst_pool).__name__}")
    src.check_alive("transfer")
    wait = check_events(wait, "transfer")
    dst = dst_pool.allocate(src.nbytes, src.dtype)
    try:
        event = _copy_across(dst, src, wait)
    except BaseException:
        dst_pool.free(dst)
        raise
    return dst, event


@protected
def copy_between(dst: Buffer, src: Buffer, wait: Sequence[Event] = ()) -> Event:
    """Copy ``src`` into the existing ``dst`` of the same size (and dtype, where both have one), in any two pools,
    by the fastest path."""
    if not isinstance(src, Buffer) or not isinstance(dst, Buffer):
        raise InvalidArgument("copy_between: expected two Buffers")
    if src.nbytes != dst.nbytes:
        raise InvalidArgument(f"copy_between: destination has {dst.nbytes} bytes, source has {src.nbytes}")
    check_same_dtype(dst.dtype, src.dtype, "copy_between")
    src.check_alive("copy_between (source)")
    dst.check_alive("copy_between (destination)")
    return _copy_across(dst, src, check_events(wait, "copy_between"))


def _copy_across(dst: Buffer, src: Buffer, wait: tuple[Event, ...]) -> Event:
    src_pool, dst_pool = src.pool, dst.pool
    if src_pool is dst_pool:
        return src_pool.copy(dst, src, wait)
    wait = wait + _queued_on_host(src) + _queued_on_host(dst)
    for pool in (src_pool, dst_pool):
        direct = pool._direct_copy(dst, src, wait)
        if direct is not None:
            return direct
    if dst_pool.maps_host_memory:
        return _after(src_pool.download(_bytes(src), dst_pool.host_view(dst), wait), dst)
    if src_pool.maps_host_memory:
        return _after(dst_pool.upload(_bytes(dst), src_pool.host_view(src), wait), src)
    return _staged(dst, src, wait)


def _queued_on_host(buffer: Buffer) -> tuple[Event, ...]:
    """Pending work of a host-memory buffer's own device on it: a copy across pools is submitted to the other
    device, and still comes after it (work on one device runs in submission order)."""
    if not buffer.pool.maps_host_memory:
        return ()
    own = buffer.pool.device
    return tuple(e for e in list(buffer.root._uses.values()) if e.device is own and not e.done)


def _bytes(buffer: Buffer) -> Buffer:
    """The buffer seen as raw bytes (host staging arrays are uint8)."""
    return buffer.view(0, buffer.nbytes, np.uint8)


def _after(event: Event, buffer: Buffer) -> Event:
    buffer._track(event)
    return event


class _StagingCache:
    """Pinned host chunks per source pool, reused across transfers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[int, list[np.ndarray]] = {}

    def take(self, pool: MemoryPool) -> np.ndarray:
        with self._lock:
            chunks = self._free.get(id(pool))
            if chunks:
                return chunks.pop()
        return pool.host_array(STAGING_CHUNK, np.uint8)

    def give(self, pool: MemoryPool, chunk: np.ndarray) -> None:
        with self._lock:
            chunks = self._free.setdefault(id(pool), [])
            if len(chunks) < 4:
                chunks.append(chunk)


_staging = _StagingCache()


def _reinit_after_fork() -> None:
    """In a forked child: a new cache (the chunks belong to the parent's pools, kept, never released here)."""
    global _staging
    lifecycle.keep_forever(_staging)
    _staging = _StagingCache()


lifecycle.in_forked_child(_reinit_after_fork)


def _staged(dst: Buffer, src: Buffer, wait: tuple[Event, ...]) -> Event:
    """Download chunk i into one pinned slot while chunk i-1 uploads from the other."""
    slots = [_staging.take(src.pool), _staging.take(src.pool)]
    slot_free: list[Sequence[Event]] = [wait, wait]
    uploads: list[Event] = []
    for i, start in enumerate(range(0, src.nbytes, STAGING_CHUNK)):
        n = min(STAGING_CHUNK, src.nbytes - start)
        k = i % 2
        host = slots[k][:n]
        down = src.pool.download(src.view(start, n, np.uint8), host, wait=slot_free[k])
        up = dst.pool.upload(dst.view(start, n, np.uint8), host, wait=[down])
        slot_free[k] = [up]
        uploads.append(up)
    done = when_all(uploads, f"transfer {src.nbytes} B {src.pool.device.id} -> {dst.pool.device.id}")
    done._on_done(lambda _: [_staging.give(src.pool, s) for s in slots])
    src._track(done)
    dst._track(done)
    return done
