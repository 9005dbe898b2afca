"""Cases for softmax, log_softmax, lp_normalization, layer_normalization, rms_normalization, group_normalization,
batch_normalization and lrn."""

from op_cases import Case, inputs, rand


def _positive(*shape, dtype="float32", low=0.2, high=3.0):
    return rand(*shape, dtype=dtype, low=low, high=high)


CASES = []

# softmax / log_softmax: last, first and middle axes, size-1 axis, rank 1, long rows (work-group per row),
# strided long rows, large logits (stability), float16, empty
for name in ("softmax", "log_softmax"):
    for shape, attrs in [((7,), {}), ((3, 5, 17), {}), ((3, 5, 17), {"axis": 0}), ((3, 5, 17), {"axis": 1}),
                         ((3, 5, 17), {"axis": -2}), ((4, 1, 3), {"axis": 1}), ((3, 5000), {"axis": -1}),
                         ((2, 300, 7), {"axis": 1}), ((70001, 2), {"axis": 1}), ((0, 5), {"axis": 1})]:
        CASES.append(Case(name, inputs(rand(*shape, low=-5, high=5)), attrs, id=f"{name}-{shape}-{attrs}"))
    CASES.append(Case(name, inputs(rand(4, 33, low=-80, high=80)), {}, id=f"{name}-large-logits"))
    CASES.append(Case(name, inputs(rand(6, 500, low=-80, high=80)), {"axis": 1}, id=f"{name}-large-logits-long"))
    CASES.append(Case(name, inputs(rand(4, 33, dtype="float16", low=-4, high=4)), {}, id=f"{name}-f16",
                      dtype="float16"))
    CASES.append(Case(name, inputs(rand(3, 700, dtype="float16", low=-4, high=4)), {"axis": -1},
                      id=f"{name}-f16-long", dtype="float16"))
    CASES.append(Case(name, inputs(rand(3, 5, 17, dtype="float64", low=-5, high=5)), {"axis": 1},
                      id=f"{name}-f64", dtype="float64"))
    CASES.append(Case(name, inputs(rand(2, 400, dtype="float64", low=-5, high=5)), {}, id=f"{name}-f64-long",
                      dtype="float64"))

# lp_normalization: p 1 and 2, every axis, long rows, a zero row (norm 0 gives 0), float16 and float64
LP = "lp_normalization"


def _with_zero_row(shape):
    def make(rng):
        x = rng.uniform(-2, 2, shape).astype("float32")
        x[0] = 0
        return [x]
    return make


for p in (1, 2):
    CASES += [
        Case(LP, inputs(rand(3, 5, 7)), {"p": p}, id=f"lp{p}-last"),
        Case(LP, inputs(rand(3, 5, 7)), {"p": p, "axis": 0}, id=f"lp{p}-axis0"),
        Case(LP, inputs(rand(3, 5, 7)), {"p": p, "axis": 1}, id=f"lp{p}-axis1"),
        Case(LP, inputs(rand(2, 3000)), {"p": p}, id=f"lp{p}-long"),
        Case(LP, inputs(rand(6)), {"p": p, "axis": 0}, id=f"lp{p}-rank1"),
        Case(LP, _with_zero_row((4, 6)), {"p": p, "axis": 1}, id=f"lp{p}-zero-row"),
        Case(LP, inputs(rand(4, 9, dtype="float16")), {"p": p}, id=f"lp{p}-f16", dtype="float16"),
        Case(LP, inputs(rand(4, 9, dtype="float64")), {"p": p, "axis": 0}, id=f"lp{p}-f64", dtype="float64"),
    ]

