"""Data movement: concat, split, slice, pad, transpose, reshape, flatten, squeeze, unsqueeze, gather,
depth_to_space, space_to_depth (ONNX semantics), and channel_shuffle (ShuffleNet's channel interleave).

concat and split move up to eight pieces in one launch (``pieces``).  Most of the others are one strided copy:
the output (or a block of it) is walked as an
up-to-6-D box; each point reads the input at ``xo + sum(c[k] * a[k])`` and
writes the output at ``yo + sum(c[k] * b[k])``.  Strides may be negative (slices
with negative steps).  Dims are coalesced first, so higher ranks work whenever
the layout folds into 6 dims.  Copies move bits (float32 and int32 share one
kernel), so data movement works for any 1/2/4/8-byte element type the device has.

reshape, flatten, squeeze and unsqueeze are views: an Alias step, no copy.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np

from ...errors import UnsupportedOp
from ...info import DeviceInfo
from ..dialect import TYPES, KernelSpec, Param, dialect_type
from ..op import Alias, Launch, Op, Plan, TensorType, add_flag, groups_for, kernel_takes, local_1d, register
from .indices import checked_index, index_dtype, normalized, out_of_range
from .pieces import piece_launches

MAX_RANK = 6  # dims a copy kernel walks after coalescing


# -- attribute helpers ------------------------------------------------------------------------
def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def int_attr(op: Op, attrs: dict[str, Any], name: str, default: Any = None, required: bool = False) -> Any:
    """An int attribute (``default`` when absent)."""
    if name not in attrs or attrs[name] is None:
        if required:
            raise op.error(f"needs attribute {name!r}")
        return default
    v = attrs[name]
    if not _is_int(v):
        raise op.error(f"attribute {name!r} must be an int, got {v!r}")
    return int(v)


def ints_attr(op: Op, attrs: dict[str, Any], name: str, default: Any = None, required: bool = False,
              length: int | None = None) -> Any:
    """A list-of-ints attribute as a tuple (``default`` when absent)."""
    if name not in attrs or attrs[name] is None:
        if required:
            raise op.error(f"needs attribute {name!r}")
        return default
    v = attrs[name]
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if _is_int(v):
        v = [v]
    if not isinstance(v, (list, tuple)) or not all(_is_int(x) for x in v):
        raise op.error(f"attribute {name!r} must be a list of ints, got {v!r}")
    if length is not None and len(v) != length:
        raise op.error(f"attribute {name!r} needs {length} values, got {len(v)}")
    return tuple(int(x) for x in v)


def norm_axis(op: Op, axis: int, rank: int, name: str = "axis") -> int:
    """``axis`` in ``[-rank, rank)`` made non-negative."""
    if not -rank <= axis < rank:
        raise op.error(f"{name} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(op: Op, axes: Sequence[int], rank: int, name: str = "axes") -> tuple[int, ...]:
    out = tuple(norm_axis(op, a, rank, name) for a in axes)
    if len(set(out)) != len(out):
        raise op.error(f"{name} {tuple(axes)} repeat an axis")
    return out


def refuse_unknown(op: Op, attrs: dict[str, Any], known: Sequence[str]) -> None:
    extra = set(attrs) - set(known)
    if extra:
        raise op.error(f"unknown attribute(s) {sorted(extra)}; it takes {sorted(known) or 'none'}")


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, s = [], 1
    for d in reversed(shape):
        strides.append(s)
        s *= max(int(d), 1)
    return strides[::-1]


# -- the strided copy kernel ------------------------------------------------------------------
#: element byte size -> dialect type that moves the bits
_COPY_TYPES = {1: "uchar", 2: "f16", 4: "uint", 8: "i64"}


def copy_type(dtype: np.dtype) -> str | None:
    """The dialect type a copy of ``dtype`` moves bits with (None when there is none)."""
    dtype = np.dtype(dtype)
    if dtype.itemsize == 2 and dtype.name != "float16":
        return "u16"  # 16-bit ints move as themselves (a device may have them without float16)
    return _COPY_TYPES.get(dtype.itemsize)


def _copy_spec(ct: str) -> KernelSpec:
    dims = "".join(f"        int c{k} = r % d{k}; r = r / d{k};\n" for k in range(MAX_RANK - 1, 0, -1))
    xi = " + ".join(f"c{k} * a{k}" for k in range(MAX_RANK))
    yi = " + ".join(f"c{k} * b{k}" for k in range(MAX_RANK))
    body = ("    FOR_EACH(i, n) {\n        int r = i;\n" + dims + "        int c0 = r;\n"
            f"        y[yo + {yi}] = x[xo + {xi}];\n    }}")
    params = [Param("x", ct, "in"), Param("y", ct, "out"), Param("n", "int", "scalar")]
    params += [Param(f"d{k}", "int", "scalar") for k in range(1, MAX_RANK)]
    params += [Param(f"a{k}", "int", "scalar") for k in range(MAX_RANK)] + [Param("xo", "int", "scalar")]
    params += [Param(f"b{k}", "int", "scalar") for k in range(MAX_RANK)] + [Param("yo", "int", "scalar")]
    return KernelSpec(f"movement_copy_{ct}", tuple(params), body, elem=ct)


def coalesce(dims: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dims and merge neighbours that every stride list walks as one."""
    out_d: list[int] = []
    out_s: list[list[int]] = [[] for _ in strides]
    for k, d in enumerate(dims):
        if d == 1:
            continue
        if out_d and all(s[-1] == st[k] * d for s, st in zip(out_s, strides)):
            out_d[-1] *= d
            for s, st in zip(out_s, strides):
                s[-1] = st[k]
            continue
        out_d.append(int(d))
        for s, st in zip(out_s, strides):
            s.append(int(st[k]))
    return out_d, out_s


