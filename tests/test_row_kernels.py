"""The row kernels (``kernels/ops/rows.py``: softmax, log-softmax, Lp, layer, RMS and group normalization) in both
forms, a work-group per row and a work item per row (``grouped_rows``: CPU devices take the item form for many long
rows, GPUs the group form for every long row), on every device against the float64 NumPy reference, outputs
poisoned first; rows along a middle axis too."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import TensorType, get
from devicelayer.kernels.ops.rows import MIN_LANES, grouped_rows, row_lanes
from devicelayer.ops import names  # noqa: F401  (registers the op library)

#: (shape, axis): few long rows, many long rows, many short rows, long rows strided along a middle axis; in the group
#: form, rows of 32 and 64 items, 8 and 4 to a group (the last group part empty), and a group a row
SHAPES = [((3, 300), -1), ((2, 4, 16, 130), -1), ((40, 9), -1), ((4, 140, 6), 1), ((7, 128), -1),
          ((5, 150), -1), ((5, 1000), -1)]


def _run(device, op, arrays, attrs):
    checked, outs = get(op).prepare([TensorType(a.shape, a.dtype) for a in arrays], dict(attrs))
    want = get(op).reference([a.astype(np.float64) for a in arrays], checked)
    out = [dl.tensor(np.full(t.shape, np.nan, t.dtype), device) for t in outs]
    dl.ops.run(op, [dl.tensor(a, device) for a in arrays], out=out, **attrs)
    for o, w in zip(out, want):
        got = o.numpy()
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got.astype(np.float64), w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("shape, axis", SHAPES)
@pytest.mark.parametrize("op", ["softmax", "log_softmax", "lp_normalization"])
def test_axis_rows_match_the_float64_reference(device, rng, op, shape, axis):
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    attrs = {"axis": axis} if op != "lp_normalization" else {"axis": axis, "p": 2}
    _run(device, op, [x], attrs)


@pytest.mark.parametrize("shape", [(3, 300), (2, 4, 16, 130), (40, 9), (7, 128), (5, 150)])
@pytest.mark.parametrize("op", ["layer_normalization", "rms_normalization"])
def test_normalized_rows_match_the_float64_reference(device, rng, op, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, shape[-1:]).astype(np.float32)
    arrays = [x, scale] + ([rng.standard_normal(shape[-1:]).astype(np.float32)] if op == "layer_normalization"
                           else [])
    _run(device, op, arrays, {"axis": -1})


@pytest.mark.parametrize("shape, groups", [((2, 6, 30, 30), 3), ((8, 4, 64), 2), ((64, 4, 40), 2)])
def test_group_normalization_matches_the_float64_reference(device, rng, shape, groups):
    x = rng.standard_normal(shape).astype(np.float32)
    c = shape[1]
    _run(device, "group_normalization", [x, rng.uniform(0.5, 1.5, c).astype(np.float32),
                                         rng.standard_normal(c).astype(np.float32)], {"num_groups": groups})


def test_both_row_forms_are_taken_where_they_are_chosen(device):
    """Few long rows take the group form everywhere; many long rows the item form on CPU devices only."""
    info = device.info
    if info.kernel_language == "python":
        pytest.skip("the host runs NumPy, not the row kernels")
    assert grouped_rows(3, 300, info) and not grouped_rows(40, 9, info)
    assert grouped_rows(2 * 4 * 16 * 4096, 130, info) == (info.device_type != "cpu")


def test_short_rows_share_a_work_group():
    """Rows shorter than the group get a power-of-two run of items (about four elements each, never fewer than
    MIN_LANES), several rows a group; long rows the whole group."""
    assert row_lanes(128, 256) == 32 and row_lanes(150, 256) == 64 and row_lanes(300, 256) == 128
    assert row_lanes(1000, 256) == 256 and row_lanes(100000, 256) == 256
    assert row_lanes(129, 256) == 64 and row_lanes(16, 256) == MIN_LANES and row_lanes(128, 16) == 16
    for k in range(1, 5000, 37):
        lanes = row_lanes(k, 256)
        assert lanes & (lanes - 1) == 0 and 256 % lanes == 0
