"""The plan's channels-last layout through the host's oneDNN transposes, elementwise chains and slices: every pair
of layouts against NumPy, a ConvNeXt block kept channels-last from its depthwise convolution to the next block's,
and a ShuffleNet block from its shuffle through its slices (backends/host/transpose.py, backends/host/fused.py,
backends/host/slice_layout.py)."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.backends.host import dnnl as host_dnnl
from devicelayer.kernels.op import Alias, TensorType, get
from devicelayer.ops import names  # noqa: F401  (registers the op library)
from op_cases import graph_reference64

pytestmark = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")

F32 = np.dtype(np.float32)


def _memory(a: np.ndarray, last: bool) -> np.ndarray:
    """``a`` (N, C, spatial...) as the flat float32 memory of either layout."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1) if last else a, np.float32).reshape(-1)


def _read(flat: np.ndarray, shape: tuple[int, ...], last: bool) -> np.ndarray:
    """The tensor of ``shape`` that memory ``flat`` holds in either layout."""
    if not last:
        return flat.reshape(shape)
    return np.moveaxis(flat.reshape((shape[0], *shape[2:], shape[1])), -1, 1)


def _run_vendor(op, arrays, attrs, out_shape, in_last, out_last):
    """The host's vendor op for ``op``, bound in these layouts to buffers holding ``arrays`` so, run once; the
    output read back as a tensor (poisoned before)."""
    host = dl.device("host")
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    checked, outs = get(op).prepare(types, dict(attrs))
    vendor = host.vendor_op(op)
    assert vendor.accepts(types, outs, checked)
    bound = vendor.with_layout(frozenset(in_last), out_last)
    held = [i in in_last and (op in ("transpose", "slice") or a.shape == tuple(out_shape)) for i, a in enumerate(arrays)]
    ins = [dl.tensor(_memory(a, last), host) for a, last in zip(arrays, held)]
    out = dl.tensor(np.full(int(np.prod(out_shape)), np.nan, np.float32), host)
    for t in (*ins, out):
        t.ready.wait()
    call = bound.bind(types, outs, checked, [t.buffer for t in ins], [out.buffer])
    with np.errstate(all="ignore"):
        call()
    return _read(out.numpy(), tuple(out_shape), out_last)


@pytest.mark.parametrize("shape,perm", [((2, 32, 30, 20), (0, 2, 3, 1)), ((2, 30, 20, 32), (0, 3, 1, 2)),
                                        ((2, 40, 33, 17), (0, 1, 3, 2)), ((3, 48, 700), (0, 2, 1)),
                                        ((4, 32, 6, 7, 9), (0, 2, 3, 4, 1)), ((4, 32, 6, 7, 9), (4, 1, 0, 3, 2))])
