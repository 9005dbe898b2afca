"""The host's oneDNN route for attention (``backends/host/attention.py``): query/key/value shapes with and without
grouped key heads, k given as kᵀ, float masks of every broadcast, rows masked everywhere (zeros, or NaN with
``nan_rows``), NaN and infinite scores, a product large enough for oneDNN's team, against the op's float64 NumPy
reference with poisoned outputs; what oneDNN does not compute as the op defines it (causal, windows, softcap,
boolean or short masks, a second output, float64) runs the reference and stays right; misuse keeps its typed error.

Skipped as a whole where oneDNN is not installed (``DEVICELAYER_REQUIRE=onednn`` makes that a failure).
"""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.backends.host import dnnl as host_dnnl
from devicelayer.kernels.op import TensorType, get
from devicelayer.ops import names  # noqa: F401  (registers the op library)

pytestmark = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")


@pytest.fixture
def runs(monkeypatch):
    """Counts of oneDNN attention layers bound in this test."""
    from devicelayer.backends.host import dnnl_layers

    count = {"bind": 0}
    orig = dnnl_layers.AttentionLayer.bind

    def counted(self, *args, **kw):
        count["bind"] += 1
        return orig(self, *args, **kw)
    monkeypatch.setattr(dnnl_layers.AttentionLayer, "bind", counted)
    return count


def _qkv(rng, B, Hq, Hk, Sq, Skv, Dk, Dv, k_transposed=False):
    q = rng.standard_normal((B, Hq, Sq, Dk))
    k = rng.standard_normal((B, Hk, Dk, Skv) if k_transposed else (B, Hk, Skv, Dk))
    v = rng.standard_normal((B, Hk, Skv, Dv))
    return [a.astype(np.float32) for a in (q, k, v)]


def _run_poisoned(arrays, attrs):
    """The op run eagerly on the host into outputs filled with NaN first; also the float64 reference."""
    op = get("attention")
    checked, outs = op.prepare([TensorType(a.shape, a.dtype) for a in arrays], dict(attrs))
    want = op.reference([a.astype(np.float64) if a.dtype.kind == "f" else a for a in arrays], checked)
    host = dl.device("host")
    out = [dl.tensor(np.full(t.shape, np.nan, t.dtype), host) for t in outs]
    dl.ops.run("attention", [dl.tensor(a, host) for a in arrays], out=out, **attrs)
    accepts = host.vendor_op("attention").accepts([TensorType(a.shape, a.dtype) for a in arrays], outs, checked)
    return [o.numpy() for o in out], want, accepts


