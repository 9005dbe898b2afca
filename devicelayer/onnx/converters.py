"""One converter per ONNX op type: ONNX attributes and inputs (by opset) -> library ops.

A converter gets the Context (current node, its inputs, the graph being built)
and the node's attributes, and returns one entry per ONNX output: a graph
Value, a NumPy constant, or None for an output it does not produce (refused
by the loader when the model uses it).  Attribute names of the library ops
follow ONNX, so most converters pass them through after filtering out what an
old opset carried (``is_test``, ``consumed_inputs``, ``spatial`` ...).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..errors import UnsupportedOp
from ..graph.ir import Value
from .loader import Context, np_dtype

CONVERTERS: dict[str, Callable[[Context, dict[str, Any]], Sequence[Any]]] = {}
FOLDERS: dict[str, Callable[[Context, dict[str, Any], list], list[np.ndarray] | None]] = {}

Tensor = Value | np.ndarray


def converter(*op_types: str):
    def register(fn):
        for t in op_types:
            CONVERTERS[t] = fn
        return fn
    return register


def _pick(attrs: dict[str, Any], *names: str) -> dict[str, Any]:
    return {k: attrs[k] for k in names if k in attrs}


def _ints(x: Any) -> list[int]:
    return [int(v) for v in np.asarray(x).reshape(-1).tolist()]


def _reshape(ctx: Context, x: Tensor, shape: Sequence[int], suffix: str = "reshape") -> Tensor:
    shape = tuple(int(s) for s in shape)
    if tuple(x.shape) == shape:
        return x
    if isinstance(x, np.ndarray):
        return x.reshape(shape)
    return ctx.op("reshape", [x], suffix, shape=shape)


def _cast(ctx: Context, x: Tensor, dtype: Any, suffix: str = "cast") -> Tensor:
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if isinstance(x, np.ndarray):
        return x.astype(dtype)
    return ctx.op("cast", [x], suffix, to=dtype)


def _scalar(x: float, dtype: Any) -> np.ndarray:
    return np.array(x, dtype=dtype)


# -- unary ---------------------------------------------------------------------------------------------------------
_UNARY = {
    "Relu": ("relu", ()), "Sigmoid": ("sigmoid", ()), "Tanh": ("tanh", ()), "Softsign": ("softsign", ()),
    "Softplus": ("softplus", ()), "Exp": ("exp", ()), "Log": ("log", ()), "Sqrt": ("sqrt", ()),
    "Reciprocal": ("reciprocal", ()), "Erf": ("erf", ()), "Floor": ("floor", ()), "Ceil": ("ceil", ()),
    "Sin": ("sin", ()), "Cos": ("cos", ()), "LeakyRelu": ("leaky_relu", ("alpha",)), "Elu": ("elu", ("alpha",)),
    "Selu": ("selu", ("alpha", "gamma")), "HardSigmoid": ("hard_sigmoid", ("alpha", "beta")),
}


def _unary(ctx: Context, attrs: dict[str, Any]) -> list[Tensor]:
    op, names = _UNARY[ctx.node.op_type]
    x = ctx.raw(0)
    if op == "relu" and x.dtype.kind in "iu":  # integer Relu: max(x, 0)
        return [ctx.op("max", [x, _scalar(0, x.dtype)])]
    return [ctx.op(op, [x], **_pick(attrs, *names))]


for _t in _UNARY:
    CONVERTERS[_t] = _unary


@converter("Neg", "Abs")
def _neg_abs(ctx, attrs):
    x = ctx.raw(0)
    if x.dtype.kind in "iu":  # the unary kernels are float-only: compose
        neg = ctx.op("sub", [_scalar(0, x.dtype), x], "neg")
        return [neg if ctx.node.op_type == "Neg" else ctx.op("max", [x, neg])]
    return [ctx.op(ctx.node.op_type.lower(), [x])]


@converter("Gelu")
def _gelu(ctx, attrs):
    approx = attrs.get("approximate", "none")
    if approx not in ("none", "tanh"):
        raise UnsupportedOp(f"Gelu approximate={approx!r}")
    return [ctx.op("gelu_tanh" if approx == "tanh" else "gelu", [ctx.raw(0)])]


@converter("Identity", "Dropout")
def _identity(ctx, attrs):
    x = ctx.raw(0)
    if ctx.node.op_type == "Dropout":  # inference: the identity (old opsets' is_test changes nothing here)
        if ctx.has(2):
            t = ctx.need_const(2, "Dropout training_mode")
            if bool(np.asarray(t).reshape(-1)[0]):
                raise UnsupportedOp("Dropout in training mode (inference only)")
        mask = np.ones(x.shape, dtype=bool)
        return [x, mask]
    return [x]


@converter("Cast")
def _cast_node(ctx, attrs):
    return [_cast(ctx, ctx.raw(0), np_dtype(int(attrs["to"])), "")]


@converter("CastLike")
def _cast_like(ctx, attrs):
    return [_cast(ctx, ctx.raw(0), ctx.raw(1).dtype, "")]


@converter("Clip")
def _clip(ctx, attrs):
    x = ctx.raw(0)
    if ctx.opset < 11:
        lo, hi = attrs.get("min"), attrs.get("max")
        lo_t = None if lo is None else _scalar(lo, x.dtype)
        hi_t = None if hi is None else _scalar(hi, x.dtype)
    else:
        lo_t = ctx.raw(1) if ctx.has(1) else None
        hi_t = ctx.raw(2) if ctx.has(2) else None
    consts = all(t is None or isinstance(t, np.ndarray) for t in (lo_t, hi_t))
    if x.dtype.kind == "f" and consts:
        kw = {}
        if lo_t is not None:
            kw["min"] = float(np.asarray(lo_t).reshape(-1)[0])
        if hi_t is not None:
            kw["max"] = float(np.asarray(hi_t).reshape(-1)[0])
        if "min" in kw and "max" in kw and kw["min"] > kw["max"]:  # ONNX: every element becomes max
            return [ctx.op("add", [ctx.op("mul", [x, _scalar(0, x.dtype)], "zero"), _scalar(kw["max"], x.dtype)])]
        return [ctx.op("clip", [x], **kw)]
    y = x
    if lo_t is not None:
        y = ctx.op("max", [y, lo_t], "min")
    if hi_t is not None:
        y = ctx.op("min", [y, hi_t], "max")
    return [y]


# -- binary --------------------------------------------------------------------------------------------------------
def _legacy_broadcast(ctx: Context, attrs: dict[str, Any], a: Tensor, b: Tensor) -> Tensor:
    """Opset < 7 ``broadcast=1, axis=k``: B's dims line up with A's starting at ``axis``."""
    if ctx.opset < 7 and attrs.get("broadcast") and "axis" in attrs:
        ra, rb = len(a.shape), len(b.shape)
        axis = int(attrs["axis"])
        axis = axis + ra if axis < 0 else axis
        trailing = ra - axis - rb
        if trailing > 0:
            b = _reshape(ctx, b, tuple(b.shape) + (1,) * trailing, "broadcast")
    return b


_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow"}


@converter(*_BINARY)
def _binary(ctx, attrs):
    op = _BINARY[ctx.node.op_type]
    a, b = ctx.raw(0), ctx.raw(1)
    b = _legacy_broadcast(ctx, attrs, a, b)
    if op == "pow" and b.dtype != a.dtype:
        b = _cast(ctx, b, a.dtype, "exponent")
    if op in ("div", "pow") and a.dtype.kind in "iu":
        # the kernels divide floats: integer Div truncates toward zero, as a cast back does
        fa, fb = _cast(ctx, a, np.float32, "a_float"), _cast(ctx, b, np.float32, "b_float")
        y = ctx.op(op, [fa, fb], "float")
        if op == "pow":
            y = ctx.op("add", [y, _scalar(0.5, np.float32)], "round")
            y = ctx.op("floor", [y], "floor")
        return [_cast(ctx, y, a.dtype, "")]
    if a.dtype.kind == "b" or b.dtype.kind == "b":
        raise UnsupportedOp(f"{ctx.node.op_type} of bool tensors")
    return [ctx.op(op, [a, b])]


@converter("Max", "Min", "Sum", "Mean")
def _variadic(ctx, attrs):
    op = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}[ctx.node.op_type]
    xs = [ctx.raw(i) for i in range(len(ctx.node.input)) if ctx.has(i)]
    if not xs:
        raise UnsupportedOp(f"{ctx.node.op_type} with no inputs")
    y = xs[0]
    for k, x in enumerate(xs[1:], 1):
        y = ctx.op(op, [y, x], f"{k}" if k < len(xs) - 1 or ctx.node.op_type == "Mean" else "")
    if ctx.node.op_type == "Mean" and len(xs) > 1:
        y = ctx.op("div", [y, _scalar(len(xs), y.dtype)])
    return [y]  # one input: that input, unchanged


@converter("Where")
def _where(ctx, attrs):
    c = ctx.raw(0)
    if c.dtype.kind != "b":
        c = _cast(ctx, c, bool, "cond")
    return [ctx.op("where", [c, ctx.raw(1), ctx.raw(2)])]


@converter("PRelu")
def _prelu(ctx, attrs):
    x, slope = ctx.raw(0), ctx.raw(1)
    if len(slope.shape) == 1 and len(x.shape) > 2 and slope.shape[0] == x.shape[1] and slope.shape[0] != x.shape[-1]:
        # opset < 7 (and PyTorch exports): one slope per channel, channels on axis 1
        slope = _reshape(ctx, slope, (slope.shape[0],) + (1,) * (len(x.shape) - 2), "slope")
    if slope.dtype != x.dtype:
        slope = _cast(ctx, slope, x.dtype, "slope_cast")
    return [ctx.op("prelu", [x, slope])]


# -- matrix products and convolutions ----------------------------------------------------------------------------
@converter("MatMul")
def _matmul(ctx, attrs):
    return [ctx.op("matmul", [ctx.raw(0), ctx.raw(1)])]


@converter("Gemm")
def _gemm(ctx, attrs):
    ins = [ctx.raw(0), ctx.raw(1)]
    kw = _pick(attrs, "alpha", "beta", "transA", "transB")
    if ctx.has(2):
        c = ctx.raw(2)
        if kw.get("beta", 1.0) != 0.0:
            ins.append(c)
    return [ctx.op("gemm", ins, **kw)]


_CONV_ATTRS = ("strides", "pads", "dilations", "group", "auto_pad", "kernel_shape")


@converter("Conv")
def _conv(ctx, attrs):
    return [ctx.op("conv", ctx.values(), **_pick(attrs, *_CONV_ATTRS))]


@converter("ConvTranspose")
def _conv_transpose(ctx, attrs):
    return [ctx.op("conv_transpose", ctx.values(), **_pick(attrs, *_CONV_ATTRS, "output_padding", "output_shape"))]


_POOL_ATTRS = ("kernel_shape", "strides", "pads", "dilations", "ceil_mode", "auto_pad")


@converter("MaxPool")
def _max_pool(ctx, attrs):
    y = ctx.op("max_pool", [ctx.raw(0)], **_pick(attrs, *_POOL_ATTRS, "storage_order"))
    return [y, None]  # Indices: not produced


@converter("AveragePool")
def _average_pool(ctx, attrs):
    return [ctx.op("average_pool", [ctx.raw(0)], **_pick(attrs, *_POOL_ATTRS, "count_include_pad"))]


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, attrs):
    op = "global_average_pool" if ctx.node.op_type == "GlobalAveragePool" else "global_max_pool"
    return [ctx.op(op, [ctx.raw(0)])]


# -- normalization -------------------------------------------------------------------------------------------------
@converter("BatchNormalization")
def _batch_norm(ctx, attrs):
    if ctx.opset < 9 and attrs.get("spatial", 1) == 0:
        raise UnsupportedOp("BatchNormalization with spatial=0")
    if attrs.get("training_mode", 0):
        raise UnsupportedOp("BatchNormalization in training mode (inference only)")
    y = ctx.op("batch_normalization", ctx.values()[:5], **_pick(attrs, "epsilon"))
    return [y] + [None] * 4


@converter("LRN")
def _lrn(ctx, attrs):
    return [ctx.op("lrn", [ctx.raw(0)], **_pick(attrs, "size", "alpha", "beta", "bias"))]


@converter("Softmax", "LogSoftmax")
def _softmax(ctx, attrs):
    op = "softmax" if ctx.node.op_type == "Softmax" else "log_softmax"
    x = ctx.raw(0)
    rank = len(x.shape)
    if ctx.opset >= 13:
        return [ctx.op(op, [x], axis=int(attrs.get("axis", -1)))]
    axis = int(attrs.get("axis", 1))
    axis = axis + rank if axis < 0 else axis
    if axis == rank - 1 or rank <= 1:
        return [ctx.op(op, [x], axis=-1)]
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    flat = _reshape(ctx, x, (rows, int(np.prod(x.shape[axis:], dtype=np.int64))), "coerce2d")
    y = ctx.op(op, [flat], "2d", axis=-1)
    return [_reshape(ctx, y, x.shape, "")]


@converter("LayerNormalization")
def _layer_norm(ctx, attrs):
    y = ctx.op("layer_normalization", ctx.values()[:3], **_pick(attrs, "axis", "epsilon"))
    return [y, None, None]


_REDUCE = {"ReduceSum": ("sum", 13), "ReduceMean": ("mean", 18), "ReduceMax": ("reduce_max", 18),
           "ReduceMin": ("reduce_min", 18)}


@converter(*_REDUCE)
def _reduce(ctx, attrs):
    op, since = _REDUCE[ctx.node.op_type]
    x = ctx.raw(0)
    if ctx.opset >= since:
        axes = ctx.need_const(1, "axes")
        axes = None if axes is None else _ints(axes)
    else:
        axes = attrs.get("axes")
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = None
    keep = bool(attrs.get("keepdims", 1))
    if x.dtype.kind != "f":  # the reductions are float kernels: go through float32 and back
        y = ctx.op(op, [_cast(ctx, x, np.float32, "to_float")], "float", axes=axes, keepdims=keep)
        return [_cast(ctx, y, x.dtype, "")]
    return [ctx.op(op, [x], axes=axes, keepdims=keep)]


# -- movement ------------------------------------------------------------------------------------------------------
@converter("Concat")
def _concat(ctx, attrs):
    if "axis" not in attrs and ctx.opset < 4:
        attrs = {**attrs, "axis": 1}
    xs = [ctx.raw(i) for i in range(len(ctx.node.input)) if ctx.has(i)]
    return [ctx.op("concat", xs, axis=int(attrs["axis"]))]


@converter("Split")
def _split(ctx, attrs):
    x = ctx.raw(0)
    axis = int(attrs.get("axis", 0))
    n_out = len(ctx.node.output)
    if ctx.opset >= 13:
        sizes = ctx.need_const(1, "split sizes")
        sizes = None if sizes is None else _ints(sizes)
    else:
        sizes = attrs.get("split")
        if sizes is None and ctx.has(1):  # opset 1: split as a second input
            sizes = _ints(ctx.need_const(1, "split sizes"))
    if sizes:
        outs = ctx.add("split", [x], axis=axis, split=tuple(sizes))
    elif "num_outputs" in attrs:
        outs = ctx.add("split", [x], axis=axis, num_outputs=int(attrs["num_outputs"]))
    else:
        dim = x.shape[axis]
        if dim % n_out:
            raise UnsupportedOp(f"Split of {dim} into {n_out} equal parts")
        outs = ctx.add("split", [x], axis=axis, split=(dim // n_out,) * n_out)
    return outs


@converter("Slice")
def _slice(ctx, attrs):
    x = ctx.raw(0)
    if ctx.opset < 10:
        starts, ends = _ints(attrs["starts"]), _ints(attrs["ends"])
        axes = _ints(attrs["axes"]) if "axes" in attrs else list(range(len(starts)))
        steps = [1] * len(starts)
    else:
        starts, ends = _ints(ctx.need_const(1, "starts")), _ints(ctx.need_const(2, "ends"))
        axes = ctx.need_const(3, "axes")
        axes = list(range(len(starts))) if axes is None else _ints(axes)
        steps = ctx.need_const(4, "steps")
        steps = [1] * len(starts) if steps is None else _ints(steps)
    big = 2**31 - 1  # clamp INT64_MAX/MIN sentinels to what every kernel index holds
    starts = [max(min(s, big), -big) for s in starts]
    ends = [max(min(e, big), -big) for e in ends]
    return [ctx.op("slice", [x], starts=tuple(starts), ends=tuple(ends), axes=tuple(axes), steps=tuple(steps))]


@converter("Pad")
def _pad(ctx, attrs):
    x = ctx.raw(0)
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "edge", "reflect"):
        raise UnsupportedOp(f"Pad mode {mode!r}")
    kw: dict[str, Any] = {"mode": mode}
    if ctx.opset < 11:
        pads = attrs.get("pads", attrs.get("paddings"))
        kw["pads"] = tuple(_ints(pads))
        kw["value"] = float(attrs.get("value", 0.0))
    else:
        kw["pads"] = tuple(_ints(ctx.need_const(1, "pads")))
        value = ctx.need_const(2, "constant_value")
        if value is not None and value.size:
            kw["value"] = value.reshape(-1)[0].item()
        axes = ctx.need_const(3, "axes")
        if axes is not None:
            kw["axes"] = tuple(_ints(axes))
    if not any(kw["pads"]):
        return [x]
    return [ctx.op("pad", [x], **kw)]


@converter("Transpose")
def _transpose(ctx, attrs):
    x = ctx.raw(0)
    kw = {"perm": tuple(int(p) for p in attrs["perm"])} if "perm" in attrs else {}
    return [ctx.op("transpose", [x], **kw)]


@converter("Reshape")
def _reshape_node(ctx, attrs):
    x = ctx.raw(0)
    if ctx.opset < 5:
        shape = _ints(attrs["shape"])
    else:
        shape = _ints(ctx.need_const(1, "the target shape"))
    return [ctx.op("reshape", [x], shape=tuple(shape), **_pick(attrs, "allowzero"))]


@converter("Flatten")
def _flatten(ctx, attrs):
    return [ctx.op("flatten", [ctx.raw(0)], axis=int(attrs.get("axis", 1)))]


@converter("Squeeze", "Unsqueeze")
def _squeeze(ctx, attrs):
    op = ctx.node.op_type.lower()
    x = ctx.raw(0)
    if ctx.opset >= 13:
        axes = ctx.need_const(1, "axes")
        axes = None if axes is None else tuple(_ints(axes))
    else:
        axes = attrs.get("axes")
        axes = None if axes is None else tuple(int(a) for a in axes)
    kw = {} if axes is None else {"axes": axes}
    return [ctx.op(op, [x], **kw)]


@converter("Gather")
def _gather(ctx, attrs):
    data, idx = ctx.raw(0), ctx.raw(1)
    if isinstance(idx, np.ndarray):
        dim = data.shape[int(attrs.get("axis", 0))]
        idx = np.where(idx < 0, idx + dim, idx).astype(idx.dtype)
    return [ctx.op("gather", [data, idx], axis=int(attrs.get("axis", 0)))]


@converter("DepthToSpace")
def _depth_to_space(ctx, attrs):
    return [ctx.op("depth_to_space", [ctx.raw(0)], **_pick(attrs, "blocksize", "mode"))]


@converter("SpaceToDepth")
def _space_to_depth(ctx, attrs):
    return [ctx.op("space_to_depth", [ctx.raw(0)], **_pick(attrs, "blocksize"))]


@converter("Expand")
def _expand(ctx, attrs):
    x = ctx.raw(0)
    shape = _ints(ctx.need_const(1, "the target shape"))
    out = tuple(int(s) for s in np.broadcast_shapes(tuple(x.shape), tuple(shape)))
    if out == tuple(x.shape):
        return [x]
    if x.dtype.kind == "b":
        raise UnsupportedOp("Expand of a bool tensor")
    return [ctx.op("add", [x, np.zeros(out, x.dtype)])]


@converter("Tile")
def _tile(ctx, attrs):
    x = ctx.raw(0)
    reps = _ints(ctx.need_const(1, "repeats"))
    y = x
    for axis, r in enumerate(reps):
        if r != 1:
            y = ctx.op("concat", [y] * r, f"axis{axis}", axis=axis)
    return [y]


# -- folding helpers (constants only) ---------------------------------------------------------------------------------
def _fold_constant(ctx, attrs, ins):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in attrs:
            v = attrs[key]
            if key == "value":
                return [np.asarray(v)]
            dt = np.float32 if "float" in key else np.int64
            return [np.asarray(v, dtype=dt)]
    raise UnsupportedOp(f"Constant with {sorted(attrs)} (strings and sparse tensors are not supported)")


def _fold_constant_of_shape(ctx, attrs, ins):
    shape = _ints(ins[0])
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return [np.full(shape, value[0], dtype=value.dtype)]


FOLDERS["Constant"] = _fold_constant
FOLDERS["ConstantOfShape"] = _fold_constant_of_shape
FOLDERS["Identity"] = lambda ctx, attrs, ins: [ins[0]]


from . import resize as _resize  # noqa: E402,F401  (registers Resize and Upsample)