def copy_type_for(dtype: np.dtype, who: str) -> str:
    """``copy_type`` of ``dtype``; UnsupportedOp naming ``who`` where there is none."""
    ct = copy_type(dtype)
    if ct is None:
        raise UnsupportedOp(f"{who}: no copy kernel for {np.dtype(dtype)}")
    return ct


def copy_launch(dtype: np.dtype, src: tuple, dst: tuple, dims: Sequence[int], a: Sequence[int], xo: int,
                b: Sequence[int], yo: int, info: DeviceInfo, who: str) -> Launch | None:
    """A strided copy of the box ``dims`` (None when it is empty); UnsupportedOp past 6 folded dims."""
    n = int(np.prod(dims, dtype=np.int64)) if len(dims) else 1
    if n == 0:
        return None
    ct = copy_type_for(dtype, who)
    d, (a, b) = coalesce(dims, a, b)
    if len(d) > MAX_RANK:
        raise UnsupportedOp(f"{who}: the copy folds into {len(d)} dims; kernels walk at most {MAX_RANK}")
    pad = MAX_RANK - len(d)
    d, a, b = [1] * pad + d, [0] * pad + a, [0] * pad + b
    local = local_1d(info)
    args = (src, dst, n, *[int(v) for v in d[1:]], *[int(v) for v in a], int(xo), *[int(v) for v in b], int(yo))
    return Launch(_copy_spec(ct), args, groups_for(n, local, info), (local,))


class Movement(Op):
    """Base of the data movement ops: bit copies for every element type the device has."""

    kernel_dtypes = frozenset({"float32", "float16", "float64", "int32", "int64", "uint32", "uint64",
                               "int8", "uint8", "int16", "uint16", "bool"})
    #: inputs that are data (moved as bits; None: all); the rest (gather's indices) are checked by the op
    data_inputs: tuple[int, ...] | None = (0,)

    def unsupported(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> str | None:
        for t in inputs:
            if t.dtype.name not in info.dtypes:
                return f"{info.id} has no {t.dtype.name}"
        if info.kernel_language == "python" or self.alias:
            return None
        for i in (range(len(inputs)) if self.data_inputs is None else self.data_inputs):
            name = inputs[i].dtype.name
            ct = copy_type(inputs[i].dtype)
            if not kernel_takes(self.kernel_dtypes, name, info) or ct is None:
                return f"{self.name} has no {info.kernel_language} kernel for {name}"
            if TYPES[ct] not in info.dtypes:
                return f"{self.name} moves {name} as {TYPES[ct]}, which {info.id} lacks"
        try:
            self.plan(inputs, self.infer(inputs, attrs), attrs, info)
        except UnsupportedOp as e:
            return str(e)
        return None


# -- concat / split / slice / transpose ---------------------------------------------------------
@register
class Concat(Movement):
    """concat(x0, x1, ..., axis): join along ``axis``; every other dim must agree."""

    name = "concat"
    max_inputs = 1 << 16
    data_inputs = None

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["axis"])
        first = inputs[0]
        if len(first.shape) == 0:
            raise self.error("cannot concatenate scalars (rank 0)")
        axis = norm_axis(self, int_attr(self, attrs, "axis", required=True), len(first.shape))
        for k, t in enumerate(inputs[1:], 1):
            if t.dtype != first.dtype:
                raise self.error(f"input {k} is {t.dtype}, input 0 is {first.dtype}")
            if len(t.shape) != len(first.shape) or any(a != b for j, (a, b) in enumerate(zip(t.shape, first.shape))
                                                        if j != axis):
                raise self.error(f"input {k} has shape {t.shape}, which does not match {first.shape} "
                                 f"outside axis {axis}")
        return {"axis": axis}

    def infer(self, inputs, attrs):
        axis = attrs["axis"]
        shape = list(inputs[0].shape)
        shape[axis] = sum(t.shape[axis] for t in inputs)
        return [TensorType.of(shape, inputs[0].dtype)]

    def reference(self, inputs, attrs):
        return [np.concatenate(list(inputs), axis=attrs["axis"])]

    def reference_into(self, inputs, outputs, attrs):
        np.concatenate(list(inputs), axis=attrs["axis"], out=outputs[0])

    def plan(self, inputs, outputs, attrs, info):
        axis = attrs["axis"]
        if sum(1 for t in inputs if t.size) > 1:  # (one launch for every PIECES inputs)
            return Plan(piece_launches(copy_type_for(inputs[0].dtype, self.name), outputs[0].shape, axis,
                                       [t.shape[axis] for t in inputs], True, info, self.name))
        ostrides = contiguous_strides(outputs[0].shape)
        steps, offset = [], 0
        for i, t in enumerate(inputs):
            step = copy_launch(t.dtype, ("in", i), ("out", 0), t.shape, contiguous_strides(t.shape), 0,
                               ostrides, offset * ostrides[axis], info, self.name)
            if step is not None:
                steps.append(step)
            offset += t.shape[axis]
        return Plan(steps)


