"""Loss ops: nll_loss (ONNX NegativeLogLikelihoodLoss; SoftmaxCrossEntropyLoss is log_softmax then nll_loss).

The per-element loss is one work item per element; the sum and mean reductions run in one work-group that
combines partial sums of the losses and of their weights in shared memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Plan, TensorType, groups_for, local_1d, register
from .binary import check_dtype_same
from .reduce import acc_type, add, group_local, group_reduce, int_attr, known_attrs
from .rows import FloatKernelOp, float_tensor, widen

REDUCTIONS = ("none", "sum", "mean")


@register
class NllLoss(FloatKernelOp):
    """nll_loss(x, target[, weight], reduction="mean", ignore_index=None): ONNX NegativeLogLikelihoodLoss.

    x is (N, C, d1, ...) (log-probabilities), target (N, d1, ...) integer classes, weight (C,) per class.  The
    loss of an element is -x[n, target, d...] * weight[target], 0 where the target is ``ignore_index``; "sum"
    adds them, "mean" divides the sum by the total weight of the elements not ignored.  A target outside [0, C)
    that is not ignored gives NaN.
    """

    name = "nll_loss"
    min_inputs = 2
    max_inputs = 3

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("reduction", "ignore_index"))
        x, target = inputs[0], inputs[1]
        float_tensor(self, x)
        if len(x.shape) < 2:
            raise self.error(f"needs an input of rank 2 or more (N, C, ...), got {x.shape}")
        if target.dtype.kind not in "iu":
            raise self.error(f"target must hold integers, got {target.dtype}")
        if target.shape != x.shape[:1] + x.shape[2:]:
            raise self.error(f"target must have shape {x.shape[:1] + x.shape[2:]} (x's without C), got {target.shape}")
        if len(inputs) > 2:
            check_dtype_same(self, [x, inputs[2]], ("x", "weight"))
            if inputs[2].shape != (x.shape[1],):
                raise self.error(f"weight must have shape ({x.shape[1]},), got {inputs[2].shape}")
        reduction = attrs.get("reduction", "mean")
        if isinstance(reduction, bytes):
            reduction = reduction.decode(errors="replace")
        if reduction not in REDUCTIONS:
            raise self.error(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
        checked: dict[str, Any] = {"reduction": reduction}
        if attrs.get("ignore_index") is not None:
            checked["ignore_index"] = int_attr(self, attrs, "ignore_index")
        return checked

    def infer(self, inputs, attrs):
        shape = inputs[1].shape if attrs["reduction"] == "none" else ()
        return [TensorType(shape, inputs[0].dtype)]

    def reference(self, inputs, attrs):
        x, target = widen(inputs[0]), inputs[1]
        N, C = x.shape[:2]
        D = int(np.prod(x.shape[2:], dtype=np.int64))
        t = target.reshape(N, D).astype(np.int64)
        ignored = t == attrs["ignore_index"] if "ignore_index" in attrs else np.zeros(t.shape, bool)
        bad = ~ignored & ((t < 0) | (t >= C))
        tc = np.clip(t, 0, max(C - 1, 0))
        picked = np.take_along_axis(x.reshape(N, C, D), tc[:, None, :], axis=1)[:, 0, :] if C else \
            np.zeros(t.shape, x.dtype)
        w = widen(inputs[2])[tc] if len(inputs) > 2 else np.ones(t.shape, x.dtype)
        w = np.where(ignored, x.dtype.type(0), np.where(bad, x.dtype.type(np.nan), w))
        with np.errstate(all="ignore"):
            loss = np.where(ignored, x.dtype.type(0), -picked * w)
            if attrs["reduction"] == "none":
                y = loss.reshape(target.shape)
            elif attrs["reduction"] == "sum":
                y = np.sum(loss)
            else:
                y = np.sum(loss) / np.sum(w)
        return [np.asarray(y).astype(inputs[0].dtype)]

    def plan(self, inputs, outputs, attrs, info):
        x, target = inputs[0], inputs[1]
        elem = dialect_type(x.dtype)
        tt = dialect_type(target.dtype)
        N, C = x.shape[:2]
        D = int(np.prod(x.shape[2:], dtype=np.int64))
        weighted = len(inputs) > 2
        ii = attrs.get("ignore_index")
        info_t = np.iinfo(target.dtype)
        has_ii = ii is not None and info_t.min <= ii <= info_t.max
        # the loss and weight of element i (n = i / D, d = i % D) as ACC ``l`` and ``w``
        element = (f"            {tt} tv = target[i];\n"
                   "            int n = i / D;\n            int c = CAST(int, tv);\n"
                   "            ACC w = CAST(ACC, 0.0f);\n            ACC l = CAST(ACC, 0.0f);\n"
                   "            if (has_ii == 0 || tv != ii) {\n"
                   f"                if (tv < CAST({tt}, 0) || tv >= CAST({tt}, C)) {{\n"
                   "                    w = CAST(ACC, DL_NAN);\n                    l = w;\n"
                   "                } else {\n"
                   + ("                    w = TO_ACC(weight[c]);\n" if weighted else
                      "                    w = CAST(ACC, 1.0f);\n")
                   + "                    l = -TO_ACC(x[(n * C + c) * D + (i - n * D)]) * w;\n"
                   "                }\n            }\n")
        buffers = [Param("x", "T", "in"), Param("target", tt, "in")] + \
            ([Param("weight", "T", "in")] if weighted else []) + [Param("y", "T", "out")]
        scalars = [Param("M", "int", "scalar"), Param("C", "int", "scalar"), Param("D", "int", "scalar"),
                   Param("has_ii", "int", "scalar"), Param("ii", tt, "scalar")]
        args = [("in", j) for j in range(len(inputs))] + [("out", 0), N * D, C, D, int(has_ii),
                                                          int(ii) if has_ii else 0]
        reduction = attrs["reduction"]
        tag = f"{self.name}_{reduction}_{elem}_{tt}{'_w' if weighted else ''}"
        if reduction == "none":
            body = "    FOR_EACH(i, M) {\n        {\n" + element + "            y[i] = FROM_ACC(l);\n        }\n    }"
            local = local_1d(info)
            spec = KernelSpec(tag, (*buffers, *scalars), body, elem=elem)
            return Plan([Launch(spec, tuple(args), groups_for(N * D, local, info), (local,))])
        local = group_local(info)
        final = "s / sw" if reduction == "mean" else "s"
        body = ("    ACC s = CAST(ACC, 0.0f);\n    ACC sw = CAST(ACC, 0.0f);\n"
                "    for (int i = LID(0); i < M; i += LSIZE(0)) {\n" + element
                + "        s = s + l;\n        sw = sw + w;\n    }\n"
                + group_reduce("s", add, indent="    ") + group_reduce("sw", add, indent="    ")
                + f"    if (LID(0) == 0) y[0] = FROM_ACC({final});")
        spec = KernelSpec(tag + f"_g{local}", (*buffers, *scalars), body, elem=elem,
                          shared=((acc_type(elem), "red", local),), local_size=(local,))
        return Plan([Launch(spec, tuple(args), (local,), (local,))])