# layer_normalization: axes, with and without scale/bias, broadcast scale, long rows, epsilon, float16
LN = "layer_normalization"
CASES += [
    Case(LN, inputs(rand(3, 17)), {}, id="ln-plain"),
    Case(LN, inputs(rand(3, 17), rand(17)), {}, id="ln-scale"),
    Case(LN, inputs(rand(3, 17), rand(17), rand(17)), {}, id="ln-scale-bias"),
    Case(LN, inputs(rand(2, 4, 5), rand(4, 5), rand(4, 5)), {"axis": 1}, id="ln-axis1"),
    Case(LN, inputs(rand(2, 4, 5), rand(4, 1), rand(5)), {"axis": -2}, id="ln-broadcast-params"),
    Case(LN, inputs(rand(2, 4, 5), rand(2, 4, 5), rand(1)), {"axis": 0}, id="ln-axis0"),
    Case(LN, inputs(rand(6, 1)), {}, id="ln-size1-row"),
    Case(LN, inputs(rand(9)), {"epsilon": 0.5}, id="ln-rank1-eps"),
    Case(LN, inputs(rand(4, 3000), rand(3000), rand(3000)), {}, id="ln-long"),
    Case(LN, inputs(rand(3, 10, 70), rand(10, 70), rand(70)), {"axis": 1, "epsilon": 1e-3}, id="ln-long-axis1"),
    Case(LN, inputs(rand(20000, 8), rand(8), rand(8)), {}, id="ln-many-rows"),
    Case(LN, inputs(rand(2, 3, 4, 5, 6), rand(4, 1, 6), rand(1, 5, 1)), {"axis": 2}, id="ln-5d"),
    Case(LN, inputs(rand(0, 4), rand(4)), {}, id="ln-empty"),
    Case(LN, inputs(rand(4, 33, dtype="float16"), rand(33, dtype="float16"), rand(33, dtype="float16")), {},
         id="ln-f16", dtype="float16"),
    Case(LN, inputs(rand(2, 600, dtype="float16")), {}, id="ln-f16-long", dtype="float16"),
    Case(LN, inputs(rand(3, 17, dtype="float64"), rand(17, dtype="float64"), rand(17, dtype="float64")), {},
         id="ln-f64", dtype="float64"),
    Case(LN, inputs(rand(2, 500, dtype="float64")), {"epsilon": 0.1}, id="ln-f64-long", dtype="float64"),
    # the Mean and InvStdDev outputs, in the stash dtype
    Case(LN, inputs(rand(3, 4, 5), rand(4, 5), rand(5)), {"axis": 1, "stats": True}, id="ln-stats"),
    Case(LN, inputs(rand(2, 3, 4, 5)), {"axis": 0, "stats": True}, id="ln-stats-axis0"),
    Case(LN, inputs(rand(3, 2000), rand(2000)), {"stats": True}, id="ln-stats-long"),
    Case(LN, inputs(rand(4, 33, dtype="float16"), rand(33, dtype="float16")), {"stats": True},
         id="ln-stats-f16", dtype="float16"),
    Case(LN, inputs(rand(4, 9, dtype="float64")), {"stats": True, "stash_type": "float64"}, id="ln-stats-f64",
         dtype="float64"),
    Case(LN, inputs(rand(0, 4)), {"stats": True}, id="ln-stats-empty"),
]

# rms_normalization: axes, with and without scale, broadcast scale, long rows, float16 and float64
RMS = "rms_normalization"
CASES += [
    Case(RMS, inputs(rand(3, 17)), {}, id="rms-plain"),
    Case(RMS, inputs(rand(3, 17), rand(17)), {}, id="rms-scale"),
    Case(RMS, inputs(rand(2, 4, 5), rand(4, 5)), {"axis": 1, "epsilon": 0.1}, id="rms-axis1"),
    Case(RMS, inputs(rand(2, 4, 5), rand(4, 1)), {"axis": -2}, id="rms-broadcast-scale"),
    Case(RMS, inputs(rand(2, 3, 4, 5), rand(2, 3, 4, 5)), {"axis": 0}, id="rms-axis0"),
    Case(RMS, inputs(rand(4, 3000), rand(3000)), {}, id="rms-long"),
    Case(RMS, inputs(rand(20000, 8), rand(8)), {}, id="rms-many-rows"),
    Case(RMS, inputs(rand(4, 33, dtype="float16"), rand(33, dtype="float16")), {}, id="rms-f16", dtype="float16"),
    Case(RMS, inputs(rand(4, 33, dtype="float64"), rand(33, dtype="float64")), {}, id="rms-f64", dtype="float64"),
    Case(RMS, inputs(rand(0, 4), rand(4)), {}, id="rms-empty"),
]

# group_normalization: groups of several channels, one group (layer norm), a group per channel (instance
# norm), rank 2 and 5, long groups, float16 and float64
GN = "group_normalization"


