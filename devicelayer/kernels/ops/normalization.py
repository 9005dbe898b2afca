"""Normalization ops: softmax, log_softmax, lp_normalization, layer_normalization, rms_normalization,
group_normalization (instance normalization is its one-channel-per-group case), batch_normalization (inference)
and lrn.

The row ops run the row kernel (``rows.row_launch``): softmax, log_softmax and lp_normalization along one axis,
layer and RMS normalization over the trailing axes, group normalization over each group of channels.
batch_normalization and lrn are elementwise.  Every kernel takes float16, float32 and float64 elements (16-bit
floats computed in float32); bfloat16 runs on the host, computed in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dialect import KernelSpec, Param, dialect_type
from ..op import (Launch, Plan, TensorType, activation_attr, bound_parallel, groups_for, local_1d, parallel,
                  register)
from .binary import MAX_RANK, broadcast_shape, broadcast_strides, check_dtype_same, collapse, unravel
from .elementwise import relu_into
from .reduce import acc_type, add, bool_attr, float_attr, fmax, int_attr, known_attrs, norm_axis
from .rows import (AXIS_ROW_HEADER, AXIS_ROW_OFF, FloatKernelOp, axis_rows, compute_dtype, float_tensor,
                   row_launch, widen)


# -- along one axis: softmax, log_softmax, lp_normalization --------------------------------------------------------
class _AxisRowOp(FloatKernelOp):
    """An op normalizing rows along one axis (``axis``, default -1)."""

    known: tuple[str, ...] = ("axis",)

    def check(self, inputs, attrs):
        known_attrs(self, attrs, self.known)
        x = inputs[0]
        float_tensor(self, x)
        if not x.shape:
            raise self.error("needs an input of rank 1 or more")
        return {**self.extra(attrs), "axis": norm_axis(self, attrs.get("axis", -1), len(x.shape))}

    def extra(self, attrs: dict[str, Any]) -> dict[str, Any]:
        """Attributes besides the axis, checked."""
        return {}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def row_plan(self, inputs, attrs, info, tag: str, phases) -> Plan:
        """The row kernel running ``phases`` along the axis."""
        x = inputs[0]
        elem = dialect_type(x.dtype)
        R, K, inner = axis_rows(x.shape, attrs["axis"])
        launch = row_launch(
            f"{self.name}_{tag}_{elem}", elem, R, K, (Param("x", "T", "in"), Param("y", "T", "out")),
            (Param("inner", "int", "scalar"),), (("in", 0), ("out", 0), inner), AXIS_ROW_HEADER, AXIS_ROW_OFF,
            phases, info)
        return Plan([launch])


class Softmax(_AxisRowOp):
    """softmax(x, axis=-1): exp(x - max) / sum(exp(x - max)) along one axis."""

    name = "softmax"
    log = False
    math = "dl_exp( dl_log("

    def reference(self, inputs, attrs):
        x = inputs[0]
        w = x.astype(np.float32) if x.dtype.name == "bfloat16" else x  # float16 in float16, as ONNX's reference
        axis = attrs["axis"]
        with np.errstate(all="ignore"):
            shifted = w - np.max(w, axis=axis, keepdims=True) if x.size else w
            e = np.exp(shifted)
            s = np.sum(e, axis=axis, keepdims=True)
            y = shifted - np.log(s) if self.log else e / s
        return [np.asarray(y).astype(x.dtype)]

    def reference_into(self, inputs, outputs, attrs):
        rows = self._rows(inputs, outputs, attrs)
        if rows is None:
            return super().reference_into(inputs, outputs, attrs)
        parallel(*rows)
        return None

    def bind_into(self, inputs, outputs, attrs):
        rows = self._rows(inputs, outputs, attrs)
        if rows is None:
            return super().bind_into(inputs, outputs, attrs)
        return bound_parallel(*rows)

    def _rows(self, inputs, outputs, attrs) -> tuple[Any, int, int] | None:
        """(piece(lo, hi) over outer indices lo..hi, outer indices, bytes touched); None for 16-bit or empty x."""
        x, y = inputs[0], outputs[0]
        if not x.size or x.dtype.itemsize == 2:
            return None
        R, K, inner = axis_rows(x.shape, attrs["axis"])
        # rows of (outer, K, inner): pieces of the outer index on helper threads
        x3, y3 = x.reshape(-1, K, inner), y.reshape(-1, K, inner)
        top, total = np.maximum.reduce, np.add.reduce  # (the ufuncs' own reductions: np.max and np.sum wrap them)

        def piece(lo: int, hi: int) -> None:
            xs, ys = x3[lo:hi], y3[lo:hi]
            with np.errstate(all="ignore"):
                np.subtract(xs, top(xs, axis=1, keepdims=True), out=ys)
                if self.log:
                    ys -= np.log(total(np.exp(ys), axis=1, keepdims=True))
                else:
                    np.exp(ys, out=ys)
                    ys /= total(ys, axis=1, keepdims=True)
        return piece, x3.shape[0], 3 * x.nbytes

    def plan(self, inputs, outputs, attrs, info):
        if self.log:
            finish, write = ("        ACC lse = m + dl_log(s);\n",
                             "            y[off] = FROM_ACC(v - lse);\n")
        else:
            finish, write = ("        ACC inv = CAST(ACC, 1.0f) / s;\n",
                             "            y[off] = FROM_ACC(dl_exp(v - m) * inv);\n")
        phases = [("reduce", "m", "CAST(ACC, -DL_INF)", fmax, "v", ""),
                  ("reduce", "s", "CAST(ACC, 0.0f)", add, "dl_exp(v - m)", finish),
                  ("write", write)]
        return self.row_plan(inputs, attrs, info, "a", phases)


register(Softmax)


@register
class LogSoftmax(Softmax):
    """log_softmax(x, axis=-1): x - max - log(sum(exp(x - max))) along one axis."""

    name = "log_softmax"
    log = True


@register
class LpNormalization(_AxisRowOp):
    """lp_normalization(x, axis=-1, p=2): x divided by its L1 (p=1) or L2 (p=2) norm along one axis; a row of
    norm 0 gives 0."""

    name = "lp_normalization"
    known = ("axis", "p")

    def extra(self, attrs):
        p = int_attr(self, attrs, "p", 2)
        if p not in (1, 2):
            raise self.error(f"p must be 1 or 2, got {p}")
        return {"p": p}

    def reference(self, inputs, attrs):
        x = inputs[0]
        w = widen(x)
        axis = attrs["axis"]
        with np.errstate(all="ignore"):
            norm = (np.sum(np.abs(w), axis=axis, keepdims=True) if attrs["p"] == 1
                    else np.sqrt(np.sum(w * w, axis=axis, keepdims=True)))
            y = np.where(norm == 0, w.dtype.type(0), w / np.where(norm == 0, w.dtype.type(1), norm))
        return [y.astype(x.dtype)]

    def plan(self, inputs, outputs, attrs, info):
        p = attrs["p"]
        expr = "dl_abs(v)" if p == 1 else "v * v"
        norm = "s" if p == 1 else "dl_sqrt(s)"
        phases = [("reduce", "s", "CAST(ACC, 0.0f)", add, expr,
                   (f"        ACC nrm = {norm};\n"
                    "        ACC inv = nrm == CAST(ACC, 0.0f) ? CAST(ACC, 0.0f) : CAST(ACC, 1.0f) / nrm;\n")),
                  ("write", "            y[off] = FROM_ACC(v * inv);\n")]
        return self.row_plan(inputs, attrs, info, f"p{p}", phases)


# -- over the trailing axes: layer_normalization, rms_normalization --------------------------------------------------
@register
class LayerNormalization(FloatKernelOp):
    """layer_normalization(x[, scale[, bias]], axis=-1, epsilon=1e-5, stats=False, stash_type=float32): ONNX
    LayerNormalization.

    Normalizes over axes [axis, rank): (x - mean) / sqrt(var + epsilon) * scale + bias; scale and bias broadcast
    to x's shape.  With ``stats`` the outputs are Y, Mean and InvStdDev (x's shape with the normalized axes 1,
    in ``stash_type``).
    """

    name = "layer_normalization"
    min_inputs = 1
    max_inputs = 3
    #: subtract the mean (layer normalization) or not (RMS normalization)
    center = True
    params = ("scale", "bias")

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("axis", "epsilon", "stats", "stash_type") if self.center else ("axis", "epsilon"))
        x = inputs[0]
        float_tensor(self, x)
        if not x.shape:
            raise self.error("needs an input of rank 1 or more")
        check_dtype_same(self, inputs, ("x", *self.params)[:len(inputs)])
        for t, what in zip(inputs[1:], self.params):
            if broadcast_shape(self, [x.shape, t.shape]) != x.shape:
                raise self.error(f"{what} {t.shape} must broadcast to x's shape {x.shape}")
        eps = float_attr(self, attrs, "epsilon", 1e-5)
        if eps < 0:
            raise self.error(f"epsilon must be >= 0, got {eps}")
        checked = {"axis": norm_axis(self, attrs.get("axis", -1), len(x.shape)), "epsilon": eps}
        if self.center:
            checked["stats"] = bool_attr(self, attrs, "stats", False)
            try:
                stash = np.dtype(attrs.get("stash_type", "float32"))
            except TypeError:
                raise self.error(f"stash_type must be a dtype, got {attrs.get('stash_type')!r}") from None
            if stash.kind != "f" and stash.name != "bfloat16":
                raise self.error(f"stash_type must be a floating-point dtype, got {stash}")
            checked["stash_type"] = stash
        return checked

    def infer(self, inputs, attrs):
        x = inputs[0]
        if not attrs.get("stats"):
            return [x]
        axis = attrs["axis"]
        stat = TensorType(x.shape[:axis] + (1,) * (len(x.shape) - axis), attrs["stash_type"])
        return [x, stat, stat]

    def reference(self, inputs, attrs):
        x = inputs[0]
        axes = tuple(range(attrs["axis"], len(x.shape)))
        wide = widen(x)
        stat_shape = x.shape[:attrs["axis"]] + (1,) * len(axes)
        with np.errstate(all="ignore"):
            if x.size:
                mean = np.mean(wide, axis=axes, keepdims=True) if self.center else np.zeros(stat_shape, wide.dtype)
                d = wide - mean
                var = np.mean(d * d, axis=axes, keepdims=True)
            else:
                d, mean, var = wide, np.zeros(stat_shape, wide.dtype), np.ones(stat_shape, wide.dtype)
            inv = 1 / np.sqrt(var + wide.dtype.type(attrs["epsilon"]))
            y = d * inv
            if len(inputs) > 1:
                y = y * widen(inputs[1])
            if len(inputs) > 2:
                y = y + widen(inputs[2])
        outs = [np.asarray(y).astype(x.dtype)]
        if attrs.get("stats"):
            outs += [mean.astype(attrs["stash_type"]), inv.astype(attrs["stash_type"])]
        return outs

    def reference_into(self, inputs, outputs, attrs):
        rows = self._rows(inputs, outputs, attrs, bound=False)
        if rows is None:
            return super().reference_into(inputs, outputs, attrs)
        parallel(*rows)
        return None

    def bind_into(self, inputs, outputs, attrs):
        rows = self._rows(inputs, outputs, attrs, bound=True)
        if rows is None:
            return super().bind_into(inputs, outputs, attrs)
        return bound_parallel(*rows)

    def _rows(self, inputs, outputs, attrs, bound: bool) -> tuple[Any, int, int] | None:
        """(piece(lo, hi) normalizing rows lo..hi, rows, bytes touched) for float32/64 with a scale and bias the
        same for every row; None otherwise.  ``bound``: made once for many calls, so a scale or bias that had
        to be copied to a row (it would not see later writes) is refused too."""
        x = inputs[0]
        axis = attrs["axis"]
        params = [_row_param(p, x.shape, axis) for p in inputs[1:]]
        if x.dtype.itemsize == 2 or not x.size or any(p is None for p in params):
            return None
        if bound and not all(np.may_share_memory(row, p) for row, p in zip(params, inputs[1:])):
            return None
        K = int(np.prod(x.shape[axis:], dtype=np.int64))
        x2, y2 = x.reshape(-1, K), outputs[0].reshape(-1, K)
        stats = [o.reshape(-1) for o in outputs[1:]]
        eps = x.dtype.type(attrs["epsilon"])

        def piece(lo: int, hi: int) -> None:  # rows lo..hi
            xs, ys = x2[lo:hi], y2[lo:hi]
            with np.errstate(all="ignore"):
                if self.center:
                    mean = np.add.reduce(xs, axis=1) / x.dtype.type(K)
                    np.subtract(xs, mean[:, None], out=ys)
                else:
                    mean = None
                    np.copyto(ys, xs)
                inv = 1 / np.sqrt(np.einsum("ij,ij->i", ys, ys) / x.dtype.type(K) + eps)
                ys *= inv[:, None]
                if params:
                    ys *= params[0]
                if len(params) > 1:
                    ys += params[1]
            if stats:
                stats[0][lo:hi] = mean
                stats[1][lo:hi] = inv
        return piece, x2.shape[0], 3 * x.nbytes

    def _walk(self, inputs):
        x = inputs[0]
        return collapse(x.shape, [broadcast_strides(t.shape, x.shape) for t in inputs[1:]] or [[0] * len(x.shape)])

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python" and len(self._walk(inputs)[0]) > MAX_RANK:
            why = f"{self.name}: scale/bias broadcast needs more than {MAX_RANK} dimensions"
        return why

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        elem = dialect_type(x.dtype)
        axis = attrs["axis"]
        K = int(np.prod(x.shape[axis:], dtype=np.int64))
        R = x.size // K if K else 0
        extra = len(inputs) - 1
        stats = bool(attrs.get("stats"))
        buffers = [Param("x", "T", "in")] + [Param(n, "T", "in") for n in self.params[:extra]] \
            + [Param("y", "T", "out")]
        args: list[Any] = [("in", j) for j in range(len(inputs))] + [("out", 0)]
        if stats:
            u = dialect_type(attrs["stash_type"])
            buffers += [Param("mean_out", u, "out"), Param("inv_out", u, "out")]
            args += [("out", 1), ("out", 2)]
        scalars = [Param("eps", acc_type(elem), "scalar")]
        args.append(attrs["epsilon"])
        write = "            ACC t = (v - mean) * inv;\n"
        rank = 0
        if extra:
            sizes, walks = self._walk(inputs)
            rank = len(sizes)
            size_names = [f"n{d}" for d in range(rank)]
            stride_names = [[f"s{j}_{d}" for d in range(rank)] for j in range(extra)]
            offsets = ["os", "ob"][:extra]
            scalars += [Param(n, "int", "scalar") for n in size_names]
            scalars += [Param(n, "int", "scalar") for names in stride_names for n in names]
            args += sizes + [s for w in walks for s in w]
            write += "".join(f"            int {o} = 0;\n" for o in offsets)
            write += unravel("off", size_names, stride_names, offsets, "            ")
            write += f"            t = t * TO_ACC({self.params[0]}[os]);\n"
            if extra > 1:
                write += f"            t = t + TO_ACC({self.params[1]}[ob]);\n"
        write += "            y[off] = FROM_ACC(t);\n"
        spread = "(v - mean) * (v - mean)"
        if self.center:
            phases = [("reduce", "mean", "CAST(ACC, 0.0f)", add, "v", "        mean = mean / CAST(ACC, K);\n")]
        else:
            phases = []
            spread = "v * v"
        finish = "        ACC inv = CAST(ACC, 1.0f) / dl_sqrt(var / CAST(ACC, K) + CAST(ACC, eps));\n"
        if not self.center:
            finish += "        ACC mean = CAST(ACC, 0.0f);\n"
        if stats:
            finish += (f"        if (ROW_LEAD) {{\n            mean_out[r] = CAST({u}, mean);\n"
                       f"            inv_out[r] = CAST({u}, inv);\n        }}\n")
        phases += [("reduce", "var", "CAST(ACC, 0.0f)", add, spread, finish), ("write", write)]
        tag = f"{self.name}_{elem}_i{extra}_r{rank}" + (f"_s{u}" if stats else "")
        launch = row_launch(tag, elem, R, K, buffers, scalars, args, "        int base = r * K;\n", "base + k",
                            phases, info)
        return Plan([launch])


@register
class RMSNormalization(LayerNormalization):
    """rms_normalization(x[, scale], axis=-1, epsilon=1e-5): ONNX RMSNormalization, x / sqrt(mean(x²) + epsilon)
    * scale over axes [axis, rank); scale broadcasts to x's shape."""

    name = "rms_normalization"
    max_inputs = 2
    center = False
    params = ("scale",)


