"""Cases for quantize_linear, dequantize_linear, requantize and dynamic_quantize_linear.

Quantized results are integers compared exactly while the oracle divides in float64: inputs are built as
``scale * (k + u)`` with scales that are powers of two and ``|u| <= 0.4`` (or exactly 0.5, to see halves round
to even), so the rounding never depends on the float width.
"""

import numpy as np

from op_cases import Case, inputs, rand

CASES = []

_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}


def _scales(rng, shape):
    return (2.0 ** rng.integers(-6, 2, shape)).astype(np.float32)


def _quantize_inputs(x_shape, s_shape, zp, axis=1, block=0, halves=False, x_dtype="float32"):
    """x, scale[, zero point]: x lands between the quantized levels (or on their halves) of its scale."""
    def make(rng):
        scale = _scales(rng, s_shape)
        if block:
            full = np.repeat(scale, block, axis=axis).take(np.arange(x_shape[axis]), axis=axis)
        elif len(s_shape) and s_shape[0] > 1:
            full = scale.reshape([s_shape[0] if d == axis % len(x_shape) else 1 for d in range(len(x_shape))])
        else:
            full = scale.reshape(())
        k = rng.integers(-300, 300, x_shape)
        u = np.full(x_shape, 0.5) if halves else rng.uniform(-0.4, 0.4, x_shape)
        arrays = [((k + u) * full).astype(x_dtype), scale]
        if zp:
            lo, hi = _RANGES[zp]
            arrays.append(rng.integers(lo, hi + 1, s_shape).astype(zp))
        return arrays
    return make


for zp in ("uint8", "int8", "uint16", "int16"):
    CASES.append(Case("quantize_linear", _quantize_inputs((5, 7), (), zp), id=f"tensor-{zp}"))
CASES.append(Case("quantize_linear", _quantize_inputs((40,), (1,), None), id="no-zp-uint8"))
CASES.append(Case("quantize_linear", _quantize_inputs((40,), (), None), {"output_dtype": "int8"}, id="no-zp-int8"))
CASES.append(Case("quantize_linear", _quantize_inputs((50,), (), "int8", halves=True), id="halves-to-even"))
CASES.append(Case("quantize_linear", _quantize_inputs((2, 3, 4, 5), (3,), "uint8"), id="axis1"))
CASES.append(Case("quantize_linear", _quantize_inputs((2, 3, 4, 5), (5,), "int8", axis=-1), {"axis": -1},
                  id="axis-last"))
CASES.append(Case("quantize_linear", _quantize_inputs((6, 4), (6,), "int16", axis=0), {"axis": 0}, id="axis0"))
CASES.append(Case("quantize_linear", _quantize_inputs((3, 8), (3, 4), "uint8", axis=1, block=2),
                  {"axis": 1, "block_size": 2}, id="blocked"))
CASES.append(Case("quantize_linear", _quantize_inputs((2, 7, 3), (2, 3, 3), "int8", axis=1, block=3),
                  {"axis": 1, "block_size": 3}, id="blocked-ragged"))
CASES.append(Case("quantize_linear", _quantize_inputs((5, 6), (5, 2), None, axis=1, block=3),
                  {"axis": 1, "block_size": 3, "output_dtype": "int16"}, id="blocked-no-zp"))
CASES.append(Case("quantize_linear", _quantize_inputs((4, 9), (), "uint8", x_dtype="float16"),
                  id="f16", dtype="float16"))
CASES.append(Case("quantize_linear", _quantize_inputs((4, 9), (), "int8", x_dtype="float64"),
                  id="f64", dtype="float64"))
CASES.append(Case("quantize_linear", lambda rng: [rng.uniform(-1e6, 1e6, (64,)).astype(np.float32),
                                                  np.array(0.5, np.float32), np.array(3, np.uint8)],
                  id="saturates"))
CASES.append(Case("quantize_linear", _quantize_inputs((300, 301), (301,), "int8", axis=1), id="large"))