def _close(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape
        assert np.array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("B, Hq, Hk, Sq, Skv, Dk, Dv", [
    (1, 4, 4, 64, 64, 16, 16), (2, 3, 3, 5, 7, 4, 6), (2, 6, 2, 9, 11, 8, 8), (1, 2, 1, 1, 33, 32, 16),
])
@pytest.mark.parametrize("k_transposed", [False, True])
def test_attention_through_onednn_matches_the_float64_reference(rng, runs, B, Hq, Hk, Sq, Skv, Dk, Dv,
                                                                 k_transposed):
    arrays = _qkv(rng, B, Hq, Hk, Sq, Skv, Dk, Dv, k_transposed)
    got, want, accepts = _run_poisoned(arrays, {"scale": 0.3, "k_transposed": k_transposed})
    _close(got, want)
    assert accepts and runs["bind"] == 1


@pytest.mark.parametrize("mask_shape", [(7,), (5, 7), (2, 1, 1, 7), (1, 3, 5, 7), (2, 3, 5, 7)])
@pytest.mark.parametrize("nan_rows", [False, True])
def test_float_masks_and_rows_masked_everywhere(rng, runs, mask_shape, nan_rows):
    arrays = _qkv(rng, 2, 3, 3, 5, 7, 4, 4)
    mask = np.where(rng.random(mask_shape) < 0.3, -np.inf, rng.standard_normal(mask_shape)).astype(np.float32)
    mask[..., 0] = -np.inf
    if len(mask_shape) > 1:
        mask[..., -1, :] = -np.inf  # a query row (or, broadcast, every row) masked everywhere
    got, want, accepts = _run_poisoned([*arrays, mask], {"nan_rows": nan_rows})
    _close(got, want)
    assert accepts and runs["bind"] == 1
    if len(mask_shape) > 1:
        assert np.isnan(got[0]).any() == nan_rows and (nan_rows or np.all(got[0][..., -1, :] == 0))


@pytest.mark.parametrize("where", ["q_nan", "k_inf", "v_nan"])
def test_nan_and_infinite_inputs_give_the_reference_values(rng, runs, where):
    q, k, v = _qkv(rng, 1, 2, 2, 6, 8, 4, 4)
    {"q_nan": q, "k_inf": k, "v_nan": v}[where][0, 1, 2, 3] = np.nan if where != "k_inf" else np.inf
    got, want, accepts = _run_poisoned([q, k, v], {})
    _close(got, want)
    assert accepts and np.isnan(got[0]).any()


def test_a_product_on_onednn_s_team_matches_the_reference(rng, runs):
    """Large enough (``conv.small_flops``) to run on the OpenMP team, not the calling thread alone."""
    from devicelayer.backends.host.conv import small_flops

    arrays = _qkv(rng, 2, 8, 8, 128, 128, 64, 64)
    assert 2 * 2 * 8 * 128 * 128 * 128 >= small_flops()
    got, want, accepts = _run_poisoned(arrays, {})
    _close(got, want)
    assert accepts and runs["bind"] == 1


@pytest.mark.parametrize("case", ["causal", "window", "softcap", "bool_mask", "short_mask", "qk_output",
                                  "grouped_heads_row_mask", "float64"])
def test_what_onednn_does_not_compute_runs_the_reference(rng, runs, case):
    q, k, v = _qkv(rng, 2, 4 if case == "grouped_heads_row_mask" else 2, 2, 5, 7, 4, 4)
    arrays, attrs = [q, k, v], {}
    if case == "causal":
        attrs["is_causal"] = True
    elif case == "window":
        attrs["left_window_size"] = 2
    elif case == "softcap":
        attrs["softcap"] = 3.0
    elif case == "bool_mask":
        arrays.append(rng.random((5, 7)) < 0.7)
    elif case == "short_mask":
        arrays.append(rng.standard_normal((5, 4)).astype(np.float32))
    elif case == "qk_output":
        attrs["qk_matmul_output_mode"] = 3
    elif case == "grouped_heads_row_mask":  # a mask per query row under grouped heads: not one product's rows
        arrays.append(rng.standard_normal((5, 7)).astype(np.float32))
    else:
        arrays = [a.astype(np.float64) for a in arrays]
    got, want, accepts = _run_poisoned(arrays, attrs)
    _close(got, want)
    assert not accepts and runs["bind"] == 0


def test_misuse_keeps_its_typed_error_and_the_device_usable(rng):
    host = dl.device("host")
    q, k, v = _qkv(rng, 1, 2, 2, 3, 5, 4, 4)
    with pytest.raises(dl.InvalidArgument, match="head size"):  # kᵀ's shape given as k's
        dl.ops.run("attention", [dl.tensor(a, host) for a in (q, k, v)], k_transposed=True)
    with pytest.raises(dl.InvalidArgument, match="nan_rows"):
        dl.ops.run("attention", [dl.tensor(a, host) for a in (q, k, v)], nan_rows="yes")
    got, want, _ = _run_poisoned([q, k, v], {})
    _close(got, want)


@pytest.mark.parametrize("flags", [(1, 1, 1, 1), (1, 0, 0, 1), (0, 1, 1, 0)])
@pytest.mark.parametrize("Hk", [3, 1])
def test_sequence_major_operands_through_onednn(rng, runs, flags, Hk):
    """q, k, v and the output as (B, S, H, D) where flagged: oneDNN reads and writes them through strides; with
    grouped key heads and q or the output sequence-major (no one strided block of rows) the reference runs."""
    q, k, v = _qkv(rng, 2, 3, Hk, 5, 7, 8, 4)
    arrays = [np.ascontiguousarray(np.swapaxes(a, 1, 2)) if f else a for a, f in zip((q, k, v), flags)]
    mask = rng.standard_normal((2, 1, 1, 7)).astype(np.float32)
    got, want, accepts = _run_poisoned([*arrays, mask], {"sequence_major": flags})
    _close(got, want)
    grouped_rows = Hk != 3 and (flags[0] or flags[3])
    assert accepts == (not grouped_rows) and runs["bind"] == (0 if grouped_rows else 1)
    plain = get("attention").reference([a.astype(np.float64) for a in (q, k, v, mask)],
                                       get("attention").prepare([TensorType(a.shape, a.dtype)
                                                                 for a in (q, k, v, mask)], {})[0])[0]
    np.testing.assert_allclose(got[0], np.swapaxes(plain, 1, 2) if flags[3] else plain, rtol=1e-5, atol=1e-5)
