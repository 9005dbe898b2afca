"""Patterns: decomposed forms of ops the library has, found in a placed graph and replaced by the one op.

A PyTorch export (or an older opset) spells LayerNorm as ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul,
Add; GELU as Div, Erf, Add, Mul, Mul (or its tanh form); Softmax as ReduceMax, Sub, Exp, ReduceSum, Div; GroupNorm
as Reshape, InstanceNormalization, Reshape, Mul, Add; SiLU as Sigmoid and Mul; attention as MatMul(Q,
Transpose(K)), a scale, an optional mask, Softmax and MatMul(., V) (PyTorch's scaled_dot_product_attention: Q and
Kᵀ scaled apart, the softmax's NaN rows made zeros).  Each
matcher here checks the structure exactly (axes, keepdims, the constants: epsilon, sqrt(2), 0.5, 1, 0.044715,
sqrt(2/pi)) and that every intermediate is read only inside the pattern, and gives a ``Replacement``: the
pattern's nodes, the op standing for them and its inputs.  A replacement is kept only where its op runs on the
device the pattern's nodes were placed on; elsewhere the nodes stay as they are.  SiLU's swish replaces its
pattern on the host only (``HOST_ONLY``), where one library call beats NumPy's passes.  An activation after a
Conv (ReLU6's Clip, SiLU, hard swish, sigmoid...) becomes the conv's activation (oneDNN's post-op on the host,
the kernels' epilogue elsewhere) except where the device's vendor library runs the conv but not with that
activation (``VENDOR_FIRST``): a vendor call is not traded for the op's kernels.  Attention replaces its
pattern on the host only where the host's vendor library computes it (``HOST_VENDOR_ONLY``), and on a device whose
vendor library runs matmul only where it runs its fused kernel or the device's own attention kernel takes the call
(``VENDOR_PRODUCTS``).  Slices of one tensor along one axis that cut it into consecutive pieces, end to end (YOLOv8's
C2f), become one split on kernel devices (``KERNELS_ONLY``): one launch moves every piece.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from ..dtypes import computes_as_float, eps
from ..errors import DeviceLayerError
from ..kernels.op import TensorType, get
from ..kernels.ops.conv import UNARY_ACTIVATIONS
from ..kernels.ops.movement import slice_params
from .ir import Node, Value


@dataclass
class Replacement:
    """Nodes replaced by one node of ``op``: it reads ``inputs`` and gives the values ``outputs`` (old values of
    the members, read after it)."""

    kind: str
    members: list[Node]
    op: str
    attrs: dict[str, Any]
    inputs: list[Value]
    outputs: list[Value]
    device: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


class _Graph:
    """What a matcher reads: each value's readers, the graph's outputs, the types, the nodes already taken."""

    def __init__(self, nodes: list[Node], types: Mapping[int, TensorType], outputs: set[int],
                 readers: Mapping[int, list[Node]], taken: set[int]) -> None:
        self.nodes, self.types, self.outputs, self.readers, self.taken = nodes, types, outputs, readers, taken

    def only(self, v: Value) -> Node | None:
        """The one reader of ``v`` when it is read by one node (once) and is no graph output."""
        after = self.readers.get(id(v), [])
        if len(after) != 1 or id(v) in self.outputs or id(after[0]) in self.taken:
            return None
        return after[0]

    def internal(self, v: Value, members: list[Node]) -> bool:
        """Whether every reader of ``v`` is one of ``members`` (and ``v`` is no graph output)."""
        ids = {id(m) for m in members}
        return id(v) not in self.outputs and all(id(r) in ids for r in self.readers.get(id(v), []))

    def distinct(self, v: Value) -> list[Node]:
        """The nodes reading ``v``, each once."""
        return list({id(r): r for r in self.readers.get(id(v), [])}.values())

    def shape(self, v: Value) -> tuple[int, ...]:
        return self.types[id(v)].shape


def scalar(v: Value) -> float | None:
    """The value of a constant holding one element (any shape), else None."""
    c = v.constant
    if c is None or c.size != 1 or not (c.dtype.kind in "iu" or computes_as_float(c.dtype)):
        return None
    return float(c.reshape(-1)[0])


def _close(x: float | None, want: float, rtol: float = 1e-6) -> bool:
    return x is not None and math.isclose(x, want, rel_tol=rtol, abs_tol=0.0)


def _near(v: Value, want: float, rtol: float = 1e-6, inverse: bool = False) -> bool:
    """Whether constant ``v`` holds ``want`` (with ``inverse``, 1 / ``want``) within ``rtol``, or as near as its
    float dtype can: within half a unit of its precision (a float16 model holds sqrt(2) as 1.4140625)."""
    k = scalar(v)
    if k is None or (inverse and k == 0):
        return False
    dtype = v.constant.dtype
    tol = rtol + (0.5 * eps(dtype) if computes_as_float(dtype) else 0.0)
    return _close(1.0 / k if inverse else k, want, tol)


def _other(node: Node, v: Value) -> Value | None:
    """The operand of binary ``node`` that is not ``v`` (None when both are ``v`` or ``v`` is not one)."""
    a, b = node.inputs[0], node.inputs[1]
    if a is v and b is not v:
        return b
    if b is v and a is not v:
        return a
    return None


def _trailing_axes(axes: Any, rank: int) -> int | None:
    """The first axis when ``axes`` are exactly the trailing axes [a, rank), else None."""
    if axes is None:
        return 0 if rank else None
    norm = sorted(int(a) % rank for a in axes) if rank else []
    if not norm or norm != list(range(norm[0], rank)):
        return None
    return norm[0]


def _one_axis(axes: Any, rank: int) -> int | None:
    if axes is None or len(axes) != 1 or not rank:
        return None
    return int(axes[0]) % rank


# -- LayerNorm ----------------------------------------------------------------------------------------------------
def layer_norm(g: _Graph, mean1: Node) -> Replacement | None:
    """mean(x) -> sub -> pow 2 (or mul by itself) -> mean -> add eps -> sqrt -> div [-> mul scale [-> add bias]]."""
    if mean1.op != "mean" or not mean1.attrs.get("keepdims", True):
        return None
    x = mean1.inputs[0]
    rank = len(g.shape(x))
    axis = _trailing_axes(mean1.attrs.get("axes"), rank)
    if axis is None or not computes_as_float(g.types[id(x)].dtype):
        return None
    m = mean1.outputs[0]
    subs = g.readers.get(id(m), [])
    if len(subs) != 1 or subs[0].op != "sub" or subs[0].inputs[0] is not x or subs[0].inputs[1] is not m:
        return None
    sub = subs[0]
    d = sub.outputs[0]
    readers = g.distinct(d)
    if len(readers) != 2 or id(d) in g.outputs:
        return None
    square = next((r for r in readers if (r.op == "pow" and r.inputs[0] is d and _near(r.inputs[1], 2.0))
                   or (r.op == "mul" and r.inputs[0] is d and r.inputs[1] is d)), None)
    div = next((r for r in readers if r.op == "div" and r.inputs[0] is d), None)
    if square is None or div is None or square is div:
        return None
    mean2 = g.only(square.outputs[0])
    if (mean2 is None or mean2.op != "mean" or not mean2.attrs.get("keepdims", True)
            or _trailing_axes(mean2.attrs.get("axes"), rank) != axis):
        return None
    add = g.only(mean2.outputs[0])
    if add is None or add.op != "add":
        return None
    eps_v = _other(add, mean2.outputs[0])
    eps = scalar(eps_v) if eps_v is not None else None
    if eps is None or eps < 0:
        return None
    sqrt = g.only(add.outputs[0])
    if sqrt is None or sqrt.op != "sqrt" or g.only(sqrt.outputs[0]) is not div or div.inputs[1] is not sqrt.outputs[0]:
        return None
    members = [mean1, sub, square, mean2, add, sqrt, div]
    inputs = [x]
    last = div
    for op in ("mul", "add"):  # the scale, then (only after one) the bias: each a constant
        nxt = g.only(last.outputs[0])
        param = _other(nxt, last.outputs[0]) if nxt is not None and nxt.op == op else None
        if param is None or param.producer is not None:
            break
        members.append(nxt)
        inputs.append(param)
        last = nxt
    if g.types[id(last.outputs[0])].shape != g.shape(x):
        return None
    return Replacement("layer_normalization", members, "layer_normalization", {"axis": axis, "epsilon": eps},
                       inputs, [last.outputs[0]])


# -- Softmax ---------------------------------------------------------------------------------------------------------
def softmax(g: _Graph, first: Node) -> Replacement | None:
    """[reduce_max -> sub ->] exp -> sum -> div, along one axis with keepdims."""
    members: list[Node] = []
    if first.op == "reduce_max":
        x = first.inputs[0]
        rank = len(g.shape(x))
        axis = _one_axis(first.attrs.get("axes"), rank)
        if axis is None or not first.attrs.get("keepdims", True):
            return None
        sub = g.only(first.outputs[0])
        if sub is None or sub.op != "sub" or sub.inputs[0] is not x or sub.inputs[1] is not first.outputs[0]:
            return None
        exp = g.only(sub.outputs[0])
        if exp is None or exp.op != "exp":
            return None
        members = [first, sub]
    elif first.op == "exp":
        exp, x, axis = first, first.inputs[0], None
        shift = x.producer
        peak = shift.inputs[1].producer if shift is not None and shift.op == "sub" else None
        if peak is not None and peak.op == "reduce_max" and peak.inputs[0] is shift.inputs[0]:
            return None  # the shifted form, matched from its reduce_max
    else:
        return None
    e = exp.outputs[0]
    readers = g.distinct(e)
    if len(readers) != 2 or id(e) in g.outputs:
        return None
    total = next((r for r in readers if r.op == "sum"), None)
    div = next((r for r in readers if r.op == "div" and r.inputs[0] is e), None)
    if total is None or div is None or not total.attrs.get("keepdims", True):
        return None
    rank = len(g.shape(x))
    sum_axis = _one_axis(total.attrs.get("axes"), rank)
    if sum_axis is None or (axis is not None and sum_axis != axis) or div.inputs[1] is not total.outputs[0]:
        return None
    if g.only(total.outputs[0]) is not div or not computes_as_float(g.types[id(x)].dtype):
        return None
    return Replacement("softmax", members + [exp, total, div], "softmax", {"axis": sum_axis}, [x],
                       [div.outputs[0]])


# -- GELU ------------------------------------------------------------------------------------------------------------
def _product(g: _Graph, top: Node, members: list[Node]) -> list[Value] | None:
    """The factors of a tree of ``mul`` nodes under ``top`` whose inner products are read only inside it."""
    factors: list[Value] = []
    for v in top.inputs:
        p = v.producer
        if p is not None and p.op == "mul" and g.only(v) is top and id(p) not in g.taken:
            members.append(p)
            inner = _product(g, p, members)
            if inner is None:
                return None
            factors += inner
        else:
            factors.append(v)
    return factors


def _one_plus(g: _Graph, v: Value, inner_op: str, members: list[Node]) -> Node | None:
    """The ``inner_op`` node f when ``v`` = 1 + f(...), each read only on the way; its node recorded."""
    add = v.producer
    if add is None or add.op != "add" or g.only(v) is None:
        return None
    for t, c in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        f = t.producer
        if f is not None and f.op == inner_op and _near(c, 1.0) and g.only(t) is add:
            members += [add, f]
            return f
    return None


def _scaled(g: _Graph, v: Value, x: Value, factor: float, members: list[Node]) -> bool:
    """Whether ``v`` = x * factor (a mul by the constant or a div by its inverse), read only on the way."""
    n = v.producer
    if n is None or g.only(v) is None or n.op not in ("mul", "div"):
        return False
    c = _other(n, x)
    if c is None or (n.op == "div" and n.inputs[0] is not x):
        return False
    ok = _near(c, factor, 1e-5, inverse=n.op == "div")
    if ok:
        members.append(n)
    return ok


def _cube_term(g: _Graph, v: Value, x: Value, members: list[Node]) -> bool:
    """Whether ``v`` = x + 0.044715 * x**3 (pow 3 or x * x * x), read only on the way."""
    add = v.producer
    if add is None or add.op != "add" or g.only(v) is None:
        return False
    term = _other(add, x)
    t = term.producer if term is not None else None
    if t is None or t.op != "mul" or g.only(term) is not add:
        return False
    cube = None
    for a, c in ((t.inputs[0], t.inputs[1]), (t.inputs[1], t.inputs[0])):
        if _near(c, 0.044715, 1e-5):
            cube = a
    p = cube.producer if cube is not None else None
    if p is None or g.only(cube) is not t:
        return False
    if p.op == "pow" and p.inputs[0] is x and _near(p.inputs[1], 3.0):
        members += [add, t, p]
        return True
    if p.op == "mul":
        sq = _other(p, x)
        q = sq.producer if sq is not None else None
        if q is not None and q.op == "mul" and q.inputs[0] is x and q.inputs[1] is x and g.only(sq) is p:
            members += [add, t, p, q]
            return True
    return False


def gelu(g: _Graph, top: Node) -> Replacement | None:
    """x * 0.5 * (1 + erf(x / sqrt 2)) or x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x³))), as any tree of
    products."""
    if top.op != "mul":
        return None
    members: list[Node] = [top]
    factors = _product(g, top, members)
    if factors is None or len(factors) != 3:
        return None
    half = [f for f in factors if _near(f, 0.5)]
    if len(half) != 1:
        return None
    rest = [f for f in factors if f is not half[0]]
    for x, bracket in ((rest[0], rest[1]), (rest[1], rest[0])):
        if not computes_as_float(g.types[id(x)].dtype) or x.constant is not None:
            continue
        found = list(members)
        erf = _one_plus(g, bracket, "erf", found)
        if erf is not None and _scaled(g, erf.inputs[0], x, math.sqrt(0.5), found):
            return Replacement("gelu", found, "gelu", {}, [x], [top.outputs[0]])
        found = list(members)
        tanh = _one_plus(g, bracket, "tanh", found)
        if tanh is not None:
            arg = tanh.inputs[0]
            inner = arg.producer
            if inner is not None and inner.op == "mul" and g.only(arg) is tanh:
                for t, c in ((inner.inputs[0], inner.inputs[1]), (inner.inputs[1], inner.inputs[0])):
                    chain = found + [inner]
                    if _near(c, math.sqrt(2 / math.pi), 1e-5) and _cube_term(g, t, x, chain):
                        return Replacement("gelu_tanh", chain, "gelu_tanh", {}, [x], [top.outputs[0]])
    return None


def swish(g: _Graph, top: Node) -> Replacement | None:
    """x * sigmoid(x) (SiLU, as exporters write it: a Sigmoid whose only reader multiplies it by its input)."""
    if top.op != "mul" or len(top.inputs) != 2:
        return None
    for x, s in ((top.inputs[0], top.inputs[1]), (top.inputs[1], top.inputs[0])):
        sig = s.producer
        if sig is None or sig.op != "sigmoid" or sig.inputs[0] is not x or x.constant is not None \
                or not computes_as_float(g.types[id(x)].dtype) or not g.internal(s, [top]):
            continue
        return Replacement("swish", [top, sig], "swish", {"alpha": 1.0}, [x], [top.outputs[0]])
    return None


#: unary ops a conv takes as its activation (``kernels/ops/conv.py``), beside clip and x * sigmoid(x)
CONV_ACTIVATIONS = frozenset(UNARY_ACTIVATIONS)
#: an activation op's attributes -> the conv's
_ACTIVATION_ATTRS = {"alpha": "activation_alpha", "beta": "activation_beta"}


def conv_activation(g: _Graph, top: Node) -> Replacement | None:
    """conv -> activation as one conv with that activation (oneDNN's post-op on the host, the kernels' epilogue
    elsewhere): a constant-bounded Clip (ReLU6, as MobileNets write it), an activation of ``CONV_ACTIVATIONS``,
    or x * sigmoid(x) (SiLU, as exporters write it), that alone reads a float conv without an activation of its
    own."""
    if top.op == "mul" and len(top.inputs) == 2:
        for x, s in ((top.inputs[0], top.inputs[1]), (top.inputs[1], top.inputs[0])):
            sig = s.producer
            if sig is not None and sig.op == "sigmoid" and sig.inputs[0] is x and g.internal(s, [top]) \
                    and g.internal(x, [top, sig]):
                conv = _activated_conv(g, x)
                if conv is not None:
                    return Replacement("conv_activation", [top, sig, conv], "conv",
                                       {**conv.attrs, "activation": "swish", "activation_alpha": 1.0},
                                       list(conv.inputs), [top.outputs[0]])
        return None
    if (top.op != "clip" and top.op not in CONV_ACTIVATIONS) or len(top.inputs) != 1 \
            or g.only(top.inputs[0]) is not top:
        return None
    conv = _activated_conv(g, top.inputs[0])
    if conv is None:
        return None
    if top.op == "clip":
        lo, hi = top.attrs.get("min", -math.inf), top.attrs.get("max", math.inf)
        extra = {"activation_min": -math.inf if lo is None else lo, "activation_max": math.inf if hi is None else hi}
    else:
        extra = {_ACTIVATION_ATTRS[k]: v for k, v in top.attrs.items() if k in _ACTIVATION_ATTRS}
        if len(extra) != len(top.attrs):
            return None
    return Replacement("conv_activation", [top, conv], "conv", {**conv.attrs, "activation": top.op, **extra},
                       list(conv.inputs), [top.outputs[0]])


def _activated_conv(g: _Graph, v: Value) -> Node | None:
    """The float conv without an activation that makes ``v``, else None."""
    conv = v.producer
    if conv is None or conv.op != "conv" or conv.attrs.get("activation") is not None \
            or not computes_as_float(g.types[id(v)].dtype):
        return None
    return conv


# -- GroupNorm -------------------------------------------------------------------------------------------------------
def _per_channel(v: Value | None, rank: int, channels: int) -> np.ndarray | None:
    """A constant varying along axis 1 only (of a rank-``rank`` tensor), as a (channels,) array; else None."""
    c = v.constant if v is not None else None
    if c is None or c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if any(n != 1 for k, n in enumerate(shape) if k != 1) or shape[1] not in (1, channels):
        return None
    return np.ascontiguousarray(np.broadcast_to(c.reshape(-1), (channels,)))


def group_norm(g: _Graph, first: Node) -> Replacement | None:
    """reshape (N, C, ...) to (N, G, -1) -> instance normalization (unit scale, zero bias) -> reshape back
    [-> mul by a per-channel constant [-> add one]]: PyTorch's GroupNorm as exported before opset 18."""
    if first.op != "reshape":
        return None
    x = first.inputs[0]
    xs, grouped = g.shape(x), g.shape(first.outputs[0])
    if len(xs) < 3 or len(grouped) != 3 or grouped[0] != xs[0] or not computes_as_float(g.types[id(x)].dtype):
        return None
    C, G = xs[1], grouped[1]
    if G < 1 or C % G or grouped[2] * G * xs[0] != g.types[id(x)].size:
        return None
    norm = g.only(first.outputs[0])
    if norm is None or norm.op != "group_normalization" or norm.attrs["num_groups"] != G or \
            norm.inputs[0] is not first.outputs[0]:
        return None
    unit, zero = (v.constant for v in norm.inputs[1:3])
    if unit is None or zero is None or not np.all(unit == 1) or not np.all(zero == 0):
        return None
    back = g.only(norm.outputs[0])
    if back is None or back.op != "reshape" or g.shape(back.outputs[0]) != xs:
        return None
    members, last = [first, norm, back], back
    scale = np.ones(C, g.types[id(x)].dtype)
    bias = np.zeros(C, g.types[id(x)].dtype)
    nxt = g.only(back.outputs[0])
    if nxt is not None and nxt.op == "mul":
        found = _per_channel(_other(nxt, back.outputs[0]), len(xs), C)
        if found is not None and g.shape(nxt.outputs[0]) == xs:
            scale, members, last = found.astype(scale.dtype), members + [nxt], nxt
            nxt = g.only(nxt.outputs[0])
            if nxt is not None and nxt.op == "add":
                found = _per_channel(_other(nxt, last.outputs[0]), len(xs), C)
                if found is not None and g.shape(nxt.outputs[0]) == xs:
                    bias, members, last = found.astype(bias.dtype), members + [nxt], nxt
    params = [Value(f"{last.name}:gn_scale", TensorType((C,), scale.dtype), constant=scale),
              Value(f"{last.name}:gn_bias", TensorType((C,), bias.dtype), constant=bias)]
    return Replacement("group_normalization", members, "group_normalization",
                       {"num_groups": G, "epsilon": norm.attrs["epsilon"]}, [x, *params], [last.outputs[0]])