def _dequantize_inputs(x_shape, s_shape, dtype, zp=True, axis=1, block=0, scale_dtype="float32"):
    def make(rng):
        lo, hi = _RANGES.get(dtype, (-1000, 1000))
        arrays = [rng.integers(lo, hi + 1, x_shape).astype(dtype),
                  rng.uniform(0.01, 2.0, s_shape).astype(scale_dtype)]
        if zp:
            arrays.append(rng.integers(lo, hi + 1, s_shape).astype(dtype))
        return arrays
    return make


for dt in ("uint8", "int8", "uint16", "int16", "int32"):
    CASES.append(Case("dequantize_linear", _dequantize_inputs((4, 6), (), dt), id=f"tensor-{dt}"))
CASES.append(Case("dequantize_linear", _dequantize_inputs((30,), (1,), "uint8", zp=False), id="no-zp"))
CASES.append(Case("dequantize_linear", _dequantize_inputs((2, 3, 4, 5), (3,), "int8"), id="axis1"))
CASES.append(Case("dequantize_linear", _dequantize_inputs((2, 3, 4, 5), (4,), "uint8"), {"axis": -2},
                  id="axis-neg"))
CASES.append(Case("dequantize_linear", _dequantize_inputs((1, 4, 3, 2), (1, 2, 3, 2), "uint8", block=2),
                  {"block_size": 2}, id="blocked"))
CASES.append(Case("dequantize_linear", _dequantize_inputs((5, 7), (5, 3), "int16", block=3),
                  {"axis": 1, "block_size": 3}, id="blocked-ragged"))
CASES.append(Case("dequantize_linear", _dequantize_inputs((3, 5), (), "int8", scale_dtype="float16"),
                  id="f16-scale", dtype="float16"))
CASES.append(Case("dequantize_linear", _dequantize_inputs((3, 5), (), "uint8"), {"output_dtype": "float16"},
                  id="f16-out", dtype="float16"))
CASES.append(Case("dequantize_linear", _dequantize_inputs((3, 5), (5,), "int8", scale_dtype="float64"),
                  {"axis": 1}, id="f64", dtype="float64"))
CASES.append(Case("dequantize_linear", _dequantize_inputs((256, 300), (300,), "uint8"), id="large"))


def _requantize_inputs(acc_shape, m_shape, zp_shape, zp):
    def make(rng):
        lo, hi = _RANGES[zp]
        arrays = [rng.integers(-20000, 20000, acc_shape).astype(np.int32),
                  rng.uniform(1e-4, 1e-2, m_shape).astype(np.float32)]
        if zp_shape is not None:
            arrays.append(rng.integers(lo, hi + 1, zp_shape).astype(zp))
        return arrays
    return make


CASES.append(Case("requantize", _requantize_inputs((4, 5), (), (), "uint8"), id="tensor"))
CASES.append(Case("requantize", _requantize_inputs((2, 4, 5), (4, 1), (1,), "int8"), id="per-row"))
CASES.append(Case("requantize", _requantize_inputs((2, 3, 4, 4), (1, 3, 1, 1), (), "uint8"), id="per-channel"))
CASES.append(Case("requantize", _requantize_inputs((6, 7), (7,), None, "int16"), {"to": "int16"}, id="no-zp"))


def _dynamic_inputs(shape, low):
    """x spanning exactly [low, low + 255] / 16 (a scale of 1/16) between its quantized levels."""
    def make(rng):
        k = rng.integers(low + 1, low + 255, shape).astype(np.float64)
        x = (k + rng.uniform(-0.4, 0.4, shape)) / 16.0
        x.reshape(-1)[:2] = [low / 16.0, (low + 255) / 16.0]
        return [x.astype(np.float32)]
    return make


CASES.append(Case("dynamic_quantize_linear", _dynamic_inputs((7, 9), 0), id="positive"))
CASES.append(Case("dynamic_quantize_linear", _dynamic_inputs((3, 50), -64), id="mixed"))
CASES.append(Case("dynamic_quantize_linear", _dynamic_inputs((200, 130), -255), id="negative-large"))
CASES.append(Case("dynamic_quantize_linear", inputs(rand(5, 4, low=-3.0, high=3.0)), id="random"))
