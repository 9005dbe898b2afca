"""The raw bytes of a model's initializers, copied once from the model file's mapping into one aligned block.

Asking the parsed protobuf for ``raw_data`` makes a Python ``bytes`` of every
tensor: 100 MB of fresh memory for ResNet-50, most of its cost the page faults of
memory touched for the first time.  Here the serialized model (a read-only
mapping of the file) is scanned for where each top-level initializer's
``raw_data`` lies, and the bytes are copied into one anonymous mapping whose
pages are made in one call, each tensor at a 64-byte boundary; the views are
read-only.  (Huge pages would copy faster still, but where the kernel compacts
memory for them on demand a load can stall for a fifth of a second.)

The scanner follows the protobuf wire format only as far as ModelProto.graph
(field 7), GraphProto.initializer (field 5) and TensorProto.name and raw_data
(fields 8 and 9), with protobuf's rules (a repeated singular field: the last one;
a message field repeated: merged).  Anything else it meets is skipped by its wire
type; bytes it cannot follow give None, and the caller reads the parsed message.

Parsing the protobuf copies every ``raw_data`` too (75 ms of ResNet-50's load on
the H200 machine), so ``stripped`` gives the serialized model without the
``raw_data`` of its large initializers (the lengths of the messages around them
rewritten): the caller parses that, and takes those tensors' bytes from ``read``.
Small ones (shapes, scalars, which shape inference may read) keep their bytes.
"""

from __future__ import annotations

import mmap
from typing import Any, Iterator

import numpy as np

from ..hostmemory import huge_block

ALIGNMENT = 64


class _Malformed(Exception):
    pass


def _varint(data: Any, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _records(data: Any, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, record start, payload start, record end) of each field in data[pos:end] (a
    length-delimited payload runs to its record's end)."""
    while pos < end:
        start = pos
        key, pos = _varint(data, pos, end)
        wire = key & 7
        if wire == 0:
            _, after = _varint(data, pos, end)
        elif wire == 1:
            after = pos + 8
        elif wire == 5:
            after = pos + 4
        elif wire == 2:
            size, pos = _varint(data, pos, end)
            after = pos + size
        else:  # groups (wire types 3 and 4): not in ONNX
            raise _Malformed
        if after > end:
            raise _Malformed
        yield key >> 3, wire, start, pos, after
        pos = after


def _fields(data: Any, pos: int, end: int) -> Iterator[tuple[int, int, int]]:
    """(field number, start, end) of each length-delimited field in data[pos:end]; other fields skipped."""
    for field, wire, _, start, after in _records(data, pos, end):
        if wire == 2:
            yield field, start, after


def spans(data: Any) -> list[tuple[str, int, int]] | None:
    """(name, start, end) of each top-level initializer's raw_data in a serialized ModelProto, in the order of
    ``graph.initializer`` (start -1 where it has none); None where the bytes do not scan."""
    out: list[tuple[str, int, int]] = []
    try:
        for field, start, end in _fields(data, 0, len(data)):
            if field != 7:
                continue
            for g_field, g_start, g_end in _fields(data, start, end):
                if g_field != 5:
                    continue
                name, raw = "", (-1, -1)
                for t_field, t_start, t_end in _fields(data, g_start, g_end):
                    if t_field == 8:
                        name = bytes(data[t_start:t_end]).decode("utf-8")
                    elif t_field == 9:
                        raw = (t_start, t_end)
                out.append((name, *raw))
    except (_Malformed, UnicodeDecodeError):
        return None
    return out


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _without(data: Any, pos: int, end: int, drop: Any) -> list[Any]:
    """The records of data[pos:end] as byte pieces, each length-delimited record of field ``f`` for which
    ``drop(f, payload start, payload end)`` gives None left out, and one for which it gives a list of pieces
    written with those pieces as its payload (its length rewritten)."""
    pieces: list[Any] = []
    for field, wire, start, payload, after in _records(data, pos, end):
        if wire == 2:
            inner = drop(field, payload, after)
            if inner is None:
                continue
            if inner is not True:
                pieces += [_varint_bytes(field << 3 | 2), _varint_bytes(sum(len(p) for p in inner)), *inner]
                continue
        pieces.append(data[start:after])
    return pieces


def stripped(data: Any, least: int = 4096) -> bytes | None:
    """The serialized ModelProto ``data`` without the ``raw_data`` of each top-level initializer holding ``least``
    bytes or more; None where the bytes do not scan."""
    def tensor(field: int, start: int, end: int) -> Any:
        return None if field == 9 and end - start >= least else True

    def graph(field: int, start: int, end: int) -> Any:
        return _without(data, start, end, tensor) if field == 5 else True

    try:
        return b"".join(_without(data, 0, len(data),
                                 lambda field, start, end: _without(data, start, end, graph) if field == 7 else True))
    except _Malformed:
        return None


def read(data: Any, initializers: Any, found: list[tuple[str, int, int]] | None = None
         ) -> dict[str, np.ndarray] | None:
    """name -> the raw bytes (a read-only uint8 array, 64-byte aligned) of each initializer of the parsed
    ``initializers`` that keeps its data as raw_data, copied from ``data``: the serialized model they were parsed
    from, or whose ``stripped`` form they were parsed from.  None where the scan of ``data`` (``found``:
    ``spans(data)``, given) does not match the parsed initializers."""
    found = spans(data) if found is None else found
    if found is None or len(found) != len(initializers):
        return None
    wanted: list[tuple[str, int, int]] = []
    for init, (name, start, end) in zip(initializers, found):
        if name != init.name:
            return None
        if start >= 0 and init.data_location == 0:  # (the scan saw its raw_data: stripped or not)
            wanted.append((name, start, end))
    offsets, total = [], 0
    for _, start, end in wanted:
        offsets.append(total)
        total += -(-(end - start) // ALIGNMENT) * ALIGNMENT
    block = _block(total)
    source = np.frombuffer(data, np.uint8)
    for (_, start, end), at in zip(wanted, offsets):
        block[at:at + end - start] = source[start:end]
    sealed = np.frombuffer(memoryview(block).toreadonly(), np.uint8)  # (no view of it can be made writeable)
    return {name: sealed[at:at + end - start] for (name, start, end), at in zip(wanted, offsets)}


def give_back(init: Any, read: np.ndarray | None) -> None:
    """The bytes ``read`` (its raw data, from ``read``) put back into the parsed initializer ``init`` where it was
    parsed without them (``stripped``); nothing where there are none or it holds its own."""
    if read is not None and not init.HasField("raw_data"):
        init.raw_data = read.tobytes()


def _block(nbytes: int) -> np.ndarray:
    """``nbytes`` of private anonymous memory, its pages made at once (``MAP_POPULATE``: one call instead of a
    fault per page as the copy first touches it)."""
    if nbytes == 0:
        return np.empty(0, np.uint8)
    found = huge_block(nbytes, populate=True)  # the weights, read every run: on huge pages where large enough
    if found is not None:
        return found
    try:
        area = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0))
    except (AttributeError, OSError, ValueError):  # (a system without these flags)
        return np.empty(nbytes, np.uint8)
    return np.frombuffer(area, np.uint8)