# -- slices cutting a tensor into pieces ----------------------------------------------------------------------------
def _cut(node: Node, shape: tuple[int, ...], dtype: Any) -> tuple[int, int, int] | None:
    """(axis, first index, length) of a slice that keeps one run of one axis (step 1) and every other axis whole;
    None for any other slice."""
    try:
        attrs = get("slice").check([TensorType(shape, dtype)], dict(node.attrs))
    except DeviceLayerError:
        return None
    cuts = []
    for axis, (start, step, n) in enumerate(slice_params(shape, attrs["starts"], attrs["ends"], attrs["axes"],
                                                         attrs["steps"])):
        if step != 1 and n > 1:
            return None
        if not (start == 0 and n == shape[axis]):
            cuts.append((axis, start, n))
    return cuts[0] if len(cuts) == 1 else None


def slices_as_split(g: _Graph, node: Node) -> Replacement | None:
    """Slices of one tensor along one axis that cut it into consecutive pieces, end to end (YOLOv8's C2f chunks a
    tensor in two this way; an exporter may spell Split so): one split, which moves every piece in one launch."""
    if node.op != "slice" or len(node.inputs) != 1 or node.inputs[0].constant is not None:
        return None
    x = node.inputs[0]
    shape, dtype = g.shape(x), g.types[id(x)].dtype
    cuts = {id(r): (_cut(r, shape, dtype), r) for r in g.distinct(x)
            if r.op == "slice" and id(r) not in g.taken and len(r.inputs) == 1}
    mine = cuts.get(id(node), (None, node))[0]
    if mine is None:
        return None
    pieces = sorted(((cut[1], cut[2], r) for cut, r in cuts.values() if cut is not None and cut[0] == mine[0]),
                    key=lambda p: (p[0], p[1]))
    at = 0
    for start, n, _ in pieces:
        if start != at:
            return None  # (a gap or an overlap: not a cut into pieces)
        at += n
    if len(pieces) < 2 or at != shape[mine[0]]:
        return None
    members = [r for _, _, r in pieces]
    return Replacement("split", members, "split", {"axis": mine[0], "split": tuple(n for _, n, _ in pieces)}, [x],
                       [r.outputs[0] for r in members])