@register
class Split(Movement):
    """split(x, axis, split=[sizes] | num_outputs=n): pieces along ``axis`` (ONNX; uneven last piece)."""

    name = "split"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["axis", "split", "num_outputs"])
        shape = inputs[0].shape
        if len(shape) == 0:
            raise self.error("cannot split a scalar (rank 0)")
        axis = norm_axis(self, int_attr(self, attrs, "axis", 0), len(shape))
        sizes = ints_attr(self, attrs, "split")
        num = int_attr(self, attrs, "num_outputs")
        dim = shape[axis]
        if (sizes is None) == (num is None):
            raise self.error("give exactly one of 'split' (sizes) and 'num_outputs'")
        if sizes is not None:
            if not sizes or any(s < 0 for s in sizes):
                raise self.error(f"split sizes must be a non-empty list of sizes >= 0, got {list(sizes)}")
            if sum(sizes) != dim:
                raise self.error(f"split sizes {list(sizes)} add up to {sum(sizes)}, axis {axis} has {dim}")
        else:
            if num < 1:
                raise self.error(f"num_outputs must be >= 1, got {num}")
            chunk = -(-dim // num)
            last = dim - chunk * (num - 1)
            if last < 0:
                raise self.error(f"axis {axis} of size {dim} cannot be split into {num} pieces of {chunk}")
            sizes = (chunk,) * (num - 1) + (last,)
        return {"axis": axis, "split": tuple(sizes)}

    def infer(self, inputs, attrs):
        axis, shape = attrs["axis"], list(inputs[0].shape)
        outs = []
        for s in attrs["split"]:
            shape[axis] = s
            outs.append(TensorType.of(shape, inputs[0].dtype))
        return outs

    def reference(self, inputs, attrs):
        cuts = np.cumsum(attrs["split"])[:-1]
        return [np.ascontiguousarray(p) for p in np.split(inputs[0], cuts, axis=attrs["axis"])]

    def plan(self, inputs, outputs, attrs, info):
        axis, src = attrs["axis"], inputs[0]
        if sum(1 for t in outputs if t.size) > 1:  # (one launch for every PIECES outputs)
            return Plan(piece_launches(copy_type_for(src.dtype, self.name), src.shape, axis, attrs["split"], False,
                                       info, self.name))
        istrides = contiguous_strides(src.shape)
        steps, offset = [], 0
        for j, t in enumerate(outputs):
            step = copy_launch(src.dtype, ("in", 0), ("out", j), t.shape, istrides, offset * istrides[axis],
                               contiguous_strides(t.shape), 0, info, self.name)
            if step is not None:
                steps.append(step)
            offset += t.shape[axis]
        return Plan(steps)


def slice_params(shape: Sequence[int], starts: Sequence[int], ends: Sequence[int], axes: Sequence[int],
                 steps: Sequence[int]) -> list[tuple[int, int, int]]:
    """Per dim (first index, step, length) of an ONNX Slice (clamped as ONNX says)."""
    out = [(0, 1, int(d)) for d in shape]
    for axis, start, end, step in zip(axes, starts, ends, steps):
        dim = shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
            length = max(0, -(-(end - start) // step))
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
            length = max(0, -(-(start - end) // -step))
        out[axis] = (start if length else 0, step, length)
    return out


@register
class Slice(Movement):
    """slice(x, starts, ends, axes=all, steps=1): ONNX Slice (negative indices/steps, clamping)."""

    name = "slice"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["starts", "ends", "axes", "steps"])
        rank = len(inputs[0].shape)
        starts = ints_attr(self, attrs, "starts", required=True)
        ends = ints_attr(self, attrs, "ends", required=True, length=len(starts))
        axes = ints_attr(self, attrs, "axes", tuple(range(len(starts))), length=len(starts))
        steps = ints_attr(self, attrs, "steps", (1,) * len(starts), length=len(starts))
        axes = norm_axes(self, axes, rank)
        if any(s == 0 for s in steps):
            raise self.error(f"steps must be non-zero, got {list(steps)}")
        return {"starts": starts, "ends": ends, "axes": axes, "steps": steps}

    def _params(self, shape, attrs):
        return slice_params(shape, attrs["starts"], attrs["ends"], attrs["axes"], attrs["steps"])

    def infer(self, inputs, attrs):
        return [TensorType.of([n for _, _, n in self._params(inputs[0].shape, attrs)], inputs[0].dtype)]

    def index(self, shape: Sequence[int], attrs: dict[str, Any]) -> tuple[slice, ...]:
        """The slice as a NumPy index into an array of ``shape`` (checked attributes)."""
        index = []
        for start, step, n in self._params(shape, attrs):
            stop = start + step * n
            index.append(slice(start, stop if stop >= 0 else None, step) if n else slice(0, 0))
        return tuple(index)

    def reference(self, inputs, attrs):
        x = inputs[0]
        return [np.ascontiguousarray(x[self.index(x.shape, attrs)])]

    def plan(self, inputs, outputs, attrs, info):
        src = inputs[0]
        params = self._params(src.shape, attrs)
        istrides = contiguous_strides(src.shape)
        xo = sum(start * s for (start, _, _), s in zip(params, istrides))
        a = [step * s for (_, step, _), s in zip(params, istrides)]
        step = copy_launch(src.dtype, ("in", 0), ("out", 0), outputs[0].shape, a, xo,
                           contiguous_strides(outputs[0].shape), 0, info, self.name)
        return Plan([step] if step else [])


def permuted_copy(op: Op, dtype, shape: Sequence[int], perm: Sequence[int], info: DeviceInfo,
                  src: tuple = ("in", 0), dst: tuple = ("out", 0)) -> Plan:
    """A plan writing ``x.transpose(perm)`` (x of ``shape``, contiguous) contiguously."""
    istrides = contiguous_strides(shape)
    oshape = [shape[p] for p in perm]
    step = copy_launch(dtype, src, dst, oshape, [istrides[p] for p in perm], 0,
                       contiguous_strides(oshape), 0, info, op.name)
    return Plan([step] if step else [])


@register
class Transpose(Movement):
    """transpose(x, perm=reversed): output dim k is input dim perm[k]."""

    name = "transpose"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["perm"])
        rank = len(inputs[0].shape)
        perm = ints_attr(self, attrs, "perm", tuple(range(rank - 1, -1, -1)))
        if sorted(perm) != list(range(rank)):
            raise self.error(f"perm {list(perm)} is not a permutation of range({rank})")
        return {"perm": perm}

    def infer(self, inputs, attrs):
        return [TensorType.of([inputs[0].shape[p] for p in attrs["perm"]], inputs[0].dtype)]

    def reference(self, inputs, attrs):
        return [np.ascontiguousarray(np.transpose(inputs[0], attrs["perm"]))]

    def reference_into(self, inputs, outputs, attrs):
        np.copyto(outputs[0], np.transpose(inputs[0], attrs["perm"]))

    def bind_into(self, inputs, outputs, attrs):
        """One ``np.copyto`` from the transposed view, made once (1.9 -> 1.1 us for a small transpose)."""
        return functools.partial(np.copyto, outputs[0], np.transpose(inputs[0], attrs["perm"]))

    def plan(self, inputs, outputs, attrs, info):
        return permuted_copy(self, inputs[0].dtype, inputs[0].shape, attrs["perm"], info)


# -- views ----------------------------------------------------------------------------------------
class View(Movement):
    """An op whose output is its input with another shape: an Alias step (tensors are contiguous)."""

    alias = True
    kernel_dtypes = frozenset(TYPES.values()) | {"int16", "uint16"}

    def reference(self, inputs, attrs):
        return [inputs[0].reshape(self.infer([TensorType(inputs[0].shape, inputs[0].dtype)], attrs)[0].shape)]

    def plan(self, inputs, outputs, attrs, info):
        return Plan([Alias(0, 0)])


@register
class Reshape(View):
    """reshape(x, shape, allowzero=0): ONNX Reshape (0 copies the input dim unless allowzero; one -1 inferred)."""

    name = "reshape"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["shape", "allowzero"])
        shape = ints_attr(self, attrs, "shape", required=True)
        allowzero = int_attr(self, attrs, "allowzero", 0)
        if allowzero not in (0, 1):
            raise self.error(f"allowzero must be 0 or 1, got {allowzero}")
        src = inputs[0].shape
        if any(s < -1 for s in shape) or list(shape).count(-1) > 1:
            raise self.error(f"shape {list(shape)} may hold sizes >= 0 and at most one -1")
        if allowzero and -1 in shape and 0 in shape:
            raise self.error("with allowzero=1 the shape cannot hold both 0 and -1")
        out = []
        for k, s in enumerate(shape):
            if s == 0 and not allowzero:
                if k >= len(src):
                    raise self.error(f"shape {list(shape)}: 0 at position {k} copies a dim the input "
                                     f"{src} does not have")
                s = src[k]
            out.append(s)
        size = int(np.prod(src, dtype=np.int64))
        if -1 in out:
            known = int(np.prod([s for s in out if s != -1], dtype=np.int64))
            if known == 0 or size % known:
                raise self.error(f"cannot reshape {src} to {list(shape)}")
            out[out.index(-1)] = size // known
        if int(np.prod(out, dtype=np.int64)) != size:
            raise self.error(f"cannot reshape {src} ({size} elements) to {list(shape)}")
        return {"shape": tuple(out), "allowzero": allowzero}

    def infer(self, inputs, attrs):
        return [TensorType.of(attrs["shape"], inputs[0].dtype)]


@register
class Bitcast(View):
    """bitcast(x, to=dtype): the same bytes read as another dtype of the same width (ONNX BitCast), no copy."""

    name = "bitcast"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["to"])
        if "to" not in attrs:
            raise self.error("needs attribute 'to' (a dtype)")
        try:
            to = np.dtype(attrs["to"])
        except TypeError:
            raise self.error(f"'to' is not a dtype: {attrs['to']!r}") from None
        if to.itemsize != inputs[0].dtype.itemsize or to.kind not in "biuf":
            raise self.error(f"cannot reinterpret {inputs[0].dtype} ({inputs[0].dtype.itemsize} bytes) as {to} "
                             f"({to.itemsize} bytes): the widths must match")
        return {"to": to}

    def infer(self, inputs, attrs):
        return [TensorType(inputs[0].shape, attrs["to"])]

    def reference(self, inputs, attrs):
        return [inputs[0].view(attrs["to"])]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and attrs["to"].name not in info.dtypes:
            return f"{info.id} has no {attrs['to'].name}"
        return why


@register
class Flatten(View):
    """flatten(x, axis=1): 2-D (prod(shape[:axis]), prod(shape[axis:]))."""

    name = "flatten"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["axis"])
        rank = len(inputs[0].shape)
        axis = int_attr(self, attrs, "axis", 1)
        if not -rank <= axis <= rank:
            raise self.error(f"axis {axis} is out of range for rank {rank}")
        return {"axis": axis + rank if axis < 0 else axis}

    def infer(self, inputs, attrs):
        shape, axis = inputs[0].shape, attrs["axis"]
        return [TensorType.of((int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))),
                              inputs[0].dtype)]