@pytest.mark.parametrize("x_last", [False, True])
@pytest.mark.parametrize("y_last", [False, True])
def test_transposes_read_and_write_either_layout(shape, perm, x_last, y_last, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    want = np.transpose(x, perm)
    got = _run_vendor("transpose", [x], {"perm": perm}, want.shape, {0} if x_last else set(), y_last)
    np.testing.assert_array_equal(got, want)


def test_a_transpose_whose_layouts_keep_the_bytes_is_one_copy(rng):
    """(N, C, H, W) held channels-last to (N, H, W, C) plain, and back: the same bytes, copied, no reorder."""
    host = dl.device("host")
    x = rng.standard_normal((1, 96, 24, 24)).astype(np.float32)
    before = set(host.onednn_layers)
    got = _run_vendor("transpose", [x], {"perm": (0, 2, 3, 1)}, (1, 24, 24, 96), {0}, False)
    np.testing.assert_array_equal(got, np.transpose(x, (0, 2, 3, 1)))
    back = _run_vendor("transpose", [got], {"perm": (0, 3, 1, 2)}, x.shape, set(), True)
    np.testing.assert_array_equal(back, x)
    made = {k for k in set(host.onednn_layers) - before if k[0] == "transpose" and len(k[1]) == 4}
    assert not made, made  # (a strided reorder's key holds both strides)


def _steps(*steps):
    return tuple((op, attrs, tuple(operands)) for op, attrs, operands in steps)


# (steps, input shapes): a per-channel scale, a residual of the output's shape, a unary first step
CHAINS = [
    (_steps(("mul", {}, (0, 1)), ("add", {}, (3, 2))), [(64, 1, 1), (2, 64, 18, 20), (2, 64, 18, 20)]),
    (_steps(("add", {}, (0, 1)), ("sigmoid", {}, (3,)), ("mul", {}, (4, 2))), [(2, 64, 18, 20), (1, 64, 1, 1),
                                                                             (2, 64, 18, 20)]),
    (_steps(("tanh", {}, (0,)), ("mul", {}, (2, 1)), ("sub", {}, (3, 0))), [(1, 48, 30, 30), (48, 1, 1)]),
]


@pytest.mark.parametrize("case", range(len(CHAINS)))
@pytest.mark.parametrize("in_last", ["none", "first", "all"])
@pytest.mark.parametrize("y_last", [False, True])
def test_elementwise_chains_read_and_write_either_layout(case, in_last, y_last, rng):
    """Every input of the output's shape channels-last, only the first, or none; the output either way (mixed
    layouts go through reorders into the chain's own)."""
    steps, shapes = CHAINS[case]
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    full = [i for i, s in enumerate(shapes) if len(s) == 4 and s[0] * s[2] > 1]
    last = {"none": set(), "first": set(full[:1]), "all": set(full)}[in_last]
    attrs = {"steps": steps, "outputs": (len(steps) - 1,)}
    checked, _ = get("fused_elementwise").prepare([TensorType(a.shape, a.dtype) for a in arrays], attrs)
    want = get("fused_elementwise").reference([a.astype(np.float64) for a in arrays], checked)[0]
    got = _run_vendor("fused_elementwise", arrays, attrs, want.shape, last, y_last)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-5, atol=2e-5)