# -- attention ------------------------------------------------------------------------------------------------------
def _scale_of(g: _Graph, node: Node, scores: Value) -> float | None:
    """The factor ``node`` (mul or div by a one-element constant, reading ``scores``) scales them by; else None."""
    other = _other(node, scores) if node.op in ("mul", "div") else None
    c = scalar(other) if other is not None else None
    if c is None or (node.op == "div" and (node.inputs[0] is not scores or c == 0)):
        return None
    return c if node.op == "mul" else 1.0 / c


def _through_scales(g: _Graph, v: Value, reader: Node) -> tuple[Value, float, list[Node]]:
    """``v`` read through its chain of scalar multiplications and divisions (each read only by the next, the last
    only by ``reader``): the value before them, the product of their factors, the chain's nodes."""
    factor, members = 1.0, []
    while v.producer is not None and v.producer.op in ("mul", "div") and g.only(v) is reader:
        node = v.producer
        base = node.inputs[0] if node.inputs[1].constant is not None else node.inputs[1]
        f = _scale_of(g, node, base)
        if f is None or g.types[id(base)].shape != g.types[id(v)].shape:
            break
        factor, members, v, reader = factor * f, [node, *members], base, node
    return v, factor, members


def _nan_to_zero(g: _Graph, probs: Value) -> tuple[Node, list[Node]] | None:
    """(the softmax, the nodes) where ``probs`` is where(is_nan(p), 0, p) of a softmax's p read by nothing else:
    PyTorch's export of scaled_dot_product_attention with a mask, whose rows masked everywhere give zeros."""
    where = probs.producer
    if where is None or where.op != "where" or len(where.inputs) != 3:
        return None
    isnan, zero, p = where.inputs[0].producer, where.inputs[1], where.inputs[2]
    if isnan is None or isnan.op != "is_nan" or isnan.inputs[0] is not p or scalar(zero) != 0.0:
        return None
    sm = p.producer
    if sm is None or sm.op != "softmax" or g.only(isnan.outputs[0]) is not where or \
            not g.internal(p, [isnan, where]) or id(isnan) in g.taken:
        return None
    return sm, [isnan, where]


