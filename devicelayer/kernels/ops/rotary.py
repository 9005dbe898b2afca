"""rotary_embedding: ONNX RotaryEmbedding, rotary position embeddings of attention heads; one work item per
output element."""

from __future__ import annotations

import numpy as np

from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Plan, groups_for, local_1d, register
from .binary import check_dtype_same
from .reduce import bool_attr, int_attr, known_attrs
from .rows import FloatKernelOp, float_tensor, widen


@register
class RotaryEmbedding(FloatKernelOp):
    """rotary_embedding(x, cos_cache, sin_cache[, position_ids], interleaved=False, rotary_embedding_dim=0,
    num_heads=0): ONNX RotaryEmbedding.

    x is (B, H, S, D) or (B, S, H·D) with ``num_heads`` = H.  The first ``rotary_embedding_dim`` (0: all D)
    elements of each head are rotated in pairs — (j, j + rd/2), or (2j, 2j + 1) when ``interleaved`` — by the
    angle whose cosine and sine are cache[pos, j]: with position_ids (B, S) the caches are (positions, rd/2) and
    pos = position_ids[b, s] (a position outside the cache gives NaN); without, the caches are (B, S, rd/2).
    """

    name = "rotary_embedding"
    min_inputs = 3
    max_inputs = 4

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("interleaved", "rotary_embedding_dim", "num_heads"))
        x, cos, sin = inputs[:3]
        float_tensor(self, x)
        check_dtype_same(self, [x, cos, sin], ("x", "cos_cache", "sin_cache"))
        heads = int_attr(self, attrs, "num_heads", 0)
        if len(x.shape) == 4:
            if heads not in (0, x.shape[1]):
                raise self.error(f"num_heads {heads} differs from the {x.shape[1]} heads of a 4-D input")
            B, H, S, D = x.shape
        elif len(x.shape) == 3:
            if heads < 1 or x.shape[2] % heads:
                raise self.error(f"a 3-D input needs num_heads dividing its hidden size {x.shape[2]}, got {heads}")
            B, S, H, D = x.shape[0], x.shape[1], heads, x.shape[2] // heads
        else:
            raise self.error(f"needs a 3-D (B, S, hidden) or 4-D (B, H, S, D) input, got {x.shape}")
        rd = int_attr(self, attrs, "rotary_embedding_dim", 0) or D
        if rd < 0 or rd > D or rd % 2:
            raise self.error(f"rotary_embedding_dim must be even and at most the head size {D}, got {rd}")
        if cos.shape != sin.shape:
            raise self.error(f"cos_cache {cos.shape} and sin_cache {sin.shape} must have one shape")
        if len(inputs) > 3:
            pid = inputs[3]
            if pid.dtype.kind not in "iu" or pid.shape != (B, S):
                raise self.error(f"position_ids must be ({B}, {S}) integers, got {pid.shape} {pid.dtype}")
            if len(cos.shape) != 2 or cos.shape[1] != rd // 2:
                raise self.error(f"with position_ids the caches must be (positions, {rd // 2}), got {cos.shape}")
        elif cos.shape != (B, S, rd // 2):
            raise self.error(f"without position_ids the caches must be ({B}, {S}, {rd // 2}), got {cos.shape}")
        return {"interleaved": bool_attr(self, attrs, "interleaved", False), "rotary_embedding_dim": rd,
                "num_heads": H}

    def infer(self, inputs, attrs):
        return [inputs[0]]

    def reference(self, inputs, attrs):
        x, cos, sin = (widen(a) for a in inputs[:3])
        if x.ndim == 4:
            xs = np.transpose(x, (0, 2, 1, 3))  # (B, S, H, D)
        else:
            xs = x.reshape(x.shape[0], x.shape[1], attrs["num_heads"], -1)
        rd = attrs["rotary_embedding_dim"]
        if len(inputs) > 3:
            pos = inputs[3].astype(np.int64)
            bad = (pos < 0) | (pos >= cos.shape[0])
            pos = np.clip(pos, 0, max(cos.shape[0] - 1, 0))
            cos, sin = (np.where(bad[..., None], x.dtype.type(np.nan), c[pos]) for c in (cos, sin))
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]  # (B, S, 1, rd/2)
        rot = xs[..., :rd]
        x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if attrs["interleaved"] else np.split(rot, 2, axis=-1)
        real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
        y = np.array(xs)
        if attrs["interleaved"]:
            y[..., 0:rd:2], y[..., 1:rd:2] = real, imag
        else:
            y[..., :rd // 2], y[..., rd // 2:rd] = real, imag
        y = np.transpose(y, (0, 2, 1, 3)) if x.ndim == 4 else y.reshape(x.shape)
        return [np.ascontiguousarray(y).astype(inputs[0].dtype)]

    def plan(self, inputs, outputs, attrs, info):
        x = inputs[0]
        elem = dialect_type(x.dtype)
        H, rd = attrs["num_heads"], attrs["rotary_embedding_dim"]
        if len(x.shape) == 4:
            S, D, per_s = x.shape[2], x.shape[3], 1  # (B, H, S, D): a row of D per (b, h, s)
        else:
            S, D, per_s = x.shape[1], x.shape[2] // H, H  # (B, S, H, D)
        with_pid = len(inputs) > 3
        pt = dialect_type(inputs[3].dtype) if with_pid else "int"
        if with_pid:
            row = ("        " + pt + " p = pid[b * S + s];\n"
                   f"        bool bad = p < CAST({pt}, 0) || p >= CAST({pt}, P);\n"
                   "        int row = bad ? 0 : CAST(int, p);\n")
        else:
            row = "        bool bad = false;\n        int row = b * S + s;\n"
        if attrs["interleaved"]:
            pair = ("            int j = d / 2;\n            ACC x1 = TO_ACC(x[base + 2 * j]);\n"
                    "            ACC x2 = TO_ACC(x[base + 2 * j + 1]);\n            bool first = d % 2 == 0;\n")
        else:
            pair = ("            bool first = d < hd;\n            int j = first ? d : d - hd;\n"
                    "            ACC x1 = TO_ACC(x[base + j]);\n            ACC x2 = TO_ACC(x[base + j + hd]);\n")
        body = ("    FOR_EACH(i, n) {\n        int d = i % D;\n        int t = i / D;\n        int base = i - d;\n"
                "        int s = (t / per_s) % S;\n        int b = t / (H * S);\n" + row
                + "        if (d >= rd) {\n            y[i] = x[i];\n        } else {\n" + pair
                + "            ACC c = TO_ACC(cosc[row * hd + j]);\n            ACC sn = TO_ACC(sinc[row * hd + j]);\n"
                "            ACC v = first ? c * x1 - sn * x2 : sn * x1 + c * x2;\n"
                "            y[i] = FROM_ACC(bad ? CAST(ACC, DL_NAN) : v);\n        }\n    }")
        params = [Param("x", "T", "in"), Param("cosc", "T", "in"), Param("sinc", "T", "in")]
        if with_pid:
            params.append(Param("pid", pt, "in"))
        params += [Param("y", "T", "out")] + [Param(n, "int", "scalar")
                                               for n in ("n", "D", "S", "H", "per_s", "rd", "hd", "P")]
        tag = f"{self.name}_{elem}{'_i' if attrs['interleaved'] else ''}{'_p' + pt if with_pid else ''}"
        spec = KernelSpec(tag, tuple(params), body, elem=elem)
        n = x.size
        args = (*[("in", j) for j in range(len(inputs))], ("out", 0), n, D, S, H, per_s, rd, rd // 2,
                inputs[1].shape[0])
        local = local_1d(info)
        return Plan([Launch(spec, args, groups_for(n, local, info), (local,))])