@register
class Squeeze(View):
    """squeeze(x, axes=all size-1 dims): drop size-1 dims."""

    name = "squeeze"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["axes"])
        shape = inputs[0].shape
        axes = ints_attr(self, attrs, "axes")
        if axes is None:
            axes = tuple(k for k, d in enumerate(shape) if d == 1)
        axes = norm_axes(self, axes, len(shape))
        for a in axes:
            if shape[a] != 1:
                raise self.error(f"axis {a} of {shape} has size {shape[a]}, not 1")
        return {"axes": tuple(sorted(axes))}

    def infer(self, inputs, attrs):
        return [TensorType.of([d for k, d in enumerate(inputs[0].shape) if k not in attrs["axes"]], inputs[0].dtype)]


@register
class Unsqueeze(View):
    """unsqueeze(x, axes): insert size-1 dims at ``axes`` of the output."""

    name = "unsqueeze"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["axes"])
        axes = ints_attr(self, attrs, "axes", required=True)
        rank = len(inputs[0].shape) + len(axes)
        return {"axes": tuple(sorted(norm_axes(self, axes, rank)))}

    def infer(self, inputs, attrs):
        dims = iter(inputs[0].shape)
        rank = len(inputs[0].shape) + len(attrs["axes"])
        return [TensorType.of([1 if k in attrs["axes"] else next(dims) for k in range(rank)], inputs[0].dtype)]


