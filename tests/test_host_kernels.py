"""The host kernels' fast paths: ops computing straight into the output buffers (``Op.reference_into``), work
split over helper threads, the fallback where an output overlaps an input, and views without copies."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
import devicelayer.kernels.op as op_module
from devicelayer.kernels.op import OPS, Alias, TensorType
from devicelayer.kernels.ops.elementwise import relu_into
from devicelayer.kernels.ops.windows import padded
from devicelayer.kernels.runner import plan_for, run
from devicelayer.tensors import tensor
from op_cases import all_cases, reference64, run_and_reference

CASES = [c for c in all_cases() if c.dtype in ("float32", "float64") and not c.exact]


@pytest.fixture
def host():
    return dl.device("host")


def _check(got, want, case=None):
    for g, w in zip(got, want):
        w = np.asarray(w)
        scale = max(1.0, float(np.max(np.abs(w)))) if w.size else 1.0
        rtol = (case.rtol if case and case.rtol else None) or (2e-5 if g.dtype == np.float32 else 1e-10)
        atol = ((case.atol if case and case.atol else None) or rtol) * scale
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}[{c.id}]" for c in CASES])
def test_every_case_split_over_threads(host, rng, monkeypatch, case):
    """Every float case again with ``parallel`` splitting even the smallest work: each piece must write its
    own part of the output."""
    monkeypatch.setattr(op_module, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(op_module, "HOST_THREADS", 3)  # more pieces than this VM has cores: uneven splits
    monkeypatch.setattr(op_module, "_helpers", None)
    result = run_and_reference(host, case.op, case.make(rng), case.attrs)
    if result is None:
        pytest.skip("not taken by the host")
    got, want, _ = result
    _check(got, want, case)


CONV = [  # (X, W, attrs): the host's choice between contiguous runs and im2col, grouped and batched
    ((2, 8, 30, 30), (16, 8, 3, 3), {"pads": [1, 1, 1, 1], "activation": "relu"}),  # runs (little waste)
    ((2, 8, 6, 6), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),  # im2col (runs would add 1/3 columns)
    ((2, 12, 20, 20), (24, 4, 3, 3), {"group": 3, "pads": [1, 1, 1, 1], "activation": "relu"}),  # grouped runs
    ((2, 12, 21, 20), (12, 1, 3, 3), {"group": 12, "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # depthwise s2
    ((1, 6, 17, 19), (12, 1, 3, 5), {"group": 6, "dilations": [2, 1], "pads": [2, 2, 1, 2]}),  # multiplier 2
    ((2, 12, 9, 9), (24, 3, 1, 1), {"group": 4, "activation": "relu"}),  # grouped 1x1: no im2col copy
    ((1, 4, 40), (6, 4, 5), {"pads": [2, 2]}),  # 1-D runs
]


@pytest.mark.parametrize("xs,ws,attrs", CONV)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv_paths(host, rng, monkeypatch, xs, ws, attrs, dtype):
    monkeypatch.setattr(op_module, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(type(host), "vendor_op", lambda self, name: None)  # the NumPy paths, float32 too
    arrays = [rng.uniform(-2, 2, xs).astype(dtype), rng.uniform(-2, 2, ws).astype(dtype),
              rng.uniform(-2, 2, ws[0]).astype(dtype)]
    got, want, _ = run_and_reference(host, "conv", arrays, attrs)
    _check(got, want)


def test_conv_bands_of_groups(host, rng, monkeypatch):
    """Grouped convs whose im2col is larger than a band are multiplied a few groups at a time."""
    from devicelayer.kernels.ops import conv
    monkeypatch.setattr(conv, "_CHUNK_BYTES", 4096)
    monkeypatch.setattr(type(host), "vendor_op", lambda self, name: None)  # the NumPy path
    arrays = [rng.uniform(-2, 2, (1, 16, 12, 12)).astype("float32"),
              rng.uniform(-2, 2, (16, 2, 3, 3)).astype("float32"), rng.uniform(-2, 2, 16).astype("float32")]
    for attrs in ({"group": 8, "pads": [1, 1, 1, 1]}, {"group": 8, "strides": [2, 2]}):
        got, want, _ = run_and_reference(host, "conv", arrays, attrs)
        _check(got, want)


def test_relu_into_keeps_nan_and_handles_any_layout():
    x = np.linspace(-3, 3, 3 * 4099, dtype=np.float32).reshape(3, 4099)  # a tail past the rows of zeros
    x[0, :3] = [np.nan, -np.inf, np.inf]
    out = np.empty_like(x)
    relu_into(x, out)
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    strided = x[:, ::2]  # not C-ordered: done in place through the strided view
    target = np.full_like(x, 7.0)
    relu_into(strided, target[:, ::2])
    np.testing.assert_array_equal(target[:, ::2], np.maximum(strided, 0))
    np.testing.assert_array_equal(target[:, 1::2], 7.0)


def test_padded_fills_only_borders_with_the_value():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    got = padded(x, (1, 2), (3, 0), value=-7.0)
    want = np.full((2, 3, 8, 7), -7.0)
    want[:, :, 1:5, 2:7] = x
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name,attrs,shape", [
    ("relu", {}, (2, 3, 5, 5)),
    ("add", {}, (2, 3, 5, 5)),
    ("conv", {"pads": [1, 1, 1, 1]}, (1, 4, 6, 6)),
    ("max_pool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, (1, 4, 6, 6)),
    ("softmax", {"axis": 1}, (3, 7)),
    ("lrn", {"size": 3}, (1, 5, 4, 4)),  # reads its input again after writing the output
])
def test_output_over_an_input_is_computed_apart(host, rng, name, attrs, shape):
    """An eager call whose out= is one of its inputs: the result is computed before the input is overwritten."""
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    arrays = [x]
    if name == "add":
        arrays.append(rng.uniform(-2, 2, shape).astype(np.float32))
    if name == "conv":
        arrays.append(rng.uniform(-1, 1, (shape[1], shape[1], 3, 3)).astype(np.float32))
    want = reference64(name, arrays, attrs)[0]
    ins = [tensor(a, host).reshape(a.shape) for a in arrays]
    run(name, ins, out=[ins[0]], **attrs)
    np.testing.assert_allclose(ins[0].numpy(), want, rtol=2e-5, atol=2e-5 * max(1.0, np.abs(want).max()))


def test_views_are_aliases_on_the_host(host):
    op = OPS["reshape"]
    ins = [TensorType((2, 3, 4), np.dtype("float32"))]
    attrs, outs = op.prepare(ins, {"shape": [6, 4]})
    assert [type(s) for s in plan_for(op, host, ins, outs, attrs).steps] == [Alias]
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (y,) = run("reshape", [tensor(x, host).reshape(x.shape)], shape=[6, 4])
    np.testing.assert_array_equal(y.numpy(), x.reshape(6, 4))


def _pool_geometry(rnd: np.random.Generator) -> tuple[str, tuple[int, ...], dict]:
    """A random pool: kind, input shape and attributes (1 to 3 spatial dims, strides, dilations, pads or
    auto_pad, ceil_mode, count_include_pad)."""
    kind = ("max_pool", "average_pool")[rnd.integers(2)]
    nd = int(rnd.choice([1, 2, 2, 3]))
    shape = (int(rnd.integers(1, 3)), int(rnd.integers(1, 5))) + tuple(int(rnd.integers(1, 10)) for _ in range(nd))
    k = [int(rnd.integers(1, 5)) for _ in range(nd)]
    attrs = {"kernel_shape": k, "strides": [int(rnd.integers(1, 4)) for _ in range(nd)],
             "dilations": [int(rnd.integers(1, 3)) for _ in range(nd)], "ceil_mode": int(rnd.integers(2))}
    auto = ("NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")[rnd.integers(5)]
    if auto == "NOTSET":
        attrs["pads"] = [int(rnd.integers(k[i % nd])) for i in range(2 * nd)]
    else:
        attrs["auto_pad"] = auto
    if kind == "average_pool":
        attrs["count_include_pad"] = int(rnd.integers(2))
    return kind, shape, attrs


def test_pools_over_random_geometries(host, rng):
    """The host's separable pools (flattened passes at stride 1, the last axis flat when strided) against the
    float64 reference's window-by-window pool, every output written (the output starts as NaN)."""
    rnd = np.random.default_rng(20261121)
    checked = 0
    for _ in range(400):
        kind, shape, attrs = _pool_geometry(rnd)
        x = rng.standard_normal(shape).astype(rnd.choice([np.float32, np.float64]))
        try:
            checked_attrs, types = OPS[kind].prepare([TensorType.of(x.shape, x.dtype)], attrs)
        except dl.InvalidArgument:
            continue  # a geometry the op refuses (a window wider than the padded input, ...)
        want = OPS[kind].reference([x.astype(np.float64)], checked_attrs)[0]
        got = np.full(types[0].shape, np.nan, x.dtype)
        OPS[kind].reference_into([x], [got], checked_attrs)
        _check([got], [want])
        checked += 1
    assert checked > 300


@pytest.mark.timeout(60)
def test_a_parallel_call_inside_a_piece_runs_in_place():
    """A piece of a parallel call that calls parallel itself (a fused chain's block running a member op) must not
    queue behind the outer pieces on the same helpers: it would wait for threads that wait for it."""
    from devicelayer.kernels.op import HOST_THREADS, PARALLEL_MIN_BYTES, parallel

    n = 4 * max(2, HOST_THREADS)
    seen = np.zeros((n, n), np.int64)

    def outer(a, b):
        for i in range(a, b):
            def inner(c, d, i=i):
                seen[i, c:d] += 1
            parallel(inner, n, n * PARALLEL_MIN_BYTES)
    parallel(outer, n, n * PARALLEL_MIN_BYTES)
    assert (seen == 1).all()
