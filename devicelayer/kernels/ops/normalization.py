"""Normalization ops: softmax, log_softmax, layer_normalization, batch_normalization (inference), lrn.

softmax, log_softmax and layer_normalization work on rows (the elements one output
element's statistics run over) with the same two kernel shapes as the reductions:
one work item per row for short rows, one work-group per row (partials combined in
shared memory) for long ones.  batch_normalization and lrn are elementwise.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Op, Plan, TensorType, activation_attr, groups_for, local_1d, parallel, register
from .binary import INT_MAX, MAX_RANK, broadcast_shape, broadcast_strides, check_dtype_same, collapse, unravel
from .elementwise import relu_into
from .reduce import (GROUP_THRESHOLD, acc_type, add, bool_attr, float_attr, float_input, fmax, group_local,
                     group_reduce, int_attr, known_attrs, norm_axis)


# -- rows ------------------------------------------------------------------------------------------------------
# A row program: ("reduce", var, init, combine, expr, after) computes ACC ``var`` as the combination of ``expr``
# over the row (``v`` is the element as ACC, ``k`` its index in the row), then runs the statements ``after``;
# ("write", stmt) runs ``stmt`` for every element of the row.  ``off`` is the element's index in x and y.
Phase = tuple


def _row_launch(name: str, elem: str, R: int, K: int, buffers: Sequence[Param], scalars: Sequence[Param],
                args: Sequence[Any], header: str, off: str, phases: Sequence[Phase], info: DeviceInfo) -> Launch:
    grouped = K >= GROUP_THRESHOLD
    if grouped:
        local = group_local(info)
        start, step = "LID(0)", "LSIZE(0)"
        head = "    for (int r = GROUP(0); r < R; r += NGROUPS(0)) {\n"
    else:
        local = local_1d(info)
        start, step = "0", "1"
        head = "    FOR_EACH(r, R) {\n"
    body = [head, header]
    loop = f"        for (int k = {start}; k < K; k += {step}) {{\n            int off = {off};\n"
    for phase in phases:
        if phase[0] == "reduce":
            _, var, init, combine, expr, after = phase
            body.append(f"        ACC {var} = {init};\n")
            body.append(loop + f"            ACC v = TO_ACC(x[off]);\n            {var} = {combine(var, expr)};\n"
                        "        }\n")
            if grouped:
                body.append(group_reduce(var, combine))
            body.append(after)
        else:
            body.append(loop + "            ACC v = TO_ACC(x[off]);\n" + phase[1] + "        }\n")
    body.append("    }")
    params = (*buffers, Param("R", "int", "scalar"), Param("K", "int", "scalar"), *scalars)
    shared = ((acc_type(elem), "red", local),) if grouped else ()
    variant = f"g{local}" if grouped else "l"
    spec = KernelSpec(f"{name}_{variant}", params, "".join(body), elem=elem, shared=shared, local_size=(local,))
    gsize = groups_for(R * local, local, info) if grouped else groups_for(R, local, info)
    return Launch(spec, (*args[:len(buffers)], R, K, *args[len(buffers):]), gsize, (local,))


def _too_big(op: Op, t: TensorType) -> str | None:
    if t.size > INT_MAX:
        return f"{op.name}: tensors of {t.size} elements exceed the kernels' int32 indexing"
    return None


class _WholeTensorOp(Op):
    """An op whose kernel indexes its whole input at once: refused on kernel devices when it is too big."""

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        return why if why is not None or info.kernel_language == "python" else _too_big(self, inputs[0])


class Softmax(_WholeTensorOp):
    """softmax(x, axis=-1): exp(x - max) / sum(exp(x - max)) along one axis."""

    name = "softmax"
    log = False

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("axis",))
        x = inputs[0]
        float_input(self, x)
        if not x.shape:
            raise self.error("needs an input of rank 1 or more")
        return {"axis": norm_axis(self, attrs.get("axis", -1), len(x.shape))}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        x = inputs[0]
        axis = attrs["axis"]
        with np.errstate(all="ignore"):
            shifted = x - np.max(x, axis=axis, keepdims=True) if x.size else x
            e = np.exp(shifted)
            s = np.sum(e, axis=axis, keepdims=True)
            y = shifted - np.log(s) if self.log else e / s
        return [np.asarray(y, dtype=x.dtype)]

    def reference_into(self, inputs, outputs, attrs):
        x, y = inputs[0], outputs[0]
        if self.log or not x.size or x.dtype == np.float16:
            return super().reference_into(inputs, outputs, attrs)
        axis = attrs["axis"]
        with np.errstate(all="ignore"):
            np.subtract(x, np.max(x, axis=axis, keepdims=True), out=y)
            np.exp(y, out=y)
            y /= np.sum(y, axis=axis, keepdims=True)
        return None

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        elem = dialect_type(x.dtype)
        axis = attrs["axis"]
        K = x.shape[axis]
        inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
        R = x.size // K
        if self.log:
            finish, write = ("        ACC lse = m + dl_log(s);\n",
                             "            y[off] = FROM_ACC(v - lse);\n")
        else:
            finish, write = ("        ACC inv = CAST(ACC, 1.0f) / s;\n",
                             "            y[off] = FROM_ACC(dl_exp(v - m) * inv);\n")
        phases = [("reduce", "m", "CAST(ACC, -DL_INF)", fmax, "v", ""),
                  ("reduce", "s", "CAST(ACC, 0.0f)", add, "dl_exp(v - m)", finish),
                  ("write", write)]
        step = "off" if inner == 1 else "inner"
        launch = _row_launch(
            f"{self.name}_{elem}_{'c' if inner == 1 else 's'}", elem, R, K,
            (Param("x", "T", "in"), Param("y", "T", "out")), (Param("inner", "int", "scalar"),),
            (("in", 0), ("out", 0), inner),
            "        int base = (r / inner) * K * inner + r % inner;\n",
            "base + k" if step == "off" else "base + k * inner", phases, info)
        return Plan([launch])


register(Softmax)


@register
class LogSoftmax(Softmax):
    """log_softmax(x, axis=-1): x - max - log(sum(exp(x - max))) along one axis."""

    name = "log_softmax"
    log = True


@register
class LayerNormalization(Op):
    """layer_normalization(x[, scale[, bias]], axis=-1, epsilon=1e-5): ONNX LayerNormalization's Y.

    Normalizes over axes [axis, rank): (x - mean) / sqrt(var + epsilon) * scale + bias;
    scale and bias broadcast to x's shape.
    """

    name = "layer_normalization"
    min_inputs = 1
    max_inputs = 3

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("axis", "epsilon"))
        x = inputs[0]
        float_input(self, x)
        if not x.shape:
            raise self.error("needs an input of rank 1 or more")
        check_dtype_same(self, inputs, ("x", "scale", "bias")[:len(inputs)])
        for t, what in zip(inputs[1:], ("scale", "bias")):
            if broadcast_shape(self, [x.shape, t.shape]) != x.shape:
                raise self.error(f"{what} {t.shape} must broadcast to x's shape {x.shape}")
        eps = float_attr(self, attrs, "epsilon", 1e-5)
        if eps < 0:
            raise self.error(f"epsilon must be >= 0, got {eps}")
        return {"axis": norm_axis(self, attrs.get("axis", -1), len(x.shape)), "epsilon": eps}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        x = inputs[0]
        axes = tuple(range(attrs["axis"], len(x.shape)))
        wide = x.astype(np.float32) if x.dtype == np.float16 else x
        with np.errstate(all="ignore"):
            mean = np.mean(wide, axis=axes, keepdims=True) if x.size else wide
            d = wide - mean
            var = np.mean(d * d, axis=axes, keepdims=True) if x.size else wide
            y = d / np.sqrt(var + wide.dtype.type(attrs["epsilon"]))
            if len(inputs) > 1:
                y = y * inputs[1]
            if len(inputs) > 2:
                y = y + inputs[2]
        return [np.asarray(y).astype(x.dtype)]

    def _walk(self, inputs):
        x = inputs[0]
        return collapse(x.shape, [broadcast_strides(t.shape, x.shape) for t in inputs[1:]] or [[0] * len(x.shape)])

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            why = _too_big(self, inputs[0])
            if why is None and len(self._walk(inputs)[0]) > MAX_RANK:
                why = f"{self.name}: scale/bias broadcast needs more than {MAX_RANK} dimensions"
        return why

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        elem = dialect_type(x.dtype)
        axis = attrs["axis"]
        K = int(np.prod(x.shape[axis:], dtype=np.int64))
        R = x.size // K
        extra = len(inputs) - 1
        buffers = [Param("x", "T", "in")] + [Param(n, "T", "in") for n in ("scale", "bias")[:extra]] \
            + [Param("y", "T", "out")]
        scalars = [Param("eps", "float", "scalar")]
        args: list[Any] = [("in", j) for j in range(len(inputs))] + [("out", 0), attrs["epsilon"]]
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
            write += "            t = t * TO_ACC(scale[os]);\n"
            if extra > 1:
                write += "            t = t + TO_ACC(bias[ob]);\n"
        write += "            y[off] = FROM_ACC(t);\n"
        phases = [("reduce", "mean", "CAST(ACC, 0.0f)", add, "v", "        mean = mean / CAST(ACC, K);\n"),
                  ("reduce", "var", "CAST(ACC, 0.0f)", add, "(v - mean) * (v - mean)",
                   "        ACC inv = CAST(ACC, 1.0f) / dl_sqrt(var / CAST(ACC, K) + CAST(ACC, eps));\n"),
                  ("write", write)]
        launch = _row_launch(f"{self.name}_{elem}_i{extra}_r{rank}", elem, R, K, buffers, scalars, args,
                             "        int base = r * K;\n", "base + k", phases, info)
        return Plan([launch])


@register
class BatchNormalization(_WholeTensorOp):
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
        float_input(self, x)
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
        ct = np.float32 if x.dtype == np.float16 else x.dtype.type  # float16 computes in float32, as the kernels
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
        if x.dtype == np.float16 or not x.size:
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
                           Param("inner", "int", "scalar"), Param("eps", "float", "scalar")),
                          body, elem=elem)
        n = x.size
        local = local_1d(info)
        args = (*[("in", j) for j in range(5)], ("out", 0), n, C, inner, attrs["epsilon"])
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])


@register
class Lrn(_WholeTensorOp):
    """lrn(x, size, alpha=1e-4, beta=0.75, bias=1.0): ONNX LRN across channels (axis 1).

    y = x / (bias + alpha / size * sum of x^2 over channels [c - floor((size-1)/2), c + ceil((size-1)/2)]) ** beta
    """

    name = "lrn"

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("size", "alpha", "beta", "bias"))
        x = inputs[0]
        float_input(self, x)
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
        x = inputs[0]
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
        return [np.asarray(y, dtype=x.dtype)]

    def reference_into(self, inputs, outputs, attrs):
        x, y = inputs[0], outputs[0]
        if x.dtype == np.float16 or not x.size:
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
                           Param("hi", "int", "scalar"), Param("alpha", "float", "scalar"),
                           Param("beta", "float", "scalar"), Param("bias", "float", "scalar")),
                          body, elem=elem)
        n = x.size
        local = local_1d(info)
        args = (("in", 0), ("out", 0), n, C, inner, lo, hi, attrs["alpha"] / attrs["size"], attrs["beta"],
                attrs["bias"])
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])