# -- pad ------------------------------------------------------------------------------------------
_PAD_MAP = {
    "constant": None,
    "edge": "        c{k} = c{k} < 0 ? 0 : (c{k} >= i{k} ? i{k} - 1 : c{k});\n",
    "reflect": "        c{k} = c{k} < 0 ? -c{k} : (c{k} >= i{k} ? 2 * i{k} - 2 - c{k} : c{k});\n",
    # no % of a negative number: GLSL leaves it undefined (NVIDIA and lavapipe differ)
    "wrap": "        c{k} = c{k} < 0 ? (i{k} - 1) - ((-c{k} - 1) % i{k}) : c{k} % i{k};\n",
}
_PAD_VALUE = {"float": ("float", "value"), "f16": ("float", "FROM_ACC(value)"),
              "bf16": ("float", "FROM_ACC(value)"), "int": ("int", "value"),
              "i64": ("i64", "value")}


def _pad_spec(mode: str, elem: str) -> KernelSpec:
    vtype, vexpr = _PAD_VALUE[elem]
    lines = ["    FOR_EACH(i, n) {\n        int r = i;\n"]
    for k in range(MAX_RANK - 1, 0, -1):
        lines.append(f"        int c{k} = r % o{k} - p{k}; r = r / o{k};\n")
    lines.append("        int c0 = r - p0;\n")
    xi = "c0"
    for k in range(1, MAX_RANK):
        xi = f"({xi}) * i{k} + c{k}"
    if mode == "constant":
        outside = " || ".join(f"c{k} < 0 || c{k} >= i{k}" for k in range(MAX_RANK))
        lines.append(f"        if ({outside}) {{ y[i] = {vexpr}; }} else {{ y[i] = x[{xi}]; }}\n    }}")
    else:
        lines += [_PAD_MAP[mode].format(k=k) for k in range(MAX_RANK)]
        lines.append(f"        y[i] = x[{xi}];\n    }}")
    params = [Param("x", "T", "in"), Param("y", "T", "out"), Param("n", "int", "scalar")]
    params += [Param(f"o{k}", "int", "scalar") for k in range(1, MAX_RANK)]
    params += [Param(f"p{k}", "int", "scalar") for k in range(MAX_RANK)]
    params += [Param(f"i{k}", "int", "scalar") for k in range(MAX_RANK)]
    if mode == "constant":
        params.append(Param("value", vtype, "scalar"))
    return KernelSpec(f"pad_{mode}_{elem}", tuple(params), "".join(lines), elem=elem)


