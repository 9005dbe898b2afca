"""linear_attention: ONNX LinearAttention, the recurrent (state-space) form of attention.

Each key/value head keeps a state S (Dk x Dv) updated per time step; the kernel gives one work item to each
column of each head's state (batch x key/value heads x Dv items), which walks the time steps holding its column.
"""

from __future__ import annotations

import numpy as np

from ..dialect import KernelSpec, Param, dialect_type
from ..op import Launch, Plan, TensorType, float_attr, groups_for, local_1d, register
from .reduce import int_attr, known_attrs
from .rows import FloatKernelOp, float_tensor, widen

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")
#: largest key head size the kernel holds (one state column per work item)
HEAD_MAX = 256


@register
class LinearAttention(FloatKernelOp):
    """linear_attention(query, key, value[, past_state][, decay][, beta], q_num_heads, kv_num_heads, scale=0,
    update_rule="gated_delta"): ONNX LinearAttention.

    query (B, T, Hq·Dk), key (B, T, Hk·Dk), value (B, T, Hk·Dv); the state (B, Hk, Dk, Dv) starts at past_state
    or zeros.  Each step: gated rules decay S by exp(decay) (decay (B, T, Hk) per head or (B, T, Hk·Dk) per key
    dimension); delta rules replace v by beta·(v - Sᵀk) (beta (B, T, Hk) or (B, T, 1)); then S += k ⊗ v and
    the output of query head h is scale·qᵀS of its key/value head h // (Hq / Hk).  The inputs present are those
    the rule takes (decay for gated rules, beta for delta rules).  Outputs: (B, T, Hq·Dv) and the final state.
    """

    name = "linear_attention"
    min_inputs = 3
    max_inputs = 6
    math = "dl_exp("

    def check(self, inputs, attrs):
        known_attrs(self, attrs, ("q_num_heads", "kv_num_heads", "scale", "update_rule"))
        rule = attrs.get("update_rule", "gated_delta")
        if isinstance(rule, bytes):
            rule = rule.decode(errors="replace")
        if rule not in UPDATE_RULES:
            raise self.error(f"update_rule must be one of {UPDATE_RULES}, got {rule!r}")
        gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        extra = len(inputs) - 3 - gated - delta
        if extra not in (0, 1):
            raise self.error(f"update_rule {rule!r} takes query, key, value, [past_state]"
                             f"{', decay' if gated else ''}{', beta' if delta else ''}; got {len(inputs)} inputs")
        q, k, v = inputs[:3]
        for t, what in zip(inputs, ("query", "key", "value")):
            float_tensor(self, t, what)
            if len(t.shape) != 3 or t.dtype != q.dtype:
                raise self.error(f"{what} must be 3-D (B, T, hidden) of query's dtype, got {t.shape} {t.dtype}")
        if "q_num_heads" not in attrs or "kv_num_heads" not in attrs:
            raise self.error("needs the attributes q_num_heads and kv_num_heads")
        Hq, Hk = int_attr(self, attrs, "q_num_heads"), int_attr(self, attrs, "kv_num_heads")
        if Hq < 1 or Hk < 1 or Hq % Hk:
            raise self.error(f"q_num_heads {Hq} must be a positive multiple of kv_num_heads {Hk}")
        B, T = q.shape[:2]
        if k.shape[:2] != (B, T) or v.shape[:2] != (B, T):
            raise self.error(f"query, key and value must share (B, T) = {(B, T)}")
        if q.shape[2] % Hq or k.shape[2] % Hk or v.shape[2] % Hk or q.shape[2] // Hq != k.shape[2] // Hk:
            raise self.error(f"hidden sizes {q.shape[2]}, {k.shape[2]}, {v.shape[2]} do not split into "
                             f"{Hq} query and {Hk} key/value heads of one key size")
        Dk, Dv = q.shape[2] // Hq, v.shape[2] // Hk
        rest = list(inputs[3:])
        if extra:
            past = rest.pop(0)
            float_tensor(self, past, "past_state")
            if past.shape != (B, Hk, Dk, Dv):
                raise self.error(f"past_state must have shape {(B, Hk, Dk, Dv)}, got {past.shape}")
        if gated:
            decay = rest.pop(0)
            if decay.dtype != q.dtype or len(decay.shape) != 3 or decay.shape[:2] != (B, T) \
                    or decay.shape[2] not in (Hk, Hk * Dk):
                raise self.error(f"decay must be ({B}, {T}, {Hk} or {Hk * Dk}) of query's dtype, got "
                                 f"{decay.shape} {decay.dtype}")
        if delta:
            beta = rest.pop(0)
            if beta.dtype != q.dtype or len(beta.shape) != 3 or beta.shape[:2] != (B, T) \
                    or beta.shape[2] not in (Hk, 1):
                raise self.error(f"beta must be ({B}, {T}, {Hk} or 1) of query's dtype, got {beta.shape} {beta.dtype}")
        scale = float_attr(self, attrs, "scale", 0.0)
        return {"q_num_heads": Hq, "kv_num_heads": Hk, "scale": scale or 1.0 / np.sqrt(Dk),
                "update_rule": rule}

    @staticmethod
    def _parts(inputs, attrs) -> tuple:
        """(past_state, decay, beta), None where absent."""
        rule = attrs["update_rule"]
        gated, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
        rest = list(inputs[3:])
        past = rest.pop(0) if len(rest) > gated + delta else None
        decay = rest.pop(0) if gated else None
        beta = rest.pop(0) if delta else None
        return past, decay, beta

    def infer(self, inputs, attrs):
        q, v = inputs[0], inputs[2]
        B, T = q.shape[:2]
        Hq, Hk = attrs["q_num_heads"], attrs["kv_num_heads"]
        Dk, Dv = q.shape[2] // Hq, v.shape[2] // Hk
        past = self._parts(inputs, attrs)[0]
        state_dtype = (past if past is not None else q).dtype
        return [TensorType((B, T, Hq * Dv), q.dtype), TensorType((B, Hk, Dk, Dv), state_dtype)]

    def reference(self, inputs, attrs):
        q, k, v = (widen(a) for a in inputs[:3])
        past, decay, beta = self._parts(inputs, attrs)
        B, T = q.shape[:2]
        Hq, Hk = attrs["q_num_heads"], attrs["kv_num_heads"]
        G, Dk, Dv = Hq // Hk, q.shape[2] // Hq, v.shape[2] // Hk
        q4, k4, v4 = q.reshape(B, T, Hk, G, Dk), k.reshape(B, T, Hk, Dk), v.reshape(B, T, Hk, Dv)
        state = widen(past).astype(q.dtype) if past is not None else np.zeros((B, Hk, Dk, Dv), q.dtype)
        if decay is not None:
            g = widen(decay).reshape(B, T, Hk, -1)  # last: 1 (per head) or Dk
        if beta is not None:
            bt = widen(beta).reshape(B, T, -1, 1)  # third: Hk or 1
        out = np.empty((B, T, Hk, G, Dv), q.dtype)
        with np.errstate(all="ignore"):
            for t in range(T):  # the recurrence: each step vectorized over batch, heads and the state
                if decay is not None:
                    state = state * np.exp(g[:, t])[..., None]
                vt = v4[:, t]
                if beta is not None:
                    vt = bt[:, t] * (vt - np.einsum("bhdm,bhd->bhm", state, k4[:, t]))
                state = state + k4[:, t, :, :, None] * vt[:, :, None, :]
                out[:, t] = np.einsum("bhgd,bhdm->bhgm", q4[:, t], state)
        out *= q.dtype.type(attrs["scale"])
        y = out.reshape(B, T, Hq * Dv).astype(inputs[0].dtype)
        return [y, state.astype((past if past is not None else inputs[0]).dtype)]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and info.kernel_language != "python":
            past = self._parts(inputs, attrs)[0]
            if past is not None and past.dtype != inputs[0].dtype:
                why = f"{self.name}: the kernel keeps the state in the inputs' dtype, not {past.dtype}"
            elif inputs[0].shape[2] // attrs["q_num_heads"] > HEAD_MAX:
                why = f"{self.name}: key heads over {HEAD_MAX} elements exceed the kernel's state column"
        return why

    def plan(self, inputs, outputs, attrs, info):
        q, v = inputs[0], inputs[2]
        elem = dialect_type(q.dtype)
        past, decay, beta = self._parts(inputs, attrs)
        B, T = q.shape[:2]
        Hq, Hk = attrs["q_num_heads"], attrs["kv_num_heads"]
        G, Dk, Dv = Hq // Hk, q.shape[2] // Hq, v.shape[2] // Hk
        buffers = [Param("q", "T", "in"), Param("k", "T", "in"), Param("v", "T", "in")]
        code = ["    FOR_EACH(w, W) {\n        int m = w % Dv;\n        int hk = (w / Dv) % Hk;\n",
                "        int b = w / (Dv * Hk);\n        ACC col[HEAD_MAX];\n",
                "        for (int d = 0; d < Dk; d++) col[d] = "
                + ("TO_ACC(past[((b * Hk + hk) * Dk + d) * Dv + m]);\n" if past is not None else "CAST(ACC, 0.0f);\n"),
                "        for (int t = 0; t < NT; t++) {\n            int bt = b * NT + t;\n",
                "            int kb = (bt * Hk + hk) * Dk;\n"]
        tag = ""
        if past is not None:
            buffers.append(Param("past", "T", "in"))
            tag += "_p"
        if decay is not None:
            buffers.append(Param("decay", "T", "in"))
            if decay.shape[2] == Hk:
                code.append("            ACC gh = dl_exp(TO_ACC(decay[bt * Hk + hk]));\n"
                            "            for (int d = 0; d < Dk; d++) col[d] = col[d] * gh;\n")
                tag += "_gh"
            else:
                code.append("            for (int d = 0; d < Dk; d++) col[d] = col[d] * dl_exp(TO_ACC(decay[kb + d]));\n")
                tag += "_gd"
        code.append("            ACC vt = TO_ACC(v[(bt * Hk + hk) * Dv + m]);\n")
        if beta is not None:
            buffers.append(Param("beta", "T", "in"))
            at = "bt * Hk + hk" if beta.shape[2] == Hk else "bt"
            code.append("            ACC r = CAST(ACC, 0.0f);\n"
                        "            for (int d = 0; d < Dk; d++) r = r + col[d] * TO_ACC(k[kb + d]);\n"
                        f"            vt = TO_ACC(beta[{at}]) * (vt - r);\n")
            tag += "_bh" if beta.shape[2] == Hk else "_b1"
        code.append("            for (int d = 0; d < Dk; d++) col[d] = col[d] + TO_ACC(k[kb + d]) * vt;\n"
                    "            for (int g = 0; g < G; g++) {\n                int qb = (bt * Hq + hk * G + g) * Dk;\n"
                    "                ACC o = CAST(ACC, 0.0f);\n"
                    "                for (int d = 0; d < Dk; d++) o = o + TO_ACC(q[qb + d]) * col[d];\n"
                    "                y[(bt * Hq + hk * G + g) * Dv + m] = FROM_ACC(o * scale);\n            }\n"
                    "        }\n"
                    "        for (int d = 0; d < Dk; d++) state[((b * Hk + hk) * Dk + d) * Dv + m] = FROM_ACC(col[d]);\n"
                    "    }")
        buffers += [Param("y", "T", "out"), Param("state", "T", "out")]
        scalars = [Param(n, "int", "scalar") for n in ("W", "NT", "Hq", "Hk", "G", "Dk", "Dv")]
        scalars.append(Param("scale", "f64" if elem == "f64" else "float", "scalar"))
        spec = KernelSpec(f"linear_attention_{elem}{tag}", (*buffers, *scalars), "".join(code), elem=elem,
                          defines=(("HEAD_MAX", HEAD_MAX),))
        W = B * Hk * Dv
        args = (*[("in", j) for j in range(len(inputs))], ("out", 0), ("out", 1), W, T, Hq, Hk, G, Dk, Dv,
                attrs["scale"])
        local = local_1d(info, 64)
        return Plan([Launch(spec, args, groups_for(W, local, info), (local,))])

