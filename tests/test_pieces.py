"""Split and concat as one launch per ``pieces.PIECES`` pieces (devicelayer/kernels/ops/pieces.py), on every
device: axes first, middle and last, uneven and empty pieces, more pieces than one launch takes, every copy width;
against NumPy with the outputs poisoned, and the launches counted."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import Launch, TensorType, get
from devicelayer.kernels.ops.pieces import PIECES

CASES = {
    "last axis, GPT-2's q k v": ((6, 12), -1, [4, 4, 4]),
    "first axis, uneven": ((7, 3, 2), 0, [2, 4, 1]),
    "middle axis, an empty piece": ((2, 9, 5), 1, [3, 0, 6]),
    "more pieces than a launch takes": ((3, 23, 2), 1, [1, 2, 3, 1, 2, 1, 1, 2, 3, 1, 2, 4]),
    "one long piece and one short": ((4, 130), 1, [129, 1]),
}
DTYPES = [np.float32, np.float16, np.int64, np.bool_, np.uint8]


def _needs(device, dtype):
    if np.dtype(dtype).name not in device.info.dtypes:
        pytest.skip(f"{device.id} has no {np.dtype(dtype).name}")


def _array(rng, shape, dtype):
    if np.dtype(dtype) == np.bool_:
        return rng.random(shape) < 0.5
    return (rng.standard_normal(shape) * 50).astype(dtype)


def _launches(op: str, ins: list[TensorType], attrs: dict, info) -> int:
    op_ = get(op)
    checked, outs = op_.prepare(ins, attrs)
    return sum(1 for s in op_.plan(ins, outs, checked, info).steps if isinstance(s, Launch))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", list(CASES))
def test_split_writes_every_piece_in_few_launches(device, case, dtype, rng):
    shape, axis, sizes = CASES[case]
    _needs(device, dtype)
    x = _array(rng, shape, dtype)
    want = np.split(x, np.cumsum(sizes)[:-1], axis=axis)
    outs = [dl.tensor(np.full(w.shape, 7, w.dtype), device) for w in want]
    dl.ops.run("split", [dl.tensor(x, device)], out=outs, axis=axis, split=sizes)
    for got, w in zip(outs, want):
        assert np.array_equal(got.numpy(), w)
    if device.info.kernel_language != "python":
        kept = sum(1 for s in sizes if s)
        assert _launches("split", [TensorType(shape, np.dtype(dtype))], {"axis": axis, "split": sizes},
                         device.info) == -(-kept // PIECES)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("case", list(CASES))
def test_concat_reads_every_piece_in_few_launches(device, case, dtype, rng):
    shape, axis, sizes = CASES[case]
    _needs(device, dtype)
    pieces = []
    for s in sizes:
        piece = list(shape)
        piece[axis] = s
        pieces.append(_array(rng, piece, dtype))
    want = np.concatenate(pieces, axis=axis)
    out = dl.tensor(np.full(want.shape, 7, want.dtype), device)
    dl.ops.run("concat", [dl.tensor(p, device) for p in pieces], out=[out], axis=axis)
    assert np.array_equal(out.numpy(), want)
    if device.info.kernel_language != "python":
        kept = sum(1 for s in sizes if s)
        assert _launches("concat", [TensorType(p.shape, p.dtype) for p in pieces], {"axis": axis},
                         device.info) == -(-kept // PIECES)


def test_a_split_feeding_a_concat_in_a_plan(device, rng):
    """split -> tanh of one piece -> concat of the pieces reordered, compiled: matches NumPy."""
    g = dl.Graph()
    x = g.input("x", (3, 10, 4))
    a, b, c = g.apply("split", [x], axis=1, split=[3, 5, 2])
    g.output("y", g.concat(c, g.tanh(a), b, axis=1))
    plan = g.compile([device])
    try:
        xs = rng.standard_normal((3, 10, 4)).astype(np.float32)
        got = plan.run_numpy({"x": xs})["y"]
        want = np.concatenate([xs[:, 8:], np.tanh(xs[:, :3]), xs[:, 3:8]], axis=1)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    finally:
        plan.release()