@register
class Pad(Movement):
    """pad(x, pads=[begins..., ends...], mode=constant|reflect|edge|wrap, value=0, axes=all): ONNX Pad.

    Negative pads crop.  reflect needs each pad below the (cropped) dim; edge, reflect and wrap
    need a non-empty (cropped) dim wherever they pad.
    """

    name = "pad"
    kernel_dtypes = frozenset({"float32", "float16", "int32", "int64"})

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["pads", "mode", "value", "axes"])
        t = inputs[0]
        rank = len(t.shape)
        mode = attrs.get("mode", "constant")
        if mode not in _PAD_MAP:
            raise self.error(f"mode must be one of {sorted(_PAD_MAP)}, got {mode!r}")
        axes = norm_axes(self, ints_attr(self, attrs, "axes", tuple(range(rank))), rank)
        raw = ints_attr(self, attrs, "pads", required=True, length=2 * len(axes))
        begins, ends = [0] * rank, [0] * rank
        for k, a in enumerate(axes):
            begins[a], ends[a] = raw[k], raw[len(axes) + k]
        value = attrs.get("value", 0.0)
        if value is None:
            value = 0.0
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise self.error(f"attribute 'value' must be a number, got {value!r}")
        if t.dtype.kind in "iub":
            if not float(value).is_integer():
                raise self.error(f"value {value!r} is not an integer, the input is {t.dtype}")
            value = int(value)
            info = np.iinfo(t.dtype) if t.dtype.kind != "b" else None
            if info is not None and not info.min <= value <= info.max:
                raise self.error(f"value {value} does not fit {t.dtype}")
        else:
            value = float(value)
        for k, d in enumerate(t.shape):
            kept = d + min(begins[k], 0) + min(ends[k], 0)
            if kept < 0:
                raise self.error(f"pads {begins[k]}, {ends[k]} crop more than dim {k} ({d}) holds")
            if mode != "constant" and (begins[k] > 0 or ends[k] > 0):
                if kept == 0:
                    raise self.error(f"mode {mode!r} cannot pad dim {k}: nothing is left of it to copy")
                if mode == "reflect" and max(begins[k], ends[k]) > kept - 1:
                    raise self.error(f"mode 'reflect' pads dim {k} ({kept} kept) by at most {kept - 1}, "
                                     f"got {begins[k]}, {ends[k]}")
        return {"pads": tuple(begins) + tuple(ends), "mode": mode, "value": value}

    def infer(self, inputs, attrs):
        rank, pads = len(inputs[0].shape), attrs["pads"]
        return [TensorType.of([d + pads[k] + pads[rank + k] for k, d in enumerate(inputs[0].shape)], inputs[0].dtype)]

    def reference(self, inputs, attrs):
        x, pads, mode = inputs[0], attrs["pads"], attrs["mode"]
        rank = x.ndim
        crop = tuple(slice(max(-pads[k], 0), x.shape[k] - max(-pads[rank + k], 0)) for k in range(rank))
        x = x[crop]
        widths = [(max(pads[k], 0), max(pads[rank + k], 0)) for k in range(rank)]
        if mode == "constant":
            return [np.pad(x, widths, mode="constant", constant_values=x.dtype.type(attrs["value"]))]
        return [np.pad(x, widths, mode=mode)]

    def plan(self, inputs, outputs, attrs, info):
        src, pads, mode = inputs[0], attrs["pads"], attrs["mode"]
        rank = len(src.shape)
        begins, ends = list(pads[:rank]), list(pads[rank:])
        in_shape = list(src.shape)
        steps: list[Launch] = []
        temps: list[TensorType] = []
        source: tuple = ("in", 0)
        if mode == "wrap" and any(p < 0 for p in pads):
            # wrap around the cropped input: crop into a scratch tensor first
            params = [(max(-b, 0), 1, d + min(b, 0) + min(e, 0)) for b, e, d in zip(begins, ends, in_shape)]
            cropped = [n for _, _, n in params]
            istrides = contiguous_strides(in_shape)
            step = copy_launch(src.dtype, source, ("tmp", 0), cropped, istrides,
                               sum(s * st for (s, _, _), st in zip(params, istrides)),
                               contiguous_strides(cropped), 0, info, self.name)
            temps.append(TensorType.of(cropped, src.dtype))
            if step is not None:
                steps.append(step)
            source, in_shape = ("tmp", 0), cropped
            begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
        out_shape = list(outputs[0].shape)
        n = outputs[0].size
        if n == 0:
            return Plan(steps, temps)
        # fold runs of untouched dims together
        dims: list[list[int]] = []  # [out, pad begin, in]
        for o, b, e, d in zip(out_shape, begins, ends, in_shape):
            untouched = b == 0 and e == 0
            if untouched and dims and dims[-1][3]:
                dims[-1][0] *= o
                dims[-1][2] *= d
            else:
                dims.append([o, b, d, untouched])
        if len(dims) > MAX_RANK:
            raise UnsupportedOp(f"pad: the input folds into {len(dims)} dims; the kernel walks at most {MAX_RANK}")
        dims = [[1, 0, 1, True]] * (MAX_RANK - len(dims)) + dims
        elem = dialect_type(src.dtype)
        spec = _pad_spec(mode, elem)
        args: list[Any] = [source, ("out", 0), n]
        args += [int(d[0]) for d in dims[1:]] + [int(d[1]) for d in dims] + [int(d[2]) for d in dims]
        if mode == "constant":
            args.append(float(attrs["value"]) if elem in ("float", "f16", "bf16") else int(attrs["value"]))
        local = local_1d(info)
        steps.append(Launch(spec, tuple(args), groups_for(n, local, info), (local,)))
        return Plan(steps, temps)