def attention(g: _Graph, last: Node) -> Replacement | None:
    """matmul(q [* a], kᵀ [* b]) [* or / c] [+ mask] -> softmax(axis -1) [-> where(is_nan(p), 0, p)] -> matmul(.,
    v), 4-D, heads and batch equal, the factors one-element constants (the scale is their product, 1 without
    them).  kᵀ is transpose(k, (0, 1, 3, 2)) (read through to k) or any (B, H, Dk, Skv) tensor (PyTorch's
    export transposes the keys' (B, S, H, D) view with (0, 2, 3, 1)).  The mask is any float tensor as long
    as the keys (a constant one without NaN); a row it masks everywhere gives the softmax's NaN (``nan_rows``),
    or zeros where the where makes them so, as the attention op does by default.  Transposes making q, k and v
    from (B, S, H, D) tensors, and the output's back to one, are taken in (``sequence_major``)."""
    if last.op != "matmul":
        return None
    probs, v = last.inputs
    if g.only(probs) is not last:
        return None
    found = _nan_to_zero(g, probs)
    sm, tail = found if found is not None else (probs.producer, [])
    if sm is None or sm.op != "softmax":
        return None
    rank = len(g.shape(probs))
    if rank != 4 or int(sm.attrs.get("axis", -1)) % rank != 3:
        return None
    members = [sm, *tail, last]
    x, reader, mask = sm.inputs[0], sm, None
    node = x.producer
    if node is not None and node.op == "add" and g.only(x) is sm:
        for scores, m in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            ms = g.shape(m)
            if scores is m or g.types[id(m)].dtype != g.types[id(x)].dtype or not 1 <= len(ms) <= rank or \
                    ms[-1] != g.shape(x)[-1] or g.shape(scores) != g.shape(x):
                continue  # (the op masks the keys past a shorter mask: one broadcast over the keys is no mask)
            if m.constant is not None and np.isnan(m.constant).any():
                return None  # (a NaN in a row: softmax's NaN row, which the where makes zeros and attention not)
            if _scores_product(g, scores, node) is not None:
                mask, x, reader = m, scores, node
                members.insert(0, node)
                break
        if mask is None:
            return None
    found_qk = _scores_product(g, x, reader)
    if found_qk is None:
        return None
    q, k, k_transposed, factor, nodes = found_qk
    qs, ks, vs = g.shape(q), g.shape(k), g.shape(v)
    if len(ks) != 4 or qs[:2] != ks[:2] or vs[:2] != qs[:2] or vs[2] != ks[3 if k_transposed else 2]:
        return None
    members = [*nodes, *members]
    qkv, major, k_transposed = _sequence_major(g, [q, k, v], k_transposed, members)
    y, same = last.outputs[0], []
    after = g.only(y)
    while after is not None and after.op == "reshape" and g.shape(after.outputs[0]) == g.shape(y) and \
            id(after) not in g.taken:  # (PyTorch's export reshapes the output to its own shape first)
        same.append(after)
        after = g.only(after.outputs[0])
    if after is not None and after.op == "transpose" and _perm(after) == [0, 2, 1, 3] and id(after) not in g.taken:
        y, major[3] = after.outputs[0], 1
        members += [*same, after]
    inputs = qkv + ([mask] if mask is not None else [])
    attrs = {"scale": float(factor), "k_transposed": k_transposed, "nan_rows": not tail,
             "sequence_major": tuple(major)}
    r = Replacement("attention", members, "attention", attrs, inputs, [y])
    packed = _packed(g, qkv, major, members)
    if packed is not None:  # (``find`` takes it where the device reads q, k and v where they lie)
        whole, heads, taken = packed
        r.extra["packed"] = Replacement("attention", [*taken, *members], "attention",
                                        {**attrs, "sequence_major": (0, 0, 0, major[3]), "packed_heads": heads},
                                        [whole] * 3 + inputs[3:], [y])
    return r


