"""Cases for linear_attention: every update rule, decay per head and per key dimension, beta per head and
shared, a past state, grouped-query and multi-query heads, one step (decoding), explicit scale, float16 and
float64."""

from op_cases import Case


def _la(B=2, T=4, Hq=4, Hk=4, Dk=8, Dv=8, past=False, decay=None, beta=None, dtype="float32"):
    """Inputs in ONNX order; ``decay``: "head" | "dim"; ``beta``: "head" | "one"."""
    def make(rng):
        arrays = [rng.uniform(-1, 1, (B, T, H * D)).astype(dtype) for H, D in ((Hq, Dk), (Hk, Dk), (Hk, Dv))]
        if past:
            arrays.append(rng.uniform(-0.5, 0.5, (B, Hk, Dk, Dv)).astype(dtype))
        if decay:
            arrays.append(rng.uniform(-0.6, -0.01, (B, T, Hk if decay == "head" else Hk * Dk)).astype(dtype))
        if beta:
            arrays.append(rng.uniform(0.1, 0.9, (B, T, Hk if beta == "head" else 1)).astype(dtype))
        return arrays
    return make


L = "linear_attention"
H = {"q_num_heads": 4, "kv_num_heads": 4}
CASES = [
    Case(L, _la(), {**H, "update_rule": "linear"}, id="la-linear"),
    Case(L, _la(T=1, past=True), {**H, "update_rule": "linear"}, id="la-linear-decode"),
    Case(L, _la(decay="dim"), {**H, "update_rule": "gated"}, id="la-gated"),
    Case(L, _la(decay="head", past=True), {**H, "update_rule": "gated"}, id="la-gated-per-head"),
    Case(L, _la(beta="head"), {**H, "update_rule": "delta"}, id="la-delta"),
    Case(L, _la(decay="dim", beta="head"), H, id="la-gated-delta"),
    Case(L, _la(decay="dim", beta="one", past=True), {**H, "scale": 0.25}, id="la-gated-delta-past-scale"),
    Case(L, _la(Hq=8, Hk=4, decay="dim", beta="head"), {"q_num_heads": 8, "kv_num_heads": 4}, id="la-gqa"),
    Case(L, _la(Hq=8, Hk=1, Dk=8, Dv=6, decay="head", beta="one"), {"q_num_heads": 8, "kv_num_heads": 1},
         id="la-mqa"),
    Case(L, _la(B=1, T=33, Hq=2, Hk=2, Dk=64, Dv=32, decay="dim", beta="head"),
         {"q_num_heads": 2, "kv_num_heads": 2}, id="la-long"),
    Case(L, _la(decay="dim", beta="head", dtype="float16"), H, id="la-f16", dtype="float16"),
    Case(L, _la(decay="head", beta="head", past=True, dtype="float64"), H, id="la-f64", dtype="float64"),
]