def _row_param(p: np.ndarray, shape: tuple[int, ...], axis: int) -> np.ndarray | None:
    """A scale or bias broadcast to ``shape`` as one (1, K) row shared by every row of axes [axis, rank), or None
    when it differs between rows."""
    full = (1,) * (len(shape) - p.ndim) + p.shape
    if any(d != 1 for d in full[:axis]):
        return None
    return np.ascontiguousarray(np.broadcast_to(p.reshape(full[axis:]), shape[axis:])).reshape(1, -1)


# -- over groups of channels: group_normalization ------------------------------------------------------------------
@register
class GroupNormalization(FloatKernelOp):
    """group_normalization(x, scale, bias, num_groups, epsilon=1e-5): x (N, C, ...) normalized over each group
    of C / num_groups channels (with their spatial elements), then y * scale[c] + bias[c] per channel (scale and
    bias of shape (C,)); num_groups = C is instance normalization."""

    name = "group_normalization"
    min_inputs = 3
    max_inputs = 3

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("num_groups", "epsilon"))
        x = inputs[0]
        float_tensor(self, x)
        check_dtype_same(self, inputs, ("x", "scale", "bias"))
        if len(x.shape) < 2:
            raise self.error(f"needs an input of rank 2 or more (N, C, ...), got {x.shape}")
        C = x.shape[1]
        for t, what in zip(inputs[1:], ("scale", "bias")):
            if t.shape != (C,):
                raise self.error(f"{what} must have shape ({C},) to match x's channels, got {t.shape}")
        if "num_groups" not in attrs:
            raise self.error("needs the attribute 'num_groups'")
        groups = int_attr(self, attrs, "num_groups")
        if groups < 1 or C % groups:
            raise self.error(f"num_groups must be >= 1 and divide the {C} channels, got {groups}")
        eps = float_attr(self, attrs, "epsilon", 1e-5)
        if eps < 0:
            raise self.error(f"epsilon must be >= 0, got {eps}")
        return {"num_groups": groups, "epsilon": eps}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        x, scale, bias = (widen(a) for a in inputs)
        N, C, G = x.shape[0], x.shape[1], attrs["num_groups"]
        g = x.reshape(N, G, C // G * int(np.prod(x.shape[2:], dtype=np.int64)))
        shape = (1, C) + (1,) * (x.ndim - 2)
        with np.errstate(all="ignore"):
            if g.size:
                mean = np.mean(g, axis=2, keepdims=True)
                d = g - mean
                var = np.mean(d * d, axis=2, keepdims=True)
                g = d / np.sqrt(var + x.dtype.type(attrs["epsilon"]))
            y = g.reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)
        return [y.astype(inputs[0].dtype)]

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        elem = dialect_type(x.dtype)
        N, C, G = x.shape[0], x.shape[1], attrs["num_groups"]
        S = int(np.prod(x.shape[2:], dtype=np.int64))
        K = C // G * S
        write = ("            int c = g * CG + k / S;\n"
                 "            ACC t = (v - mean) * inv * TO_ACC(scale[c]) + TO_ACC(bias[c]);\n"
                 "            y[off] = FROM_ACC(t);\n")
        phases = [("reduce", "mean", "CAST(ACC, 0.0f)", add, "v", "        mean = mean / CAST(ACC, K);\n"),
                  ("reduce", "var", "CAST(ACC, 0.0f)", add, "(v - mean) * (v - mean)",
                   "        ACC inv = CAST(ACC, 1.0f) / dl_sqrt(var / CAST(ACC, K) + CAST(ACC, eps));\n"),
                  ("write", write)]
        launch = row_launch(
            f"{self.name}_{elem}", elem, N * G, K,
            (Param("x", "T", "in"), Param("scale", "T", "in"), Param("bias", "T", "in"), Param("y", "T", "out")),
            (Param("G", "int", "scalar"), Param("CG", "int", "scalar"), Param("S", "int", "scalar"),
             Param("eps", acc_type(elem), "scalar")),
            (("in", 0), ("in", 1), ("in", 2), ("out", 0), G, C // G, S, attrs["epsilon"]),
            "        int base = r * K;\n        int g = r % G;\n", "base + k", phases, info)
        return Plan([launch])


# -- elementwise: batch_normalization, lrn ------------------------------------------------------------------------
@register
class BatchNormalization(FloatKernelOp):
    """batch_normalization(x, scale, bias, mean, var, epsilon=1e-5): inference form, channels on axis 1.

    y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c]; the four parameters have shape (C,).
    ``momentum`` is accepted and ignored; ``training_mode`` must be false; ``activation`` "relu" applies a
    ReLU last (a fused Relu).
    """

    name = "batch_normalization"
    min_inputs = 5
    max_inputs = 5

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("epsilon", "momentum", "training_mode", "activation"))
        x = inputs[0]
        float_tensor(self, x)
        check_dtype_same(self, inputs, ("x", "scale", "bias", "mean", "var"))
        if len(x.shape) < 2:
            raise self.error(f"needs an input of rank 2 or more (N, C, ...), got {x.shape}")
        C = x.shape[1]
        for t, what in zip(inputs[1:], ("scale", "bias", "mean", "var")):
            if t.shape != (C,):
                raise self.error(f"{what} must have shape ({C},) to match x's channels, got {t.shape}")
        eps = float_attr(self, attrs, "epsilon", 1e-5)
        if eps < 0:
            raise self.error(f"epsilon must be >= 0, got {eps}")
        float_attr(self, attrs, "momentum", 0.9)
        if bool_attr(self, attrs, "training_mode", False):
            raise self.error("training_mode is not supported (inference only)")
        activation = activation_attr(self, attrs, "the normalization")
        return {"epsilon": eps, **({"activation": activation} if activation else {})}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        x = inputs[0]
        ct = compute_dtype(x.dtype).type  # 16-bit floats compute in float32, as the kernels
        scale, bias, mean, var = (p.astype(ct, copy=False) for p in inputs[1:])
        shape = (1, -1) + (1,) * (len(x.shape) - 2)
        with np.errstate(all="ignore"):  # per channel y = x * a + b: the affine map folded first
            a = scale / np.sqrt(var + ct(attrs["epsilon"]))
            y = x * a.reshape(shape)
            y += (bias - mean * a).reshape(shape)
            if attrs.get("activation") == "relu":
                np.maximum(y, 0, out=y)
        return [np.asarray(y, dtype=x.dtype)]

    def reference_into(self, inputs, outputs, attrs):
        x, y = inputs[0], outputs[0]
        if x.dtype.itemsize == 2 or not x.size:
            return super().reference_into(inputs, outputs, attrs)
        ct = x.dtype.type
        scale, bias, mean, var = inputs[1:]
        shape = (1, -1) + (1,) * (x.ndim - 2)
        with np.errstate(all="ignore"):
            a = scale / np.sqrt(var + ct(attrs["epsilon"]))
            b = (bias - mean * a).reshape(shape)
            a = a.reshape(shape)
        relu = attrs.get("activation") == "relu"

        def piece(lo: int, hi: int) -> None:  # channels lo..hi of every image
            with np.errstate(all="ignore"):
                np.multiply(x[:, lo:hi], a[:, lo:hi], out=y[:, lo:hi])
                y[:, lo:hi] += b[:, lo:hi]
                if relu:
                    relu_into(y[:, lo:hi], y[:, lo:hi])
        parallel(piece, x.shape[1], 2 * x.nbytes)
        return None

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        elem = dialect_type(x.dtype)
        C = x.shape[1]
        relu = attrs.get("activation") == "relu"
        inner = int(np.prod(x.shape[2:], dtype=np.int64))
        body = ("    FOR_EACH(i, n) {\n        int c = (i / inner) % C;\n"
                "        ACC v = (TO_ACC(x[i]) - TO_ACC(mean[c])) / dl_sqrt(TO_ACC(var[c]) + CAST(ACC, eps));\n"
                "        v = v * TO_ACC(scale[c]) + TO_ACC(bias[c]);\n"
                + ("        v = dl_max(v, CAST(ACC, 0.0f));\n" if relu else "")
                + "        y[i] = FROM_ACC(v);\n    }")
        spec = KernelSpec(f"batch_normalization_{elem}" + ("_relu" if relu else ""),
                          (Param("x", "T", "in"), Param("scale", "T", "in"), Param("bias", "T", "in"),
                           Param("mean", "T", "in"), Param("var", "T", "in"), Param("y", "T", "out"),
                           Param("n", "int", "scalar"), Param("C", "int", "scalar"),
                           Param("inner", "int", "scalar"), Param("eps", acc_type(elem), "scalar")),
                          body, elem=elem)
        n = x.size
        local = local_1d(info)
        args = (*[("in", j) for j in range(5)], ("out", 0), n, C, inner, attrs["epsilon"])
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])


