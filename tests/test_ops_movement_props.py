"""Property tests of the data movement and pooling ops on every device, the Alias (view) path, and misuse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import devicelayer as dl
from op_cases import reference64
from devicelayer.kernels.op import OPS, TensorType
from devicelayer.kernels.runner import run
from devicelayer.ops import names  # noqa: F401  (registers the library)
from devicelayer.tensors import Tensor, tensor

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = ["float32", "float16", "int32", "int64"]


def _values(rng, shape, dtype):
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-1000, 1000, shape).astype(dtype)
    return rng.uniform(-2, 2, shape).astype(dtype)


def check(device, name, arrays, attrs, use_out=False, rtol=2e-5, atol=2e-5):
    """Run op ``name`` on ``device`` (with or without out=) and compare with its float64 reference."""
    op = OPS[name]
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    checked, outs = op.prepare(types, dict(attrs))
    if op.unsupported(types, checked, device.info) is not None:
        return
    ins = [tensor(a, device).reshape(a.shape) for a in arrays]
    if use_out:
        given_out = [Tensor(device.pool.allocate(max(t.size * t.dtype.itemsize, t.dtype.itemsize), t.dtype),
                            t.shape, t.dtype) for t in outs]
        got_t = run(name, ins, out=given_out, **attrs)
        assert all(g is o for g, o in zip(got_t, given_out))
    else:
        got_t = run(name, ins, **attrs)
    got = [t.numpy() for t in got_t]
    want = reference64(name, arrays, attrs)
    assert len(got) == len(want) == len(outs)
    for g, w, t in zip(got, want, outs):
        w = np.asarray(w)
        assert g.shape == t.shape == w.shape and g.dtype == t.dtype
        if t.dtype.kind in "iub" or name not in POOLS:
            np.testing.assert_array_equal(g, w.astype(t.dtype))
        else:
            scale = float(np.max(np.abs(w))) if w.size and np.isfinite(w).all() else 1.0
            np.testing.assert_allclose(g.astype(np.float64), w, rtol=rtol, atol=atol * max(1.0, scale))


POOLS = {"max_pool", "average_pool", "global_average_pool", "global_max_pool"}


def _dtype(draw, device):
    return draw(st.sampled_from([d for d in DTYPES if d in device.info.dtypes]))


shapes = st.lists(st.integers(1, 5), min_size=1, max_size=6).map(tuple)


@SETTINGS
@given(data=st.data(), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_transpose(device, data, shape, seed):
    perm = data.draw(st.permutations(range(len(shape))))
    x = _values(np.random.default_rng(seed), shape, _dtype(data.draw, device))
    check(device, "transpose", [x], {"perm": list(perm)})


@SETTINGS
@given(data=st.data(), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_slice(device, data, shape, seed):
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                              unique_by=lambda a: a % len(shape)))
    bound = st.integers(-8, 8) | st.sampled_from([2**63 - 1, -2**63, 2**31 - 1, -2**31])
    starts = [data.draw(bound) for _ in axes]
    ends = [data.draw(bound) for _ in axes]
    steps = [data.draw(st.integers(-3, 3).filter(bool)) for _ in axes]
    x = _values(np.random.default_rng(seed), shape, _dtype(data.draw, device))
    check(device, "slice", [x], {"starts": starts, "ends": ends, "axes": axes, "steps": steps})


@SETTINGS
@given(data=st.data(), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_pad(device, data, shape, seed):
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect", "wrap"]))
    begins, ends = [], []
    for d in shape:
        b = data.draw(st.integers(-d, 3))
        e = data.draw(st.integers(-(d + min(b, 0)), 3))
        kept = d + min(b, 0) + min(e, 0)
        if mode != "constant":
            top = 0 if kept == 0 else (kept - 1 if mode == "reflect" else 3)
            b, e = min(b, top), min(e, top)
        begins.append(b)
        ends.append(e)
    x = _values(np.random.default_rng(seed), shape, _dtype(data.draw, device))
    attrs = {"pads": begins + ends, "mode": mode}
    if mode == "constant":
        attrs["value"] = data.draw(st.integers(-5, 5))
    check(device, "pad", [x], attrs, use_out=data.draw(st.booleans()))


@SETTINGS
@given(data=st.data(), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_concat_and_split(device, data, shape, seed):
    rng = np.random.default_rng(seed)
    dtype = _dtype(data.draw, device)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=5))
    parts = []
    for s in sizes:
        part = list(shape)
        part[axis] = s
        parts.append(_values(rng, part, dtype))
    check(device, "concat", parts, {"axis": axis})
    x = _values(rng, shape, dtype)
    k = axis % len(shape)
    if data.draw(st.booleans()):
        n = data.draw(st.integers(1, shape[k]))
        if shape[k] - -(-shape[k] // n) * (n - 1) >= 0:
            check(device, "split", [x], {"axis": axis, "num_outputs": n})
    else:
        cuts = sorted(data.draw(st.lists(st.integers(0, shape[k]), max_size=3)))
        split = np.diff([0, *cuts, shape[k]]).tolist()
        check(device, "split", [x], {"axis": axis, "split": split})


@SETTINGS
@given(data=st.data(), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_gather(device, data, shape, seed):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dim = shape[axis]
    idx_shape = tuple(data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3)))
    idx_dtype = data.draw(st.sampled_from([d for d in ("int32", "int64") if d in device.info.dtypes]))
    idx = rng.integers(-dim, dim, idx_shape).astype(idx_dtype)
    check(device, "gather", [_values(rng, shape, _dtype(data.draw, device)), idx], {"axis": axis})


@SETTINGS
@given(data=st.data(), shape=shapes, seed=st.integers(0, 2**32 - 1), use_out=st.booleans())
def test_views(device, data, shape, seed, use_out):
    x = _values(np.random.default_rng(seed), shape, _dtype(data.draw, device))
    rank = len(shape)
    which = data.draw(st.sampled_from(["reshape", "flatten", "squeeze", "unsqueeze"]))
    if which == "reshape":
        target = list(np.random.default_rng(seed).permutation(shape))
        if data.draw(st.booleans()):
            target[data.draw(st.integers(0, rank - 1))] = -1
        attrs = {"shape": target}
    elif which == "flatten":
        attrs = {"axis": data.draw(st.integers(-rank, rank))}
    elif which == "squeeze":
        ones = [k for k, d in enumerate(shape) if d == 1]
        attrs = {"axes": data.draw(st.lists(st.sampled_from(ones), unique=True))} if ones else {}
    else:
        n = data.draw(st.integers(1, 3))
        axes = data.draw(st.lists(st.integers(-(rank + n), rank + n - 1), min_size=n, max_size=n,
                                  unique_by=lambda a: a % (rank + n)))
        attrs = {"axes": axes}
    check(device, which, [x], attrs, use_out=use_out)


@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_depth_space(device, data, seed):
    rng = np.random.default_rng(seed)
    bs = data.draw(st.integers(1, 3))
    n, c, h, w = (data.draw(st.integers(1, 3)) for _ in range(4))
    dtype = _dtype(data.draw, device)
    mode = data.draw(st.sampled_from(["DCR", "CRD"]))
    check(device, "depth_to_space", [_values(rng, (n, c * bs * bs, h, w), dtype)], {"blocksize": bs, "mode": mode})
    check(device, "space_to_depth", [_values(rng, (n, c, h * bs, w * bs), dtype)], {"blocksize": bs})


@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_pools(device, data, seed):
    nd = data.draw(st.integers(1, 3))
    name = data.draw(st.sampled_from(["max_pool", "average_pool"]))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(nd)]
    dil = [data.draw(st.integers(1, 2)) for _ in range(nd)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(nd)]
    ext = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    spatial = [data.draw(st.integers(e, e + 5)) for e in ext]
    auto_pad = data.draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dil, "auto_pad": auto_pad}
    if auto_pad == "NOTSET":
        attrs["pads"] = [data.draw(st.integers(0, e - 1)) for e in ext * 2]
    attrs["ceil_mode"] = data.draw(st.integers(0, 1))
    if name == "average_pool":
        attrs["count_include_pad"] = data.draw(st.integers(0, 1))
    dtype = data.draw(st.sampled_from([d for d in ("float32", "float16") if d in device.info.dtypes]))
    x = np.random.default_rng(seed).uniform(-2, 2, (2, 3, *spatial)).astype(dtype)
    tol = 1e-2 if dtype == "float16" else 2e-5
    check(device, name, [x], attrs, rtol=tol, atol=tol)


@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_global_pools(device, data, seed):
    shape = (data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)),
             *data.draw(st.lists(st.integers(1, 40), min_size=1, max_size=3)))
    dtype = data.draw(st.sampled_from([d for d in ("float32", "float16") if d in device.info.dtypes]))
    tol = 1e-2 if dtype == "float16" else 2e-5
    x = np.random.default_rng(seed).uniform(-2, 2, shape).astype(dtype)
    check(device, data.draw(st.sampled_from(["global_average_pool", "global_max_pool"])), [x], {}, rtol=tol, atol=tol)


def test_view_without_out_shares_storage_and_with_out_copies(device):
    x = tensor(np.arange(24, dtype=np.float32), device)
    (y,) = run("reshape", [x], shape=[2, 3, 4])
    if device.info.kernel_language != "python":
        assert y.buffer is x.buffer
    np.testing.assert_array_equal(y.numpy(), np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    out = Tensor(device.pool.allocate(24 * 4, np.float32), (4, 6), np.float32)
    run("reshape", [x], out=[out], shape=[4, 6])
    np.testing.assert_array_equal(out.numpy(), np.arange(24, dtype=np.float32).reshape(4, 6))
    same = run("squeeze", [x.reshape((1, 24))], out=[Tensor(x.buffer, (24,), np.float32, x.ready)])[0]
    np.testing.assert_array_equal(same.numpy(), np.arange(24, dtype=np.float32))


def test_gather_out_of_range_on_host_names_the_op():
    with pytest.raises(dl.InvalidArgument, match="gather"):
        OPS["gather"].reference([np.zeros((3, 2)), np.array([3])], {"axis": 0})


MISUSE = [
    ("concat", [(2, 3), (2, 4)], {"axis": 0}),
    ("concat", [(2, 3), (2, 3)], {}),
    ("concat", [(2, 3), (2, 3)], {"axis": 2}),
    ("concat", [(2, 3), (2, 3, 1)], {"axis": 0}),
    ("split", [(4, 3)], {"axis": 0}),
    ("split", [(4, 3)], {"split": [1, 2]}),
    ("split", [(4, 3)], {"split": [2, 2], "num_outputs": 2}),
    ("split", [(5, 3)], {"num_outputs": 4}),
    ("split", [(4, 3)], {"num_outputs": 0}),
    ("slice", [(4, 3)], {"starts": [0], "ends": [1], "steps": [0]}),
    ("slice", [(4, 3)], {"starts": [0, 0], "ends": [1]}),
    ("slice", [(4, 3)], {"starts": [0, 0], "ends": [1, 1], "axes": [0, -2]}),
    ("slice", [(4, 3)], {"starts": [0], "ends": [1], "axes": [2]}),
    ("slice", [(4, 3)], {"ends": [1]}),
    ("pad", [(4, 3)], {"pads": [1, 1]}),
    ("pad", [(4, 3)], {"pads": [1, 1, 1, 1], "mode": "symmetric"}),
    ("pad", [(4, 3)], {"pads": [4, 0, 0, 0], "mode": "reflect"}),
    ("pad", [(4, 3)], {"pads": [-3, 0, -2, 0]}),
    ("pad", [(4, 3)], {"pads": [1, 0, 0, 0], "value": "x"}),
    ("pad", [(0, 3)], {"pads": [1, 0, 0, 0], "mode": "edge"}),
    ("transpose", [(4, 3)], {"perm": [0, 0]}),
    ("transpose", [(4, 3)], {"perm": [0, 1, 2]}),
    ("reshape", [(4, 3)], {"shape": [5, -1]}),
    ("reshape", [(4, 3)], {"shape": [-1, -1]}),
    ("reshape", [(4, 3)], {"shape": [0, 0, 0]}),
    ("reshape", [(4, 3)], {"shape": [7]}),
    ("reshape", [(4, 3)], {"shape": [0, -1], "allowzero": 1}),
    ("flatten", [(4, 3)], {"axis": 3}),
    ("squeeze", [(4, 3)], {"axes": [0]}),
    ("squeeze", [(1, 3)], {"axes": [0, -2]}),
    ("unsqueeze", [(4, 3)], {"axes": [3]}),
    ("unsqueeze", [(4, 3)], {}),
    ("gather", [(4, 3), (2,)], {"axis": 2}),
    ("depth_to_space", [(1, 6, 2, 2)], {"blocksize": 2}),
    ("depth_to_space", [(1, 8, 2, 2)], {"blocksize": 2, "mode": "XYZ"}),
    ("depth_to_space", [(8, 2, 2)], {"blocksize": 2}),
    ("depth_to_space", [(1, 8, 2, 2)], {"blocksize": 0}),
    ("channel_shuffle", [(1, 6, 2, 2)], {"group": 4}),
    ("channel_shuffle", [(1, 6, 2, 2)], {"group": 0}),
    ("channel_shuffle", [(6,)], {"group": 2}),
    ("channel_shuffle", [(1, 6, 2, 2)], {}),
    ("space_to_depth", [(1, 2, 3, 4)], {"blocksize": 2}),
    ("space_to_depth", [(1, 2, 4, 4)], {}),
    ("max_pool", [(1, 2, 5, 5)], {}),
    ("max_pool", [(1, 2, 5, 5)], {"kernel_shape": [2]}),
    ("max_pool", [(1, 2, 5, 5)], {"kernel_shape": [2, 2], "strides": [0, 1]}),
    ("max_pool", [(1, 2, 5, 5)], {"kernel_shape": [2, 2], "pads": [1, 1]}),
    ("max_pool", [(1, 2, 5, 5)], {"kernel_shape": [2, 2], "pads": [-1, 0, 0, 0]}),
    ("max_pool", [(1, 2, 5, 5)], {"kernel_shape": [7, 2]}),
    ("max_pool", [(1, 2, 5, 5)], {"kernel_shape": [2, 2], "auto_pad": "SAME"}),
    ("max_pool", [(1, 2, 5, 5)], {"kernel_shape": [2, 2], "auto_pad": "VALID", "pads": [1, 1, 1, 1]}),
    ("max_pool", [(1, 2, 5, 5)], {"kernel_shape": [2, 2], "ceil_mode": 2}),
    ("max_pool", [(5, 5)], {"kernel_shape": [2, 2]}),
    ("max_pool", [(1, 2, 5, 5)], {"kernel_shape": [2, 2], "count_include_pad": 1}),
    ("average_pool", [(1, 2, 5, 5)], {"kernel_shape": [2, 2], "count_include_pad": 3}),
    ("average_pool", [(1, 2, 5, 5)], {"kernel_shape": [2, 2], "storage_order": 0}),
    ("average_pool", [(1, 2, 2, 2, 2, 2)], {"kernel_shape": [1, 1, 1, 1]}),
    ("global_average_pool", [(2, 3)], {}),
    ("global_max_pool", [(2, 3, 0)], {}),
    ("global_max_pool", [(2, 3, 4)], {"axes": [2]}),
]


@pytest.mark.parametrize("name,shapes,attrs", MISUSE, ids=[f"{m[0]}-{i}" for i, m in enumerate(MISUSE)])
def test_misuse_raises_naming_the_op(name, shapes, attrs):
    types = [TensorType.of(s, np.int64 if name == "gather" and k == 1 else np.float32) for k, s in enumerate(shapes)]
    with pytest.raises(dl.InvalidArgument, match=name):
        OPS[name].prepare(types, attrs)


@pytest.mark.parametrize("name", ["max_pool", "average_pool", "global_average_pool", "global_max_pool"])
def test_pools_refuse_integers(name):
    attrs = {"kernel_shape": [2, 2]} if name in ("max_pool", "average_pool") else {}
    with pytest.raises(dl.InvalidArgument, match=name):
        OPS[name].prepare([TensorType.of((1, 2, 4, 4), np.int32)], attrs)


def test_gather_refuses_float_indices():
    with pytest.raises(dl.InvalidArgument, match="gather"):
        OPS["gather"].prepare([TensorType.of((4, 3), np.float32), TensorType.of((2,), np.float32)], {})


def test_concat_mixed_dtypes_refused():
    with pytest.raises(dl.InvalidArgument, match="concat"):
        OPS["concat"].prepare([TensorType.of((4, 3), np.float32), TensorType.of((4, 3), np.int32)], {"axis": 0})


def test_misuse_through_run_leaves_device_working(device):
    x = tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device)
    with pytest.raises(dl.InvalidArgument, match="transpose"):
        run("transpose", [x], perm=[1, 1])
    with pytest.raises(dl.InvalidArgument, match="pad"):
        run("pad", [x], pads=[1, 2, 3])
    (y,) = run("transpose", [x])
    np.testing.assert_array_equal(y.numpy(), np.arange(12, dtype=np.float32).reshape(3, 4).T)


def test_checked_attributes_check_again_to_themselves():
    """The graph executor re-checks checked attributes: check must be idempotent."""
    from op_cases import all_cases

    mine = {"max_pool", "average_pool", "global_average_pool", "global_max_pool", "concat", "split", "slice", "pad",
            "transpose", "reshape", "flatten", "squeeze", "unsqueeze", "gather", "depth_to_space", "space_to_depth",
            "channel_shuffle"}
    rng = np.random.default_rng(0)
    for case in [c for c in all_cases() if c.op in mine]:
        op = OPS[case.op]
        types = [TensorType(a.shape, a.dtype) for a in case.make(rng)]
        once, outs = op.prepare(types, dict(case.attrs))
        twice, outs2 = op.prepare(types, dict(once))
        assert twice == once and outs2 == outs, case.id


def _onnxruntime(op_type, arrays, attrs, consts=(), n_out=1, opset=19):
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper, numpy_helper

    in_names = [f"i{k}" for k in range(len(arrays))]
    graph_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                for n, a in zip(in_names, arrays)]
    inits = [numpy_helper.from_array(np.asarray(c), f"c{k}") for k, c in enumerate(consts)]
    out_type = helper.np_dtype_to_tensor_dtype(arrays[0].dtype)
    graph_out = [helper.make_tensor_value_info(f"o{k}", out_type, None) for k in range(n_out)]
    node = helper.make_node(op_type, in_names + [f"c{k}" for k in range(len(consts))],
                            [f"o{k}" for k in range(n_out)], **attrs)
    model = helper.make_model(helper.make_graph([node], "g", graph_in, graph_out, inits),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(in_names, arrays)))


def _ours(name, arrays, attrs):
    op = OPS[name]
    checked, _ = op.prepare([TensorType(a.shape, a.dtype) for a in arrays], dict(attrs))
    return op.reference(arrays, checked)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_pool_reference_matches_onnxruntime(data, seed):
    """Where the ONNX spec and onnxruntime agree: onnxruntime leaves dilation out of SAME pads, and a
    SAME pad would be negative (stride past the window) it refuses (MaxPool) or shifts windows (AveragePool)."""
    nd = data.draw(st.integers(1, 3))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(nd)]
    strides = [data.draw(st.integers(1, k)) for k in kernel]
    auto_pad = data.draw(st.sampled_from(["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    dil = [1] * nd if auto_pad.startswith("SAME") else [data.draw(st.integers(1, 2)) for _ in range(nd)]
    ext = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    spatial = [data.draw(st.integers(e, e + 5)) for e in ext]
    attrs = {"kernel_shape": kernel, "strides": strides, "dilations": dil, "auto_pad": auto_pad}
    if auto_pad == "NOTSET":
        attrs["pads"] = [data.draw(st.integers(0, k - 1)) for k in kernel * 2]
    if not auto_pad.startswith("SAME"):
        attrs["ceil_mode"] = data.draw(st.integers(0, 1))
    x = np.random.default_rng(seed).standard_normal((2, 3, *spatial)).astype(np.float32)
    for name, op_type, extra in (("max_pool", "MaxPool", {}),
                                 ("average_pool", "AveragePool", {"count_include_pad": data.draw(st.integers(0, 1))})):
        want = _onnxruntime(op_type, [x], {**attrs, **extra})[0]
        got = _ours(name, [x], {**attrs, **extra})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(data=st.data(), shape=shapes, seed=st.integers(0, 2**32 - 1))
def test_pad_and_slice_references_match_onnxruntime(data, shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    mode = data.draw(st.sampled_from(["constant", "edge", "reflect"]))
    top = [d - 1 if mode == "reflect" else 3 for d in shape]
    pads = [data.draw(st.integers(0, t)) for t in top * 2]
    got = _ours("pad", [x], {"pads": pads, "mode": mode, "value": 0.5})[0]
    want = _onnxruntime("Pad", [x], {"mode": mode}, consts=[np.array(pads, np.int64), np.float32(0.5)])[0]
    np.testing.assert_array_equal(got, want)
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    steps = [data.draw(st.integers(-3, 3).filter(bool)) for _ in axes]
    starts = [data.draw(st.integers(-8, 8)) for _ in axes]
    # onnxruntime reads an INT64_MAX end with a negative step as "to the front"; the spec clamps it to dim - 1
    ends = [data.draw(st.integers(-8, 8) | st.just(-2**63 if s < 0 else 2**63 - 1)) for s in steps]
    got = _ours("slice", [x], {"starts": starts, "ends": ends, "axes": axes, "steps": steps})[0]
    want = _onnxruntime("Slice", [x], {}, consts=[np.array(v, np.int64) for v in (starts, ends, axes, steps)])[0]
    np.testing.assert_array_equal(got, want)