# -- gather ---------------------------------------------------------------------------------------
def _gather_spec(ct: str, it: str) -> KernelSpec:
    body = ("    FOR_EACH(i, n) {\n"
            "        int r = i % inner; int t = i / inner;\n"
            "        int j = t % nidx; int o = t / nidx;\n"
            + checked_index("k", "idx[j]", it, "dim", it)
            + "        if (k_ok) y[i] = x[(o * dim + k) * inner + r];\n    }")
    return KernelSpec(f"gather_{ct}_{it}", (Param("x", ct, "in"), Param("idx", it, "in"), Param("y", ct, "out"),
                                            Param("flag", it, "out"), Param("n", "int", "scalar"),
                                            Param("inner", "int", "scalar"), Param("nidx", "int", "scalar"),
                                            Param("dim", "int", "scalar")),
                      body, elem=ct)


#: gathers whose output is at most this size check their indices in ``np.take`` itself (``Gather.bind_into``)
SMALL_GATHER_BYTES = 64 << 10


@register
class Gather(Movement):
    """gather(data, indices, axis=0): ONNX Gather (negative indices count from the end); embedding is axis 0.

    An index out of range is an InvalidArgument naming it, on every device (kernels flag it: ``Flag``).
    """

    name = "gather"
    min_inputs = max_inputs = 2
    checks_values = True

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["axis"])
        data, idx = inputs
        if len(data.shape) == 0:
            raise self.error("data must have rank >= 1")
        index_dtype(self, idx.dtype)
        return {"axis": norm_axis(self, int_attr(self, attrs, "axis", 0), len(data.shape))}

    def infer(self, inputs, attrs):
        data, idx = inputs
        a = attrs["axis"]
        return [TensorType.of(data.shape[:a] + idx.shape + data.shape[a + 1:], data.dtype)]

    def _indices(self, data: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
        """``idx`` checked against the axis, negative ones counted from its end."""
        dim = data.shape[axis]
        if not idx.size:
            return idx
        lo, hi = idx.min(), idx.max()
        if lo < -dim or hi >= dim:
            return normalized(self, idx, dim, f"axis {axis}")  # raises, naming the first bad index
        return np.where(idx < 0, idx + dim, idx) if lo < 0 else idx

    def reference(self, inputs, attrs):
        data, idx = inputs
        return [np.take(data, self._indices(data, idx, attrs["axis"]), axis=attrs["axis"])]

    def reference_into(self, inputs, outputs, attrs):
        data, idx = inputs
        idx = self._indices(data, idx, attrs["axis"])
        if outputs[0].size:  # the indices are checked: "clip" writes straight into the output (no buffer)
            np.take(data, idx, axis=attrs["axis"], out=outputs[0], mode="clip")

    def bind_into(self, inputs, outputs, attrs):
        """A small gather is one ``np.take`` that checks its indices itself ("raise" buffers the output, which
        costs less than checking the indices first where the output is small); an error is then named as
        ``reference_into`` names it."""
        data, idx = inputs
        out, axis = outputs[0], attrs["axis"]
        if not out.size or out.nbytes > SMALL_GATHER_BYTES or idx.dtype.kind not in "iu":
            return super().bind_into(inputs, outputs, attrs)
        take = functools.partial(np.take, data, idx, axis, out, "raise")

        def gather() -> None:
            try:
                take()
            except IndexError:
                self._indices(data, idx, axis)  # raises, naming the first bad index
                raise
        return gather

    def plan(self, inputs, outputs, attrs, info):
        data, idx = inputs
        a = attrs["axis"]
        n = outputs[0].size
        if n == 0:
            return Plan([])
        inner = int(np.prod(data.shape[a + 1:], dtype=np.int64))
        ct, it = copy_type(data.dtype), index_dtype(self, idx.dtype)
        local = local_1d(info)
        plan = Plan([])
        flag, _ = add_flag(plan, idx.dtype, out_of_range(self, data.shape[a], f"axis {a}"), info)
        plan.steps.append(Launch(_gather_spec(ct, it), (("in", 0), ("in", 1), ("out", 0), flag, n, inner,
                                                        max(idx.size, 1), data.shape[a]),
                                 groups_for(n, local, info), (local,)))
        return plan


# -- depth_to_space / space_to_depth ----------------------------------------------------------------
def _blocksize(op: Op, attrs: dict[str, Any], shape: Sequence[int]) -> int:
    bs = int_attr(op, attrs, "blocksize", required=True)
    if bs < 1:
        raise op.error(f"blocksize must be >= 1, got {bs}")
    if len(shape) != 4:
        raise op.error(f"needs a 4-D (N, C, H, W) input, got {tuple(shape)}")
    return bs


@register
class DepthToSpace(Movement):
    """depth_to_space(x, blocksize, mode=DCR|CRD): (N, C, H, W) -> (N, C/bs², H·bs, W·bs)."""

    name = "depth_to_space"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["blocksize", "mode"])
        shape = inputs[0].shape
        bs = _blocksize(self, attrs, shape)
        mode = _mode(self, attrs)
        if shape[1] % (bs * bs):
            raise self.error(f"channels ({shape[1]}) are not a multiple of blocksize² ({bs * bs})")
        return {"blocksize": bs, "mode": mode}

    @staticmethod
    def _view(shape, attrs):
        b, c, h, w = shape
        bs = attrs["blocksize"]
        if attrs["mode"] == "DCR":
            return (b, bs, bs, c // (bs * bs), h, w), (0, 3, 4, 1, 5, 2)
        return (b, c // (bs * bs), bs, bs, h, w), (0, 1, 4, 2, 5, 3)

    def infer(self, inputs, attrs):
        b, c, h, w = inputs[0].shape
        bs = attrs["blocksize"]
        return [TensorType.of((b, c // (bs * bs), h * bs, w * bs), inputs[0].dtype)]

    def reference(self, inputs, attrs):
        x = inputs[0]
        shape, perm = self._view(x.shape, attrs)
        out = self.infer([TensorType(x.shape, x.dtype)], attrs)[0].shape
        return [np.ascontiguousarray(x.reshape(shape).transpose(perm)).reshape(out)]

    def plan(self, inputs, outputs, attrs, info):
        shape, perm = self._view(inputs[0].shape, attrs)
        return permuted_copy(self, inputs[0].dtype, shape, perm, info)


def _mode(op: Op, attrs: dict[str, Any]) -> str:
    mode = attrs.get("mode", "DCR")
    if isinstance(mode, bytes):
        mode = mode.decode(errors="replace")
    if mode not in ("DCR", "CRD"):
        raise op.error(f"mode must be 'DCR' or 'CRD', got {mode!r}")
    return mode


@register
class SpaceToDepth(Movement):
    """space_to_depth(x, blocksize, mode=DCR|CRD): (N, C, H, W) -> (N, C·bs², H/bs, W/bs).

    DCR (ONNX's only order before opset 28) puts the block offset before the channel in the output channel
    index, CRD (opset 28) after it: the inverses of depth_to_space's modes.
    """

    name = "space_to_depth"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["blocksize", "mode"])
        shape = inputs[0].shape
        bs = _blocksize(self, attrs, shape)
        if shape[2] % bs or shape[3] % bs:
            raise self.error(f"H and W ({shape[2]}, {shape[3]}) are not multiples of blocksize {bs}")
        return {"blocksize": bs, "mode": _mode(self, attrs)}

    @staticmethod
    def _view(shape, attrs):
        b, c, h, w = shape
        bs = attrs["blocksize"]
        perm = (0, 3, 5, 1, 2, 4) if attrs["mode"] == "DCR" else (0, 1, 3, 5, 2, 4)
        return (b, c, h // bs, bs, w // bs, bs), perm

    def infer(self, inputs, attrs):
        b, c, h, w = inputs[0].shape
        bs = attrs["blocksize"]
        return [TensorType.of((b, c * bs * bs, h // bs, w // bs), inputs[0].dtype)]

    def reference(self, inputs, attrs):
        x = inputs[0]
        shape, perm = self._view(x.shape, attrs)
        out = self.infer([TensorType(x.shape, x.dtype)], attrs)[0].shape
        return [np.ascontiguousarray(x.reshape(shape).transpose(perm)).reshape(out)]

    def plan(self, inputs, outputs, attrs, info):
        shape, perm = self._view(inputs[0].shape, attrs)
        return permuted_copy(self, inputs[0].dtype, shape, perm, info)



@register
class ChannelShuffle(Movement):
    """channel_shuffle(x, group): (N, C, ...) with C = group·k; output channel j·group + i is input channel
    i·k + j (ShuffleNet's reshape to (N, group, k, ...), transpose of those two, reshape back, as one op)."""

    name = "channel_shuffle"

    def check(self, inputs, attrs):
        refuse_unknown(self, attrs, ["group"])
        shape = inputs[0].shape
        if len(shape) < 2:
            raise self.error(f"needs an (N, C, ...) input of rank 2 or more, got {tuple(shape)}")
        group = int_attr(self, attrs, "group", required=True)
        if group < 1:
            raise self.error(f"group must be >= 1, got {group}")
        if shape[1] % group:
            raise self.error(f"channels ({shape[1]}) are not a multiple of group ({group})")
        return {"group": group}

    @staticmethod
    def _view(shape, attrs):
        group = attrs["group"]
        return (shape[0], group, shape[1] // group, math.prod(shape[2:])), (0, 2, 1, 3)

    def infer(self, inputs, attrs):
        return [TensorType.of(inputs[0].shape, inputs[0].dtype)]

    def reference(self, inputs, attrs):
        x = inputs[0]
        shape, perm = self._view(x.shape, attrs)
        return [np.ascontiguousarray(x.reshape(shape).transpose(perm)).reshape(x.shape)]

    def plan(self, inputs, outputs, attrs, info):
        shape, perm = self._view(inputs[0].shape, attrs)
        return permuted_copy(self, inputs[0].dtype, shape, perm, info)


__all__ = ["Movement", "coalesce", "copy_launch", "copy_type", "contiguous_strides", "slice_params"]