def test_a_convnext_block_stays_channels_last_from_convolution_to_convolution(rng):
    """Depthwise convolution, to (N, H, W, C), layer norm, two products around GELU, back, a per-channel scale
    and the residual, then the next convolution: the result the float64 reference's, the transposes aliases of
    their inputs and the chain bound channels-last on the convolutions' sides."""
    c, h = 64, 24  # (transposes of fewer than 32768 elements run NumPy, in the graph's layout)
    g = dl.Graph()
    x = g.input("x", (1, c, h, h))
    stem = g.conv(x, g.constant((rng.standard_normal((c, c, 1, 1)) / np.sqrt(c)).astype(np.float32)), name="stem")
    dw = g.conv(stem, g.constant((rng.standard_normal((c, 1, 7, 7)) / 7).astype(np.float32)), pads=[3, 3, 3, 3],
                group=c, name="dw")
    t = g.transpose(dw, perm=[0, 2, 3, 1], name="to_last")
    n = g.layer_normalization(t, g.constant(rng.uniform(0.5, 1.5, c).astype(np.float32)),
                              g.constant(rng.standard_normal(c).astype(np.float32)), axis=-1, name="norm")
    up = g.matmul(n, g.constant((rng.standard_normal((c, 4 * c)) / np.sqrt(c)).astype(np.float32)), name="up")
    act = g.gelu(up, name="gelu")
    down = g.matmul(act, g.constant((rng.standard_normal((4 * c, c)) / np.sqrt(4 * c)).astype(np.float32)),
                    name="down")
    back = g.transpose(down, perm=[0, 3, 1, 2], name="to_first")
    scaled = g.mul(g.constant(rng.uniform(0.1, 1, (c, 1, 1)).astype(np.float32)), back, name="scale")
    res = g.add(scaled, stem, name="residual")
    g.output("y", g.conv(res, g.constant((rng.standard_normal((c, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)),
                         pads=[1, 1, 1, 1], name="next"))
    plan = g.compile(["host"])
    try:
        feeds = {"x": rng.standard_normal((1, c, h, h)).astype(np.float32)}
        np.testing.assert_allclose(plan(**feeds)["y"], graph_reference64(g, feeds)["y"], rtol=1e-4, atol=1e-4)
        from devicelayer.kernels.runner import vendor_of

        steps = {s.node.name: s for s in plan._prepared.steps if s.kind == "node"}
        vendors = {name: vendor_of(s.op_plan) for name, s in steps.items()}
        assert vendors["dw"]._binding.out_last
        for name in ("to_last", "to_first"):  # (held channels-last on the convolutions' sides: the same bytes)
            assert steps[name].op_plan.steps == [Alias(0, 0)], name
        [chain] = [name for name in steps if name.startswith("elementwise")]
        assert vendors[chain]._out_last and len(vendors[chain]._in_last) == 2
        assert vendors["next"]._binding.in_last == {0} and vendors["stem"]._binding.out_last
    finally:
        plan.release()


SLICES = [({"starts": [0], "ends": [6], "axes": [1]}, (2, 12, 7, 5)),
          ({"starts": [6], "ends": [12], "axes": [1]}, (2, 12, 7, 5)),
          ({"starts": [-2, 1], "ends": [-100, 6], "axes": [1, 3], "steps": [-3, 2]}, (2, 12, 7, 5)),
          ({"starts": [1, 0], "ends": [3, 9], "axes": [2, 0], "steps": [1, 1]}, (2, 12, 7, 5)),
          ({"starts": [2], "ends": [5], "axes": [-1]}, (3, 8, 9)),
          ({"starts": [0, 4], "ends": [1, 40], "axes": [0, 1]}, (2, 16, 3, 4, 5))]


@pytest.mark.parametrize("attrs,shape", SLICES, ids=[str(i) for i in range(len(SLICES))])
@pytest.mark.parametrize("x_last", [False, True])
@pytest.mark.parametrize("y_last", [False, True])
def test_slices_read_and_write_either_layout(attrs, shape, x_last, y_last, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    checked, _ = get("slice").prepare([TensorType(x.shape, x.dtype)], dict(attrs))
    want = get("slice").reference([x], checked)[0]
    got = _run_vendor("slice", [x], attrs, want.shape, {0} if x_last else set(), y_last)
    np.testing.assert_array_equal(got, want)


def test_the_host_leaves_other_slices_to_numpy():
    """Slices of other dtypes or ranks are not the layout's: the op's NumPy step runs them."""
    host = dl.device("host")
    vendor = host.vendor_op("slice")
    attrs = get("slice").check([TensorType((4, 6), F32)], {"starts": [1], "ends": [3]})
    assert not vendor.accepts([TensorType((4, 6), F32)], [TensorType((2, 6), F32)], attrs)
    i64 = np.dtype(np.int64)
    assert not vendor.accepts([TensorType((2, 4, 6), i64)], [TensorType((1, 4, 6), i64)], attrs)


def test_a_shufflenet_block_stays_channels_last_through_its_slices(rng):
    """conv -> channel shuffle -> two slices of the channels -> conv (one half) -> concat with the other half: the
    result the float64 reference's, with the slices reading and writing channels-last between oneDNN's ops."""
    c, h = 32, 20
    g = dl.Graph()
    x = g.input("x", (1, c, h, h))

    def conv(v, cin, cout, name, k=1):
        w = g.constant((rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32))
        b = g.constant(rng.standard_normal(cout).astype(np.float32))
        return g.conv(v, w, b, pads=[k // 2] * 4, activation="relu", name=name)

    stem = conv(x, c, c, "stem")
    shuffled = g.channel_shuffle(stem, group=2, name="shuffle")
    half = g.slice(shuffled, starts=[0], ends=[c // 2], axes=[1], name="first")
    rest = g.slice(shuffled, starts=[c // 2], ends=[c], axes=[1], name="second")
    branch = conv(conv(rest, c // 2, c // 2, "b1"), c // 2, c // 2, "b2", 3)
    joined = g.concat(half, branch, axis=1, name="join")
    g.output("y", conv(joined, c, c, "head"))
    plan = g.compile(["host"])
    try:
        feeds = {"x": rng.standard_normal((1, c, h, h)).astype(np.float32)}
        plan(x=np.full_like(feeds["x"], np.nan))
        np.testing.assert_allclose(plan(**feeds)["y"], graph_reference64(g, feeds)["y"], rtol=1e-4, atol=1e-4)
        from devicelayer.kernels.runner import vendor_of

        vendors = {s.node.name: vendor_of(s.op_plan) for s in plan._prepared.steps if s.kind == "node"}
        for name in ("first", "second"):
            assert vendors[name]._binding.in_last == {0} and vendors[name]._binding.out_last
        assert vendors["shuffle"]._binding.out_last and vendors["join"]._binding.in_last == {0, 1}
        assert vendors["b1"]._binding.in_last == {0}
    finally:
        plan.release()