@register
class Lrn(FloatKernelOp):
    """lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0): ONNX LRN across channels (axis 1).

    y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2), c + ceil((size-1)/2)]) ** beta
    """

    name = "lrn"
    math = "dl_pow("

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("size", "alpha", "beta", "bias"))
        x = inputs[0]
        float_tensor(self, x)
        if len(x.shape) < 2:
            raise self.error(f"needs an input of rank 2 or more (N, C, ...), got {x.shape}")
        if "size" not in attrs:
            raise self.error("needs the attribute 'size' (channels summed over)")
        size = int_attr(self, attrs, "size")
        if size < 1:
            raise self.error(f"size must be >= 1, got {size}")
        return {"size": size, "alpha": float_attr(self, attrs, "alpha", 1e-4),
                "beta": float_attr(self, attrs, "beta", 0.75), "bias": float_attr(self, attrs, "bias", 1.0)}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    @staticmethod
    def _window(size: int) -> tuple[int, int]:
        return (size - 1) // 2, size // 2  # floor((size-1)/2), ceil((size-1)/2)

    def reference(self, inputs, attrs):
        x = widen(inputs[0])
        lo, hi = self._window(attrs["size"])
        C = x.shape[1]
        sq = np.zeros((x.shape[0], C + lo + hi) + x.shape[2:], x.dtype)
        np.multiply(x, x, out=sq[:, lo:lo + C])
        ss = np.zeros_like(x)
        for j in range(lo + hi + 1):
            ss += sq[:, j:j + C]
        t = x.dtype.type
        with np.errstate(all="ignore"):
            ss *= t(attrs["alpha"] / attrs["size"])
            ss += t(attrs["bias"])
            np.power(ss, t(attrs["beta"]), out=ss)
            y = x / ss
        return [np.asarray(y).astype(inputs[0].dtype)]

    def reference_into(self, inputs, outputs, attrs):
        x, y = inputs[0], outputs[0]
        if x.dtype.itemsize == 2 or not x.size:
            return super().reference_into(inputs, outputs, attrs)
        lo, hi = self._window(attrs["size"])
        C, t, beta = x.shape[1], x.dtype.type, attrs["beta"]
        sq = np.zeros((x.shape[0], C + lo + hi) + x.shape[2:], x.dtype)
        np.multiply(x, x, out=sq[:, lo:lo + C])

        def piece(c0: int, c1: int) -> None:  # output channels c0..c1: the window sums, then the scaling
            ss = y[:, c0:c1]
            np.add(sq[:, c0:c1], sq[:, c0 + 1:c1 + 1], out=ss) if lo + hi else np.copyto(ss, sq[:, c0:c1])
            for j in range(2, lo + hi + 1):
                ss += sq[:, c0 + j:c1 + j]
            with np.errstate(all="ignore"):
                ss *= t(attrs["alpha"] / attrs["size"])
                ss += t(attrs["bias"])
                if beta == 0.75:  # s ** 0.75 = sqrt(s) * sqrt(sqrt(s)): two square roots, far cheaper than pow
                    r = np.sqrt(ss)
                    np.sqrt(r, out=ss)
                    ss *= r
                else:
                    np.power(ss, t(beta), out=ss)
                np.divide(x[:, c0:c1], ss, out=ss)
        parallel(piece, C, 4 * x.nbytes)
        return None

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        elem = dialect_type(x.dtype)
        C = x.shape[1]
        inner = int(np.prod(x.shape[2:], dtype=np.int64))
        lo, hi = self._window(attrs["size"])
        body = ("    FOR_EACH(i, n) {\n        int c = (i / inner) % C;\n"
                "        int c0 = c - lo < 0 ? 0 : c - lo;\n        int c1 = c + hi > C - 1 ? C - 1 : c + hi;\n"
                "        ACC ss = CAST(ACC, 0.0f);\n"
                "        for (int cc = c0; cc <= c1; cc++) {\n"
                "            ACC w = TO_ACC(x[i + (cc - c) * inner]);\n            ss = ss + w * w;\n        }\n"
                "        ACC d = dl_pow(CAST(ACC, bias) + CAST(ACC, alpha) * ss, CAST(ACC, beta));\n"
                "        y[i] = FROM_ACC(TO_ACC(x[i]) / d);\n    }")
        spec = KernelSpec(f"lrn_{elem}",
                          (Param("x", "T", "in"), Param("y", "T", "out"), Param("n", "int", "scalar"),
                           Param("C", "int", "scalar"), Param("inner", "int", "scalar"), Param("lo", "int", "scalar"),
                           Param("hi", "int", "scalar"), Param("alpha", acc_type(elem), "scalar"),
                           Param("beta", acc_type(elem), "scalar"), Param("bias", acc_type(elem), "scalar")),
                          body, elem=elem)
        n = x.size
        local = local_1d(info)
        args = (("in", 0), ("out", 0), n, C, inner, lo, hi, attrs["alpha"] / attrs["size"], attrs["beta"],
                attrs["bias"])
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])
