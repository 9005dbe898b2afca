"""Constants shared by the plans of one model: each array uploaded once per device, freed when no plan uses it.

A model compiled for several signatures of input shapes has one plan per
signature; their weights are the same arrays, so they share one device copy.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..device import Device
from ..events import Event
from ..memory import Buffer


class ConstantStore:
    """Device buffers of constant arrays, keyed by device and array identity, counted by the plans holding them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (device id, array id) -> [array (kept alive: its id stays unique), buffer, holders, upload event]
        self._entries: dict[tuple[int, int], list[Any]] = {}

    def acquire(self, device: Device, array: np.ndarray) -> tuple[Buffer, Event | None]:
        """The device copy of ``array`` (uploaded on first use) and the event of its upload; one more holder."""
        key = (id(device), id(array))
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and not entry[1].freed:
                entry[2] += 1
                return entry[1], entry[3]
        buf = device.pool.allocate(max(array.nbytes, array.dtype.itemsize), array.dtype)
        event = device.pool.upload(buf.view(0, array.nbytes, array.dtype), array) if array.nbytes else None
        with self._lock:
            self._entries[key] = [array, buf, 1, event]
        return buf, event

    def release(self, device: Device, array: np.ndarray) -> None:
        """One holder less; the buffer is freed with the last."""
        key = (id(device), id(array))
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return
            entry[2] -= 1
            if entry[2] > 0:
                return
            del self._entries[key]
        if not entry[1].freed:
            device.pool.free(entry[1])

    @property
    def nbytes(self) -> int:
        """Bytes held on every device."""
        with self._lock:
            return sum(e[1].nbytes for e in self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