def _packed(g: _Graph, qkv: list[Value], major: list[int], members: list[Node]) -> \
        tuple[Value, tuple[int, int], list[Node]] | None:
    """(the (B, S, W) tensor, (Hq, Hk), the nodes taken in) where sequence-major q, k and v are reshapes of the three
    pieces a split along its last axis cuts from one tensor (a fused projection's q, k and v: GPT-2's), each read
    only by the pattern; else None."""
    if not all(major[:3]) or len({id(v) for v in qkv}) != 3:
        return None
    pieces, heads, views = [], [], []
    for v in qkv:
        view = v.producer
        if view is None or view.op != "reshape" or id(view) in g.taken or not g.internal(v, members):
            return None
        piece, shape = view.inputs[0], g.shape(v)
        if len(g.shape(piece)) != 3 or g.shape(piece)[:2] != shape[:2] or g.shape(piece)[2] != shape[2] * shape[3]:
            return None
        pieces.append(piece)
        heads.append(shape[2])
        views.append(view)
    split = pieces[0].producer
    if split is None or split.op != "split" or id(split) in g.taken or list(split.outputs) != pieces or \
            int(split.attrs.get("axis", 0)) % 3 != 2 or len({g.shape(v)[3] for v in qkv}) != 1 or \
            heads[1] != heads[2] or not all(g.internal(p, [*views, *members]) for p in pieces):
        return None
    return split.inputs[0], (heads[0], heads[1]), [split, *views]


