"""Cases for attention on the fused kernel (few query rows, heads up to 256) and the composed one: multi-head,
grouped-query and multi-query heads, value head sizes apart from the key's, float and bool masks of rank 1 to 4
(shorter than the keys: padded), causal (with a cache offset), windows, padded keys (nonpad_kv_seqlen, with the
negative offsets that empty whole rows), softcap, scale, every qk_matmul_output_mode, long key sequences (several
chunks), decoding (one query), float16 and float64."""

import numpy as np

from op_cases import Case


def _attn(B=2, Hq=3, Hk=3, Sq=4, Skv=6, Dk=8, Dv=8, mask=None, nonpad=None, dtype="float32", neginf=False,
          full_row=False):
    """q, k, v and the optional mask (``mask``: (shape, "bool" | "float")) and nonpad_kv_seqlen (a list)."""
    def make(rng):
        arrays = [rng.uniform(-1, 1, shape).astype(dtype)
                  for shape in ((B, Hq, Sq, Dk), (B, Hk, Skv, Dk), (B, Hk, Skv, Dv))]
        if mask is not None:
            shape, kind = mask
            if kind == "bool":
                m = rng.uniform(0, 1, shape) < 0.7
                if full_row:
                    m.reshape(-1, shape[-1])[0] = False
            else:
                m = rng.uniform(-1, 1, shape).astype(dtype)
                if neginf:
                    m[rng.uniform(0, 1, shape) < 0.3] = -np.inf
                    if full_row:
                        m.reshape(-1, shape[-1])[0] = -np.inf
            arrays.append(m)
        if nonpad is not None:
            arrays.append(np.array(nonpad, dtype=np.int64))
        return arrays
    return make


A = "attention"
CASES = []
for big, tag in ((False, ""), (True, "-composed")):
    D = 272 if big else 8  # heads over 256 run the composed kernels
    CASES += [
        Case(A, _attn(Dk=D, Dv=D), {}, id=f"attn-mha{tag}"),
        Case(A, _attn(Hq=9, Hk=3, Dk=D, Dv=D), {}, id=f"attn-gqa{tag}"),
        Case(A, _attn(Hq=4, Hk=1, Dk=D, Dv=D + 2), {"is_causal": True}, id=f"attn-mqa-causal{tag}"),
        Case(A, _attn(Dk=D, Dv=10), {"scale": 0.01}, id=f"attn-dv-scale{tag}"),
        Case(A, _attn(Dk=D, Dv=D, mask=((4, 6), "float")), {"softcap": 2.0}, id=f"attn-float-mask-softcap{tag}"),
        Case(A, _attn(Dk=D, Dv=D, mask=((2, 1, 4, 6), "float"), neginf=True, full_row=True), {"is_causal": True},
             id=f"attn-mask-neginf-causal{tag}"),
        Case(A, _attn(Hq=4, Hk=2, Dk=D, Dv=D, mask=((2, 4, 4, 6), "bool"), full_row=True),
             {"qk_matmul_output_mode": 3}, id=f"attn-bool-mask-qk3{tag}"),
        Case(A, _attn(Sq=4, Skv=10, Dk=D, Dv=D, mask=((4, 7), "float")), {"is_causal": True, "offset": 6,
                                                                       "qk_matmul_output_mode": 3},
             id=f"attn-past-short-mask{tag}"),
        # (mode 2 keeps the bias's -inf: the cases giving it have finite biases, the test scales atol by max |y|)
        Case(A, _attn(Hq=6, Hk=3, Dk=D, Dv=D, mask=((6, 1, 6), "float")), {"softcap": 1.5, "qk_matmul_output_mode": 2},
             id=f"attn-qk2{tag}"),
        Case(A, _attn(Dk=D, Dv=D, mask=((2, 3, 4, 6), "float")), {"softcap": 0.5, "qk_matmul_output_mode": 1},
             id=f"attn-qk1{tag}"),
        Case(A, _attn(Dk=D, Dv=D), {"softcap": 3.0, "qk_matmul_output_mode": 0}, id=f"attn-qk0{tag}"),
        Case(A, _attn(B=3, Hq=2, Hk=2, Sq=2, Skv=6, Dk=D, Dv=D, nonpad=[6, 3, 1]), {"is_causal": True},
             id=f"attn-nonpad-causal{tag}"),
        Case(A, _attn(B=2, Sq=4, Skv=8, Dk=D, Dv=D, mask=((1, 8), "float"), nonpad=[8, 5]),
             {"is_causal": True, "left_window_size": 2, "qk_matmul_output_mode": 3}, id=f"attn-window-nonpad{tag}"),
        Case(A, _attn(Dk=D, Dv=D, mask=((6,), "bool")), {"left_window_size": 1, "right_window_size": 2},
             id=f"attn-bidirectional-window-rank1-mask{tag}"),
        Case(A, _attn(B=1, Hq=4, Hk=2, Sq=1, Skv=300, Dk=D, Dv=D, mask=((1, 300), "float")), {},
             id=f"attn-decode-long{tag}"),
        Case(A, _attn(B=1, Hq=2, Hk=2, Sq=5, Skv=5, Dk=D, Dv=D, nonpad=[2]), {"is_causal": True},
             id=f"attn-negative-offset{tag}"),
    ]
CASES += [
    Case(A, _attn(B=1, Hq=2, Hk=2, Sq=70, Skv=200, Dk=64, Dv=64, mask=((70, 150), "bool")),
         {"is_causal": True, "offset": 130}, id="attn-prefill-long"),
    Case(A, _attn(B=2, Hq=4, Hk=2, Sq=8, Skv=200, Dk=64, Dv=48, mask=((2, 1, 8, 150), "float"), neginf=True),
         {"is_causal": True, "offset": 192, "softcap": 5.0, "qk_matmul_output_mode": 3}, id="attn-fused-chunks"),
    Case(A, _attn(Dk=128, Dv=256, Hq=8, Hk=2, mask=((4, 6), "float")), {"is_causal": True}, id="attn-big-heads"),
    Case(A, _attn(mask=((4, 6), "float"), dtype="float16"), {"is_causal": True, "qk_matmul_output_mode": 3},
         id="attn-f16", dtype="float16"),
    Case(A, _attn(Hq=4, Hk=2, mask=((2, 4, 4, 6), "bool"), dtype="float64"),
         {"softcap": 2.0, "qk_matmul_output_mode": 3}, id="attn-f64", dtype="float64"),
    Case(A, _attn(Hq=4, Hk=2, mask=((2, 4, 4, 6), "float"), dtype="float64"),
         {"softcap": 2.0, "qk_matmul_output_mode": 2}, id="attn-f64-qk2", dtype="float64"),
    Case(A, _attn(Dk=272, Dv=272, mask=((4, 6), "float"), dtype="float64"), {"is_causal": True},
         id="attn-f64-composed", dtype="float64"),
]