def _gn(*shape, dtype="float32"):
    c = shape[1]
    return inputs(rand(*shape, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype))


CASES += [
    Case(GN, _gn(3, 4, 2, 2), {"num_groups": 2}, id="gn-2groups"),
    Case(GN, _gn(2, 6, 5), {"num_groups": 1, "epsilon": 0.01}, id="gn-1group"),
    Case(GN, _gn(2, 3, 4, 5), {"num_groups": 3}, id="gn-instance"),
    Case(GN, _gn(4, 6), {"num_groups": 3}, id="gn-rank2"),
    Case(GN, _gn(2, 4, 3, 2, 2), {"num_groups": 2}, id="gn-5d"),
    Case(GN, _gn(2, 8, 40, 40), {"num_groups": 4}, id="gn-long"),
    Case(GN, _gn(2, 4, 9, dtype="float16"), {"num_groups": 2}, id="gn-f16", dtype="float16"),
    Case(GN, _gn(2, 4, 9, dtype="float64"), {"num_groups": 4}, id="gn-f64", dtype="float64"),
    Case(GN, _gn(0, 4, 3), {"num_groups": 2}, id="gn-empty"),
]

# batch_normalization: rank 2, 4 and 5, size-1 spatial, epsilon, momentum accepted, float16
BN = "batch_normalization"


def _bn(*shape, dtype="float32"):
    c = shape[1]
    return inputs(rand(*shape, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype),
                  _positive(c, dtype=dtype))


CASES += [
    Case(BN, _bn(4, 3), {}, id="bn-2d"),
    Case(BN, _bn(2, 3, 5, 7), {}, id="bn-4d"),
    Case(BN, _bn(2, 5, 3, 1, 4), {"epsilon": 0.1}, id="bn-5d-eps"),
    Case(BN, _bn(1, 16, 1, 1), {"momentum": 0.99, "training_mode": False}, id="bn-1x1"),
    Case(BN, _bn(2, 3, 70001), {}, id="bn-large"),
    Case(BN, _bn(0, 3, 4), {}, id="bn-empty"),
    Case(BN, _bn(2, 4, 9, dtype="float16"), {}, id="bn-f16", dtype="float16"),
    Case(BN, _bn(2, 3, 5, 7), {"activation": "relu"}, id="bn-4d-relu"),
    Case(BN, _bn(2, 3, 70001), {"activation": "relu"}, id="bn-large-relu"),
    Case(BN, _bn(2, 4, 9, dtype="float16"), {"activation": "relu"}, id="bn-f16-relu", dtype="float16"),
    Case(BN, _bn(2, 4, 9, dtype="float64"), {}, id="bn-f64", dtype="float64"),
]

# lrn: odd and even sizes, size 1, size larger than the channels, attributes, rank 2 and 3, float16
CASES += [
    Case("lrn", inputs(rand(2, 5, 3, 3)), {"size": 3}, id="lrn-3"),
    Case("lrn", inputs(rand(2, 5, 3, 3)), {"size": 4}, id="lrn-even"),
    Case("lrn", inputs(rand(1, 7, 4, 4)), {"size": 1}, id="lrn-1"),
    Case("lrn", inputs(rand(2, 3, 6)), {"size": 9}, id="lrn-wide"),
    Case("lrn", inputs(rand(3, 8, 5, 5)), {"size": 5, "alpha": 0.5, "beta": 0.6, "bias": 2.0}, id="lrn-attrs"),
    Case("lrn", inputs(rand(4, 11)), {"size": 3, "alpha": 1.0}, id="lrn-2d"),
    Case("lrn", inputs(rand(1, 16, 100, 50)), {"size": 5, "alpha": 0.01}, id="lrn-large"),
    Case("lrn", inputs(rand(0, 3, 2)), {"size": 3}, id="lrn-empty"),
    Case("lrn", inputs(rand(2, 6, 7, dtype="float16")), {"size": 3, "alpha": 0.5}, id="lrn-f16", dtype="float16"),
    Case("lrn", inputs(rand(2, 6, 7, dtype="float64")), {"size": 3, "alpha": 0.5}, id="lrn-f64", dtype="float64"),
]