def _perm(node: Node) -> list[int]:
    return [int(p) % 4 for p in node.attrs.get("perm", ())]


def _sequence_major(g: _Graph, qkv: list[Value], k_transposed: bool, members: list[Node]) -> \
        tuple[list[Value], list[int], bool]:
    """q, k and v read through the transposes that made them from (B, S, H, D) tensors (each transpose's output
    read only by ``members``, which take the transposes in): the values, their ``sequence_major`` flags (the
    output's 0) and whether k is still given transposed.  kᵀ comes from (0, 2, 3, 1), q, k and v from
    (0, 2, 1, 3)."""
    qkv, major = list(qkv), [0, 0, 0, 0]
    want = [[0, 2, 1, 3], [0, 2, 3, 1] if k_transposed else [0, 2, 1, 3], [0, 2, 1, 3]]
    for i in range(3):
        v, tr = qkv[i], qkv[i].producer
        if major[i] or tr is None or tr.op != "transpose" or id(tr) in g.taken or any(m is tr for m in members):
            continue
        same = [j for j in range(3) if qkv[j] is v]
        if any(want[j] != want[i] for j in same) or _perm(tr) != want[i] or not g.internal(v, members):
            continue
        for j in same:
            qkv[j], major[j] = tr.inputs[0], 1
        members.insert(0, tr)
    return qkv, major, k_transposed and not major[1]


