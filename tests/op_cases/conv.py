"""Cases for conv (ONNX Conv, 1-D to 3-D), conv_transpose (ONNX ConvTranspose) and conv_integer (ONNX
ConvInteger)."""

import numpy as np

from op_cases import Case, inputs, rand

# (X shape, W shape, bias, attrs); the implicit-GEMM path takes groups of >= 16 output channels,
# the direct kernel fewer, 1x1 stride-1 unpadded convolutions the plain GEMM kernel
CONV = [
    ((1, 1, 5), (1, 1, 3), False, {}),
    ((2, 3, 17), (4, 3, 3), True, {"strides": [2], "pads": [1, 2]}),
    ((2, 6, 20), (20, 3, 4), True, {"group": 2, "dilations": [3], "pads": [0, 3]}),
    ((1, 3, 9, 11), (5, 3, 3, 3), False, {}),
    ((2, 3, 9, 11), (5, 3, 3, 3), True, {"pads": [1, 0, 2, 1], "strides": [2, 1], "dilations": [1, 2]}),
    ((2, 8, 9, 11), (8, 2, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1]}),
    ((2, 6, 13, 10), (6, 1, 3, 3), True, {"group": 6, "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 4, 10, 10), (8, 1, 5, 5), False, {"group": 4, "auto_pad": "SAME_UPPER"}),  # depthwise, multiplier 2
    ((2, 32, 9, 11), (32, 32, 3, 3), True, {"pads": [1, 1, 1, 1]}),
    ((2, 16, 12, 7), (40, 16, 2, 3), True, {"strides": [2, 3], "dilations": [2, 1], "pads": [0, 1, 1, 0]}),
    ((1, 64, 6, 5), (64, 16, 3, 3), True, {"group": 4, "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ((1, 5, 8, 9), (18, 5, 4, 3), False, {"auto_pad": "SAME_UPPER", "strides": [3, 2]}),
    ((1, 5, 8, 9), (18, 5, 4, 3), False, {"auto_pad": "SAME_LOWER", "strides": [3, 2]}),
    ((1, 5, 8, 9), (18, 5, 4, 3), True, {"auto_pad": "VALID", "strides": [2, 2], "kernel_shape": [4, 3]}),
    ((2, 32, 9, 11), (48, 32, 1, 1), True, {}),  # 1x1 through the GEMM kernel
    ((2, 32, 9, 11), (48, 16, 1, 1), False, {"group": 2}),
    ((1, 7, 5, 3), (3, 7, 1, 1), True, {}),
    ((2, 8, 9, 11), (24, 8, 1, 1), True, {"strides": [2, 2]}),  # strided 1x1: implicit GEMM
    ((1, 3, 4, 5, 6), (4, 3, 2, 3, 2), True, {"pads": [1, 0, 1, 0, 1, 1]}),
    ((2, 4, 5, 6, 7), (20, 4, 2, 3, 2), False, {"auto_pad": "SAME_LOWER", "strides": [2, 1, 2], "dilations": [1, 2, 1]}),
    ((1, 4, 3, 4, 5), (4, 1, 3, 3, 3), True, {"group": 4, "pads": [1, 1, 1, 1, 1, 1]}),
    ((0, 3, 5, 5), (4, 3, 3, 3), True, {}),  # empty batch
    ((2, 0, 5, 5), (4, 0, 3, 3), True, {}),  # no input channels: bias only
    ((1, 32, 40, 40), (64, 32, 3, 3), True, {"pads": [1, 1, 1, 1]}),  # large
    # a fused ReLU after the bias, on each kernel path
    ((2, 3, 17), (4, 3, 3), True, {"strides": [2], "pads": [1, 1], "activation": "relu"}),
    ((2, 3, 9, 11), (5, 3, 3, 3), True, {"pads": [1, 0, 2, 1], "activation": "relu"}),
    ((2, 32, 9, 11), (32, 32, 3, 3), True, {"pads": [1, 1, 1, 1], "activation": "relu"}),
    ((1, 3, 9, 11), (5, 3, 3, 3), False, {"strides": [2, 2], "activation": "relu"}),
    ((2, 6, 13, 10), (6, 1, 3, 3), True, {"group": 6, "pads": [1, 1, 1, 1], "activation": "relu"}),
    ((2, 32, 9, 11), (48, 32, 1, 1), True, {"activation": "relu"}),
    ((1, 3, 4, 5, 6), (4, 3, 2, 3, 2), True, {"pads": [1, 0, 1, 1, 0, 1], "activation": "relu"}),
]

CONV_T = [
    ((1, 1, 5), (1, 1, 3), False, {}),
    ((2, 3, 7), (3, 4, 3), True, {"strides": [2], "pads": [1, 0], "output_padding": [1]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), False, {}),
    ((1, 1, 3, 3), (1, 2, 3, 3), False, {"strides": [3, 2], "pads": [1, 2, 1, 2]}),
    ((2, 4, 5, 6), (4, 3, 3, 2), True, {"strides": [3, 2], "dilations": [2, 1]}),
    ((2, 6, 5, 4), (6, 2, 3, 3), True, {"group": 3, "strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    ((1, 4, 5, 6), (4, 1, 3, 3), True, {"group": 4, "strides": [2, 2]}),  # depthwise
    ((1, 3, 5, 6), (3, 2, 3, 3), False, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 3, 5, 6), (3, 2, 4, 3), False, {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 3, 5, 6), (3, 2, 3, 3), True, {"auto_pad": "VALID", "strides": [2, 1]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), False, {"output_shape": [9, 10], "strides": [2, 3]}),
    ((1, 3, 4, 4), (3, 2, 3, 3), False, {"output_shape": [1, 2, 9, 10], "strides": [2, 3], "auto_pad": "SAME_UPPER"}),
    ((2, 32, 5, 6), (32, 16, 3, 3), True, {"group": 2, "strides": [2, 2], "pads": [1, 1, 0, 1], "output_padding": [1, 0]}),
    ((2, 24, 7, 5), (24, 40, 2, 3), True, {"strides": [2, 1], "dilations": [1, 2]}),
    ((1, 2, 3, 4, 3), (2, 3, 2, 3, 2), True, {"strides": [2, 1, 2], "pads": [0, 1, 0, 0, 1, 1]}),
    ((0, 3, 5, 5), (3, 4, 3, 3), False, {}),
    # an output_shape larger than the natural one: the extra is padding (zeros plus bias)
    ((1, 1, 3, 3), (1, 2, 3, 3), False, {"output_shape": [10, 8], "strides": [3, 2]}),
    ((1, 3, 4, 5), (3, 2, 3, 3), True, {"output_shape": [12, 9], "strides": [2, 1], "auto_pad": "SAME_UPPER"}),
    ((2, 32, 4, 4), (32, 16, 3, 3), True, {"output_shape": [11, 13], "strides": [2, 3]}),  # tiled
    ((1, 2, 5), (2, 3, 3), True, {"output_shape": [14], "strides": [2]}),
    ((1, 64, 16, 16), (64, 32, 4, 4), True, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),  # large
]

# (X shape, W shape, attrs): a summand Z of the output's shape after the bias (a fused residual add)
CONV_Z = [
    ((2, 8, 9, 11), (16, 8, 3, 3), {"pads": [1, 1, 1, 1], "activation": "relu"}),
    ((2, 32, 9, 11), (48, 32, 1, 1), {"activation": "relu"}),  # 1x1 through the GEMM kernel
    ((2, 16, 12, 7), (40, 16, 2, 3), {"strides": [2, 3], "pads": [0, 1, 1, 0]}),  # no activation, asymmetric
    ((2, 6, 13, 10), (6, 1, 3, 3), {"group": 6, "pads": [1, 1, 1, 1], "activation": "relu"}),  # depthwise
    ((2, 3, 17), (4, 3, 3), {"pads": [1, 1], "activation": "relu"}),  # 1-D
    ((1, 3, 4, 5, 6), (4, 3, 2, 3, 2), {"pads": [1, 1, 1, 1, 1, 1], "activation": "relu"}),  # 3-D
]


def _out_shape(x, w, attrs):
    nd = len(x) - 2
    p, s = attrs.get("pads", [0] * 2 * nd), attrs.get("strides", [1] * nd)
    return (x[0], w[0]) + tuple((x[2 + i] + p[i] + p[nd + i] - w[2 + i]) // s[i] + 1 for i in range(nd))


CASES = []
for x, w, attrs in CONV_Z:
    CASES.append(Case("conv", inputs(rand(*x), rand(*w), rand(w[0]), rand(*_out_shape(x, w, attrs))), attrs,
                      id=f"{x}*{w}+b+z-{attrs}"))
for x, w, bias, attrs in CONV:
    makers = [rand(*x), rand(*w)] + ([rand(w[0])] if bias else [])
    CASES.append(Case("conv", inputs(*makers), attrs, id=f"{x}*{w}{'+b' if bias else ''}-{attrs}"))
for x, w, bias, attrs in CONV_T:
    makers = [rand(*x), rand(*w)] + ([rand(w[1] * attrs.get("group", 1))] if bias else [])
    CASES.append(Case("conv_transpose", inputs(*makers), attrs, id=f"{x}*{w}{'+b' if bias else ''}-{attrs}"))
CASES += [
    Case("conv", inputs(rand(1, 16, 9, 9, dtype="float16"), rand(32, 16, 3, 3, dtype="float16"),
                        rand(32, dtype="float16")), {"pads": [1, 1, 1, 1]}, id="f16-tiled", dtype="float16"),
    Case("conv", inputs(rand(1, 4, 9, 9, dtype="float16"), rand(4, 1, 3, 3, dtype="float16")), {"group": 4},
         id="f16-depthwise", dtype="float16"),
    Case("conv", inputs(rand(1, 16, 9, 9, dtype="float16"), rand(32, 16, 3, 3, dtype="float16"),
                        rand(32, dtype="float16")), {"pads": [1, 1, 1, 1], "activation": "relu"}, id="f16-relu",
         dtype="float16"),
    Case("conv", inputs(rand(1, 16, 9, 9, dtype="float16"), rand(32, 16, 3, 3, dtype="float16"),
                        rand(32, dtype="float16"), rand(1, 32, 9, 9, dtype="float16")),
         {"pads": [1, 1, 1, 1], "activation": "relu"}, id="f16-z-relu", dtype="float16"),
    Case("conv_transpose", inputs(rand(1, 4, 5, 5, dtype="float16"), rand(4, 3, 3, 3, dtype="float16")),
         {"strides": [2, 2]}, id="f16", dtype="float16"),
]


def _integer_inputs(x, w, x_dtype, w_dtype, per_channel, bias):
    def ints(rng, shape, dtype):
        lo, hi = {"int8": (-128, 128), "uint8": (0, 256), "int16": (-2000, 2000), "uint16": (0, 4000)}[dtype]
        return rng.integers(lo, hi, shape).astype(dtype)

    def make(rng):
        arrays = [ints(rng, x, x_dtype), ints(rng, w, w_dtype), ints(rng, (), x_dtype),
                  ints(rng, (w[0],) if per_channel else (1,), w_dtype)]
        return arrays + ([rng.integers(-5000, 5000, (w[0],)).astype(np.int32)] if bias else [])
    return make


# (X shape, W shape, X dtype, W dtype, per-channel W zero points, bias, attrs)
CONV_INTEGER = [
    ((1, 1, 3, 3), (2, 1, 2, 2), "uint8", "uint8", True, False, {"pads": [1, 1, 1, 1]}),
    ((2, 3, 9, 11), (5, 3, 3, 3), "uint8", "int8", False, False, {"strides": [2, 1], "dilations": [1, 2]}),
    ((2, 8, 9, 11), (8, 2, 3, 3), "int8", "int8", True, True, {"group": 4, "pads": [1, 1, 1, 1]}),
    ((1, 5, 8, 9), (18, 5, 4, 3), "uint8", "uint8", True, True, {"auto_pad": "SAME_UPPER", "strides": [3, 2]}),
    ((2, 3, 17), (4, 3, 3), "int16", "int16", False, True, {"pads": [1, 2]}),
    ((1, 3, 4, 5, 6), (4, 3, 2, 3, 2), "uint8", "int8", True, False, {"pads": [1, 0, 1, 0, 1, 1]}),
    ((1, 32, 20, 20), (48, 32, 3, 3), "uint8", "int8", True, True, {"pads": [1, 1, 1, 1]}),  # large: tiled
    ((2, 32, 9, 9), (40, 16, 3, 3), "int8", "uint8", True, False, {"group": 2, "strides": [2, 1]}),  # tiled, grouped
]
for x, w, xt, wt, per_channel, bias, attrs in CONV_INTEGER:
    CASES.append(Case("conv_integer", _integer_inputs(x, w, xt, wt, per_channel, bias), attrs,
                      id=f"{x}*{w}-{xt}-{wt}{'-per-channel' if per_channel else ''}{'+b' if bias else ''}-{attrs}",
                      dtype=xt, exact=True))
