"""Property tests of the reductions and the normalization ops on every device, and their misuse."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import devicelayer as dl
from devicelayer.kernels.op import OPS, TensorType
from devicelayer.kernels.runner import run
from devicelayer.ops import names  # noqa: F401  (registers the library)
from devicelayer.tensors import tensor
from op_cases import run_and_reference

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
REDUCE = ["sum", "mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l1", "reduce_l2", "reduce_sum_square",
          "reduce_log_sum", "reduce_log_sum_exp"]


def check_against_reference(device, name, arrays, attrs=None, rtol=2e-5, atol=2e-5):
    """Run op ``name`` on ``device`` and compare with its NumPy reference in float64 (skips unsupported combos)."""
    both = run_and_reference(device, name, arrays, dict(attrs or {}))
    if both is None:
        return
    got, want, outs = both
    for g, w, t in zip(got, want, outs):
        assert g.shape == t.shape and g.dtype == t.dtype
        w = np.asarray(w)
        scale = float(np.max(np.abs(w[np.isfinite(w)]), initial=0.0))
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=rtol, atol=atol * max(1.0, scale))


@st.composite
def shape_and_axes(draw, max_dims=5, max_side=6, long_side=False):
    shape = list(draw(hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=max_side)))
    if long_side and shape:
        shape[draw(st.integers(0, len(shape) - 1))] = draw(st.integers(128, 700))
    rank = len(shape)
    if draw(st.booleans()):
        axes = None
    else:
        chosen = draw(st.lists(st.integers(0, max(rank - 1, 0)), unique=True, max_size=rank)) if rank else []
        axes = [a - rank if draw(st.booleans()) else a for a in chosen]
        if len(axes) == 1 and draw(st.booleans()):
            axes = axes[0]
    return tuple(shape), axes


@SETTINGS
@given(op=st.sampled_from(REDUCE), layout=shape_and_axes(), keepdims=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_reduction_matches_reference(device, op, layout, keepdims, seed):
    shape, axes = layout
    _reduce_case(device, op, shape, axes, keepdims, seed)


@SETTINGS
@given(op=st.sampled_from(REDUCE), layout=shape_and_axes(max_dims=3, max_side=5, long_side=True),
       keepdims=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_long_reduction_matches_reference(device, op, layout, keepdims, seed):
    shape, axes = layout
    _reduce_case(device, op, shape, axes, keepdims, seed)


def _reduce_case(device, op, shape, axes, keepdims, seed):
    x = np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)
    attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
    check_against_reference(device, op, [x], attrs)


@SETTINGS
@given(op=st.sampled_from(["softmax", "log_softmax"]), data=st.data(), long=st.booleans(),
       seed=st.integers(0, 2**32 - 1))
def test_softmax_matches_reference(device, op, data, long, seed):
    shape = list(data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=6), "shape"))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), "axis")
    if long:
        shape[axis] = data.draw(st.integers(128, 600), "long")
    x = np.random.default_rng(seed).uniform(-10, 10, shape).astype(np.float32)
    check_against_reference(device, op, [x], {"axis": axis})


@SETTINGS
@given(data=st.data(), params=st.integers(0, 2), long=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_layer_normalization_matches_reference(device, data, params, long, seed):
    shape = list(data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=6), "shape"))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), "axis")
    if long:
        shape[-1] = data.draw(st.integers(128, 600), "long")
    rng = np.random.default_rng(seed)
    norm = shape[axis % len(shape):]
    arrays = [rng.uniform(-2, 2, shape).astype(np.float32)]
    for _ in range(params):
        p_shape = tuple(1 if data.draw(st.booleans(), "one") else s for s in norm)
        arrays.append(rng.uniform(-2, 2, p_shape).astype(np.float32))
    eps = data.draw(st.sampled_from([1e-5, 1e-3, 0.5]), "epsilon")
    check_against_reference(device, "layer_normalization", arrays, {"axis": axis, "epsilon": eps}, rtol=1e-4,
                            atol=1e-4)


@SETTINGS
@given(shape=hnp.array_shapes(min_dims=2, max_dims=5, min_side=1, max_side=6), size=st.integers(1, 7),
       seed=st.integers(0, 2**32 - 1))
def test_lrn_and_batch_normalization_match_reference(device, shape, size, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, shape).astype(np.float32)
    check_against_reference(device, "lrn", [x], {"size": size, "alpha": 0.3})
    c = shape[1]
    params = [rng.uniform(-2, 2, c).astype(np.float32) for _ in range(3)] + \
        [rng.uniform(0.1, 3, c).astype(np.float32)]
    check_against_reference(device, "batch_normalization", [x, *params], {"epsilon": 1e-3})


# -- misuse -------------------------------------------------------------------------------------------------
def T(shape, dtype="float32"):
    return TensorType.of(shape, dtype)


X = T((2, 3, 4))
MISUSE = [
    ("sum", [X], {"axes": [0, 0]}, "twice"),
    ("mean", [X], {"axes": [1, -2]}, "twice"),
    ("sum", [X], {"axes": 3}, "out of range"),
    ("reduce_max", [X], {"axes": -4}, "out of range"),
    ("sum", [X], {"axes": 1.0}, "axes"),
    ("sum", [X], {"axes": "0"}, "axes"),
    ("mean", [X], {"keepdims": "yes"}, "keepdims"),
    ("sum", [X], {"axis": 0}, "unknown"),
    ("reduce_l1", [X], {"axes": [2, -1]}, "twice"),
    ("sum", [T((3,), "bool")], {}, "numeric"),
    ("reduce_max", [T((3,), "complex64")], {}, "numeric or bool"),
    ("softmax", [T(())], {}, "rank"),
    ("softmax", [X], {"axis": 3}, "out of range"),
    ("log_softmax", [X], {"axis": 1.5}, "axis"),
    ("log_softmax", [T((3,), "int32")], {}, "floating"),
    ("layer_normalization", [X, T((2, 1, 1, 4))], {"axis": 2}, "broadcast"),
    ("layer_normalization", [X, T((4,)), T((5,))], {}, "broadcast"),
    ("layer_normalization", [X, T((4,), "float16")], {}, "same dtype"),
    ("layer_normalization", [X], {"epsilon": -1.0}, "epsilon"),
    ("layer_normalization", [X], {"epsilon": float("nan")}, "epsilon"),
    ("layer_normalization", [X], {"axis": -4}, "out of range"),
    ("batch_normalization", [X, T((3,)), T((3,)), T((3,)), T((4,))], {}, "shape (3,)"),
    ("batch_normalization", [T((3,))] * 5, {}, "rank 2"),
    ("batch_normalization", [X, T((3,)), T((3,)), T((3,)), T((3,))], {"training_mode": True}, "training_mode"),
    ("batch_normalization", [X, T((3,)), T((3,)), T((3,)), T((3,), "float16")], {}, "same dtype"),
    ("lrn", [X], {}, "size"),
    ("lrn", [X], {"size": 0}, "size"),
    ("lrn", [X], {"size": 2.5}, "size"),
    ("lrn", [T((4,))], {"size": 3}, "rank 2"),
    ("lrn", [X], {"size": 3, "beta": "x"}, "beta"),
]


@pytest.mark.parametrize("name,types,attrs,match", MISUSE, ids=[f"{m[0]}-{i}" for i, m in enumerate(MISUSE)])
def test_misuse_is_refused_naming_the_op(name, types, attrs, match):
    with pytest.raises(dl.InvalidArgument, match=name) as info:
        OPS[name].prepare(types, attrs)
    assert match in str(info.value)


def test_empty_reductions_give_the_identity_on_a_device(device):
    x = tensor(np.zeros((3, 0), np.float32), device)
    assert run("reduce_max", [x], axes=1)[0].numpy().tolist() == [-np.inf] * 3
    assert run("reduce_prod", [x], axes=1)[0].numpy().tolist() == [1.0] * 3
    assert run("reduce_log_sum_exp", [x], axes=1)[0].numpy().tolist() == [-np.inf] * 3


def test_integer_reductions_refused_where_onnx_allows_them_but_devicelayer_does_not():
    with pytest.raises(dl.UnsupportedOp, match="reduce_l2 of int32"):
        OPS["reduce_l2"].prepare([T((3,), "int32")], {})