def _scores_product(g: _Graph, x: Value, reader: Node) -> tuple[Value, Value, bool, float, list[Node]] | None:
    """(q, k or kᵀ, whether kᵀ, the scale, the nodes) where ``x`` (read only by ``reader``) is q·kᵀ scaled by
    one-element constants before or after the product."""
    prod, factor, nodes = _through_scales(g, x, reader)
    first = prod.producer
    if first is None or first.op != "matmul" or g.only(prod) is not (nodes[0] if nodes else reader):
        return None
    q, fq, q_nodes = _through_scales(g, first.inputs[0], first)
    kt, fk, k_nodes = _through_scales(g, first.inputs[1], first)
    if len(g.shape(q)) != 4 or len(g.shape(kt)) != 4 or q is kt:
        return None
    tr = kt.producer
    perm = tr.attrs.get("perm") if tr is not None and tr.op == "transpose" else None
    inner = k_nodes[0] if k_nodes else first
    if perm is not None and [int(p) % 4 for p in perm] == [0, 1, 3, 2] and g.only(kt) is inner:
        k, k_transposed, k_nodes = tr.inputs[0], False, [tr, *k_nodes]
    else:
        k, k_transposed = kt, True
    return q, k, k_transposed, factor * fq * fk, [*q_nodes, *k_nodes, first, *nodes]


#: ops that replace their pattern on the host only: a kernel device computes their chain (x * sigmoid(x)) as one
#: fused kernel anyway, which may also join a product's epilogue
HOST_ONLY = frozenset({"swish"})  # pattern kinds
#: pattern kinds kept on kernel devices only: the host's slices read its channels-last layout where they lie
#: (``LayoutSlice``), which a split would first convert back
KERNELS_ONLY = frozenset({"split"})
#: pattern kinds kept only where the device's vendor library (if it has one for the op) takes the replacement
VENDOR_FIRST = frozenset({"conv_activation"})
#: pattern kinds kept on the host only where its vendor library takes the replacement: the op's NumPy reference
#: costs more than the nodes it replaces (attention's, 3x)
HOST_VENDOR_ONLY = frozenset({"attention"})
#: pattern kinds kept on a device whose vendor library runs matmul only where the op says it beats the nodes with
#: the vendor's products (``beats_vendor_products``: attention's fused kernel, not its tiled or composed plans)
VENDOR_PRODUCTS = frozenset({"attention"})

