"""Cases for grid_sample, roi_align, deform_conv and col2im."""

import numpy as np

from op_cases import Case, inputs, rand

CASES = []

# grid_sample: every mode x padding x align_corners in 2-D, then 1-D and 3-D, float16/float64, a large one;
# grid coordinates reach past [-1, 1] so every padding mode is exercised
for mode in ("linear", "nearest", "cubic"):
    for padding in ("zeros", "border", "reflection"):
        for align in (0, 1):
            CASES.append(Case("grid_sample", inputs(rand(2, 3, 5, 6), rand(2, 4, 7, 2, low=-1.4, high=1.4)),
                              {"mode": mode, "padding_mode": padding, "align_corners": align},
                              id=f"2d-{mode}-{padding}-{align}", rtol=1e-4, atol=1e-5))
for mode in ("linear", "nearest", "cubic"):
    CASES.append(Case("grid_sample", inputs(rand(2, 2, 9), rand(2, 5, 1, low=-1.2, high=1.2)),
                      {"mode": mode, "padding_mode": "reflection"}, id=f"1d-{mode}", rtol=1e-4, atol=1e-5))
    CASES.append(Case("grid_sample", inputs(rand(1, 2, 3, 4, 5), rand(1, 2, 3, 4, 3, low=-1.2, high=1.2)),
                      {"mode": mode, "padding_mode": "border", "align_corners": 1}, id=f"3d-{mode}",
                      rtol=1e-4, atol=1e-5))
CASES.append(Case("grid_sample", inputs(rand(1, 2, 3, 4, 5), rand(1, 2, 3, 4, 3, low=-1.2, high=1.2)),
                  {"mode": "linear"}, id="3d-zeros", rtol=1e-4, atol=1e-5))
CASES.append(Case("grid_sample", inputs(rand(1, 2, 5, 6, dtype="float16"),
                                        rand(1, 3, 4, 2, low=-1.1, high=1.1, dtype="float16")),
                  {"mode": "cubic"}, id="f16", dtype="float16", rtol=2e-2, atol=2e-2))
CASES.append(Case("grid_sample", inputs(rand(1, 2, 5, 6, dtype="float64"),
                                        rand(1, 3, 4, 2, low=-1.1, high=1.1, dtype="float64")),
                  {"mode": "linear", "padding_mode": "reflection"}, id="f64", dtype="float64"))
CASES.append(Case("grid_sample", inputs(rand(2, 8, 64, 64), rand(2, 48, 48, 2, low=-1.0, high=1.0)),
                  {"mode": "linear"}, id="large", rtol=1e-4, atol=1e-5))
CASES.append(Case("grid_sample", inputs(rand(1, 1, 1, 5), rand(1, 2, 3, 2, low=-1.5, high=1.5)),
                  {"mode": "linear", "padding_mode": "reflection", "align_corners": 1}, id="one-row",
                  rtol=1e-4, atol=1e-5))


def _rois(n_images, n_rois, height, width):
    """Images, ROIs (x1, y1, x2, y2) inside and around them, and their batch indices."""
    def make(rng):
        x = rng.uniform(-2, 2, (n_images, 3, height, width)).astype(np.float32)
        lo = rng.uniform(-1, [width - 2, height - 2], (n_rois, 2))
        hi = lo + rng.uniform(0.5, [width * 0.8, height * 0.8], (n_rois, 2))
        rois = np.concatenate([lo, hi], axis=1).astype(np.float32)
        return [x, rois, rng.integers(0, n_images, n_rois).astype(np.int64)]
    return make


for mode in ("avg", "max"):
    for ctm in ("half_pixel", "output_half_pixel"):
        for ratio in (2, 0):
            CASES.append(Case("roi_align", _rois(2, 5, 12, 10),
                              {"mode": mode, "coordinate_transformation_mode": ctm, "sampling_ratio": ratio,
                               "output_height": 3, "output_width": 4, "spatial_scale": 0.9},
                              id=f"{mode}-{ctm}-ratio{ratio}", rtol=1e-4, atol=1e-5))
CASES.append(Case("roi_align", _rois(3, 40, 50, 60), {"output_height": 7, "output_width": 7, "sampling_ratio": 2,
                                                      "spatial_scale": 0.5}, id="large", rtol=1e-4, atol=1e-5))


def _deform(x, w, out, offset_group=1, bias=False, mask=False, scale=1.5):
    def make(rng):
        kh, kw = w[2:]
        arrays = [rng.uniform(-2, 2, x).astype(np.float32), rng.uniform(-1, 1, w).astype(np.float32),
                  rng.uniform(-scale, scale, (x[0], offset_group * kh * kw * 2, *out)).astype(np.float32)]
        if bias or mask:
            arrays.append(rng.uniform(-1, 1, w[:1]).astype(np.float32))
        if mask:
            arrays.append(rng.uniform(0, 1, (x[0], offset_group * kh * kw, *out)).astype(np.float32))
        return arrays
    return make


CASES += [
    Case("deform_conv", _deform((1, 1, 3, 3), (1, 1, 2, 2), (2, 2)), {}, id="basic", rtol=1e-4, atol=1e-5),
    Case("deform_conv", _deform((2, 4, 7, 8), (6, 2, 3, 3), (4, 4), offset_group=2, bias=True),
         {"group": 2, "offset_group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1]}, id="groups-bias",
         rtol=1e-4, atol=1e-5),
    Case("deform_conv", _deform((1, 3, 6, 5), (4, 3, 2, 3), (5, 2), mask=True),
         {"dilations": [2, 1], "pads": [1, 0, 0, 0], "strides": [1, 2]}, id="mask-dilation", rtol=1e-4, atol=1e-5),
    Case("deform_conv", _deform((2, 8, 16, 16), (16, 8, 3, 3), (16, 16), offset_group=4, mask=True, scale=3),
         {"offset_group": 4, "pads": [1, 1, 1, 1]}, id="large", rtol=1e-4, atol=1e-5),
]


def _cols(n, c, image, block, attrs):
    nd = len(image)
    d = attrs.get("dilations", [1] * nd)
    s = attrs.get("strides", [1] * nd)
    p = attrs.get("pads", [0] * 2 * nd)
    blocks = [(image[i] + p[i] + p[nd + i] - d[i] * (block[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    return rand(n, c * int(np.prod(block)), int(np.prod(blocks)))


for image, block, attrs in [([5, 5], [1, 5], {}), ([6, 6], [2, 2], {"dilations": [1, 5]}),
                            ([5, 5], [1, 5], {"pads": [0, 1, 0, 1]}), ([5, 5], [3, 3], {"strides": [2, 2]}),
                            ([3, 4, 5], [1, 2, 2], {}), ([9], [3], {"strides": [2], "pads": [1, 2], "dilations": [2]}),
                            ([20, 24], [3, 3], {"strides": [2, 2], "pads": [1, 1, 1, 1]})]:
    attrs = {"image_shape": image, "block_shape": block, **attrs}
    CASES.append(Case("col2im", inputs(_cols(2, 3, image, block, attrs)), attrs, id=f"{image}-{block}-{attrs}"))
CASES.append(Case("col2im", inputs(_cols(1, 2, [3, 3, 2, 2], [2, 2, 1, 2], {})),
                  {"image_shape": [3, 3, 2, 2], "block_shape": [2, 2, 1, 2]}, id="4d-host-only"))