#: matchers, tried at each node in order (the first that matches takes the nodes)
MATCHERS: tuple[Callable[[_Graph, Node], Replacement | None], ...] = (layer_norm, softmax, gelu, conv_activation,
                                                                     swish, group_norm, attention, slices_as_split)


def find(nodes: list[Node], types: Mapping[int, TensorType], outputs: set[int], readers: Mapping[int, list[Node]],
         device_of: Callable[[Node], Any], excluded: set[int]) -> list[Replacement]:
    """The patterns of ``nodes`` (in order) whose nodes share a device that runs the replacing op; nodes in
    ``excluded`` (ids) take part in none."""
    taken: set[int] = set(excluded)
    g = _Graph(nodes, types, outputs, readers, taken)
    found: list[Replacement] = []
    for node in reversed(nodes):  # from the end: a gelu's outer product is found before its inner ones
        if id(node) in taken:
            continue
        for matcher in MATCHERS:
            r = matcher(g, node)
            if r is None or any(id(m) in taken for m in r.members) or len({id(m) for m in r.members}) != len(
                    r.members):
                continue
            devices = {id(device_of(m)) for m in r.members}
            if len(devices) != 1:
                continue
            r.device = device_of(r.members[0])
            if r.kind in HOST_ONLY and r.device.info.kernel_language != "python":
                continue
            if r.kind in KERNELS_ONLY and r.device.info.kernel_language == "python":
                continue
            if not _runs(r, types):
                continue
            r = _packed_where_read(r, g, types, device_of)
            taken.update(id(m) for m in r.members)
            found.append(r)
            break
    return found


def _packed_where_read(r: Replacement, g: _Graph, types: Mapping[int, TensorType],
                       device_of: Callable[[Node], Any]) -> Replacement:
    """``r``'s packed form (``extra["packed"]``: attention reading q, k and v from the tensor a split cuts them
    from, the split and reshapes taken in) where its nodes share ``r``'s device and that device reads them where
    they lie (its vendor op, or the op's kernels other than the composition, which copies them apart); else ``r``."""
    packed = r.extra.get("packed")
    if packed is None or any(id(m) in g.taken for m in packed.members) or \
            any(device_of(m) is not r.device for m in packed.members):
        return r
    packed.device = r.device
    op = get(packed.op)
    ins = [types.get(id(v), v.type) for v in packed.inputs]
    try:
        attrs, outs = op.prepare(ins, dict(packed.attrs))
    except DeviceLayerError:
        return r
    if not (_vendor_accepts(r.device.vendor_op(packed.op), ins, outs, attrs) or
            (r.device.info.kernel_language != "python" and op.reads_packed(ins, attrs, r.device.info))):
        return r
    return packed if _runs(packed, types) else r


def _vendor_accepts(vendor: Any, ins: list, outs: list, attrs: dict) -> bool:
    """Whether a vendor op takes the call (its own kernel for the op: CUDA's tensor-core attention)."""
    accepts = getattr(vendor, "accepts", None)
    return vendor is not None and accepts is not None and bool(accepts(ins, outs, attrs))


def _runs(r: Replacement, types: Mapping[int, TensorType]) -> bool:
    """Whether the replacing op takes these inputs (and gives the members' output type) on the device."""
    op = get(r.op)
    ins = [types.get(id(v), v.type) for v in r.inputs]  # (constants a pattern made are not in types)
    try:
        attrs, outs = op.prepare(ins, dict(r.attrs))
    except DeviceLayerError:
        return False
    if [(t.shape, t.dtype) for t in outs] != [(types[id(v)].shape, types[id(v)].dtype) for v in r.outputs]:
        return False
    on_host = r.device.info.kernel_language == "python"
    if r.kind in VENDOR_PRODUCTS and not on_host and r.device.vendor_op("matmul") is not None and \
            not _vendor_accepts(r.device.vendor_op(r.op), ins, outs, attrs) and \
            not op.beats_vendor_products(ins, attrs, r.device.info):
        return False
    if (r.kind in VENDOR_FIRST and not on_host) or (r.kind in HOST_VENDOR_ONLY and on_host):
        vendor = r.device.vendor_op(r.op)
        accepts = getattr(vendor, "accepts", None)
        if vendor is None and on_host:
            return False
        if vendor is not None and accepts is not None and not accepts(ins, outs, attrs):
            return False
    return op.unsupported(ins, attrs, r.device.info) is None


__all__ = ["Replacement", "find", "MATCHERS", "scalar"]
