"""CUDA's float16, bfloat16 and float32 attention on tensor cores (backends/cuda/flash_attention.py): head sizes 8 to 128,
ragged query and key blocks, grouped heads, every layout, bool and float masks (shorter than the keys, -inf entries,
rows masked whole as zeros or NaN), causal with an offset, windows, buffers too little aligned for 16-byte loads;
the calls it leaves to the op's kernels; a plan whose attention pattern runs through it. Every result against
float64 with the outputs poisoned."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import TensorType, get
from devicelayer.tensors import Tensor
from devicelayer.dtypes import dtype as as_dtype
from op_cases.attention import _attn

BF16 = as_dtype("bfloat16")

CUDA = [d for d in dl.devices() if d.info.backend == "cuda"]
pytestmark = pytest.mark.skipif(not CUDA, reason="no CUDA device")
A = "attention"

CASES = {  # (``_attn``'s sizes, the call's attributes)
    "gpt2 heads, causal": (dict(B=2, Hq=4, Hk=4, Sq=128, Skv=128, Dk=64, Dv=64), {"is_causal": True}),
    "ragged blocks, float mask with -inf": (
        dict(B=2, Hq=3, Hk=3, Sq=70, Skv=75, Dk=32, Dv=32, mask=((1, 1, 70, 75), "float"), neginf=True), {}),
    "rows masked whole as NaN": (
        dict(B=1, Hq=2, Hk=2, Sq=33, Skv=40, Dk=16, Dv=16, mask=((1, 2, 33, 40), "float"), neginf=True,
             full_row=True), {"nan_rows": True}),
    "rows masked whole as zeros, bool mask": (
        dict(B=2, Hq=4, Hk=2, Sq=40, Skv=70, Dk=64, Dv=64, mask=((2, 4, 40, 70), "bool"), full_row=True), {}),
    "mask shorter than the keys": (
        dict(B=1, Hq=2, Hk=2, Sq=20, Skv=90, Dk=32, Dv=32, mask=((20, 60), "float")), {}),
    "grouped heads, causal with an offset": (
        dict(B=2, Hq=6, Hk=2, Sq=130, Skv=200, Dk=128, Dv=128), {"is_causal": True, "offset": 70}),
    "windows and a scale": (
        dict(B=1, Hq=2, Hk=1, Sq=64, Skv=64, Dk=48, Dv=48), {"left_window_size": 5, "right_window_size": 3, "scale": 0.3}),
    "one key block, many query tiles": (dict(B=1, Hq=1, Hk=1, Sq=300, Skv=16, Dk=16, Dv=16), {}),
}
#: float32 only (its products take 8 of the head at a time, the half types' 16)
F32_CASES = {
    "head size 40, ragged blocks": (dict(B=2, Hq=3, Hk=1, Sq=45, Skv=77, Dk=40, Dv=40), {"is_causal": True}),
    "head size 8, bool mask": (dict(B=1, Hq=2, Hk=2, Sq=17, Skv=33, Dk=8, Dv=8, mask=((1, 2, 17, 33), "bool")), {}),
    "whisper's heads": (dict(B=2, Hq=6, Hk=6, Sq=150, Skv=150, Dk=64, Dv=64), {}),
}


def _reference(arrays, attrs):
    op = get(A)
    wide = [a if a.dtype == np.bool_ or a.dtype.kind in "iu" else a.astype(np.float64) for a in arrays]
    checked, _ = op.prepare([TensorType(a.shape, a.dtype) for a in wide], dict(attrs))
    with np.errstate(all="ignore"):
        return op.reference(wide, checked)[0]


def _accepts(arrays, attrs):
    op = get(A)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    checked, outs = op.prepare(types, dict(attrs))
    vendor = CUDA[0].vendor_op(A)
    return vendor is not None and vendor.accepts(types, outs, checked)


def _close(got, want):
    assert got.shape == want.shape
    # (bfloat16 keeps 8 bits of mantissa, float16 11; float32 runs as three TF32 products, to float32's tolerance)
    tol = {BF16: 3e-2, np.dtype(np.float16): 1e-2}.get(got.dtype, 2e-5)
    got = got.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=tol, atol=tol)


def _in(dtype, arrays):
    """The arrays with their float16 ones in ``dtype``."""
    return [a.astype(dtype) if a.dtype == np.float16 else a for a in arrays]


def _run(arrays, attrs, out_shape):
    dev = CUDA[0]
    out = dl.tensor(np.full(out_shape, np.nan, arrays[0].dtype), dev)
    dl.ops.run(A, [dl.tensor(a, dev) for a in arrays], out=[out], **attrs)
    return out.numpy()


@pytest.mark.parametrize("dtype, case", [(t, c) for t in ("float16", "bfloat16", "float32") for c in CASES] +
                         [("float32", c) for c in F32_CASES])
def test_against_float64(rng, case, dtype):
    sizes, attrs = {**CASES, **F32_CASES}[case]
    if dtype == "float32":  # (random float32 values: every bit of the mantissa, which one TF32 product would lose)
        arrays = _attn(**sizes, dtype="float32")(rng)
    else:
        arrays = _in(dtype, _attn(**sizes, dtype="float16")(rng))
    assert _accepts(arrays, attrs)
    want = _reference(arrays, attrs)
    _close(_run(arrays, attrs, want.shape), want)


@pytest.mark.parametrize("flags", [(1, 1, 1, 1), (1, 0, 1, 0), (0, 1, 0, 1)])
def test_sequence_major_operands(rng, flags):
    arrays = _attn(B=2, Hq=4, Hk=2, Sq=50, Skv=81, Dk=64, Dv=64, mask=((2, 1, 50, 81), "bool"),
                   dtype="float16")(rng)
    want = _reference(arrays, {"is_causal": True, "offset": 31})
    given = [np.ascontiguousarray(np.swapaxes(a, 1, 2)) if f else a for a, f in zip(arrays[:3], flags)] + arrays[3:]
    attrs = {"is_causal": True, "offset": 31, "sequence_major": flags}
    assert _accepts(given, attrs)
    got = _run(given, attrs, np.swapaxes(want, 1, 2).shape if flags[3] else want.shape)
    _close(np.swapaxes(got, 1, 2) if flags[3] else got, want)


def test_buffers_too_little_aligned_for_wide_loads(rng):
    """Operands at 2-byte offsets inside larger buffers: the kernel's one-element loads."""
    dev = CUDA[0]
    arrays = _attn(B=1, Hq=2, Hk=2, Sq=40, Skv=50, Dk=32, Dv=32, dtype="float16")(rng)
    want = _reference(arrays, {})
    views = []
    for a in arrays:
        whole = dl.tensor(np.concatenate([np.zeros(1, a.dtype), a.ravel()]), dev)
        views.append(Tensor(whole.buffer.view(a.dtype.itemsize, a.nbytes, a.dtype), a.shape, a.dtype, whole.ready))
    assert _accepts(arrays, {})
    held = dl.tensor(np.full(want.size + 1, np.nan, np.float16), dev)
    out = Tensor(held.buffer.view(2, want.size * 2, np.float16), want.shape, np.float16, held.ready)
    dl.ops.run(A, views, out=[out])[0].ready.wait()
    _close(held.numpy()[1:].reshape(want.shape), want)


@pytest.mark.parametrize("why, make, attrs", [
    ("head size not a multiple of 16", _attn(Sq=32, Skv=32, Dk=40, Dv=40, dtype="float16"), {}),
    ("float32 head size not a multiple of 8", _attn(Sq=32, Skv=32, Dk=36, Dv=36), {}),
    ("float32 heads over 128", _attn(Sq=32, Skv=32, Dk=136, Dv=136), {}),
    ("head sizes differ", _attn(Sq=32, Skv=32, Dk=64, Dv=32, dtype="float16"), {}),
    ("heads over 128", _attn(Sq=32, Skv=32, Dk=144, Dv=144, dtype="float16"), {}),
    ("decoding rows", _attn(Sq=4, Skv=32, Dk=64, Dv=64, dtype="float16"), {}),
    ("softcap", _attn(Sq=32, Skv=32, Dk=64, Dv=64, dtype="float16"), {"softcap": 2.0}),
    ("a second output", _attn(Sq=32, Skv=32, Dk=64, Dv=64, dtype="float16"), {"qk_matmul_output_mode": 1}),
    ("nonpad_kv_seqlen", _attn(B=2, Sq=32, Skv=32, Dk=64, Dv=64, nonpad=[30, 12], dtype="float16"), {}),
])
def test_calls_left_to_the_op_kernels_still_match(rng, why, make, attrs):
    arrays = make(rng)
    assert not _accepts(arrays, attrs), why
    op = get(A)
    checked, outs = op.prepare([TensorType(a.shape, a.dtype) for a in arrays], dict(attrs))
    dev = CUDA[0]
    got = [dl.tensor(np.full(t.shape, np.nan, t.dtype), dev) for t in outs]
    dl.ops.run(A, [dl.tensor(a, dev) for a in arrays], out=got, **attrs)
    tol = 1e-2 if arrays[0].dtype == np.float16 else 2e-5
    np.testing.assert_allclose(got[0].numpy().astype(np.float64), _reference(arrays, attrs), rtol=tol, atol=tol)


def test_bfloat16_inputs_with_a_float16_mask_are_left_to_the_op_kernels(rng):
    arrays = _in(BF16, _attn(Sq=32, Skv=32, Dk=64, Dv=64, mask=((32, 32), "float"), dtype="float16")(rng))
    assert _accepts(arrays, {})
    try:
        taken = _accepts(arrays[:3] + [arrays[3].astype(np.float16)], {})
    except dl.InvalidArgument:  # (the op refuses the mix itself)
        taken = False
    assert not taken


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_a_plan_runs_its_attention_pattern_through_the_kernel(rng, dtype):
    """Q·Kᵀ scaled, a causal mask added, softmax, ·V at batch 1: the pattern becomes the attention op, which the
    kernel runs (where cuBLAS's products would stay for the op's own kernels at this size)."""
    from devicelayer.kernels.runner import vendor_of

    B, H, S, D = 1, 4, 128, 64
    t = as_dtype(dtype)
    g = dl.Graph()
    q, k, v = (g.input(n, (B, H, S, D), t) for n in "qkv")
    s = g.mul(g.matmul(q, g.transpose(k, perm=[0, 1, 3, 2])), g.constant(np.array(1 / np.sqrt(D), t)))
    s = g.add(s, g.constant(np.triu(np.full((S, S), -np.inf), 1).astype(t)))
    g.output("y", g.matmul(g.softmax(s, axis=-1), v))
    plan = g.compile([CUDA[0]])
    try:
        [node] = plan.graph.needed()
        assert node.op == A
        [step] = [st for st in plan._prepared.steps if st.kind == "node"]
        assert type(vendor_of(step.op_plan)).__name__ == "FlashAttention"
        feeds = {n: rng.uniform(-1, 1, (B, H, S, D)).astype(t) for n in "qkv"}
        mask = np.triu(np.full((S, S), -np.inf), 1)
        want = _reference([feeds["q"], feeds["k"], feeds["v"], mask], {})
        _close(plan(**feeds)["y"], want)
    finally:
        plan.release()


@pytest.mark.parametrize("out_major", [0, 1])
def test_packed_operands(rng, out_major):
    """q, k and v as the heads of one (B, S, (Hq + 2·Hk)·D) tensor (``packed_heads``): read where they lie."""
    arrays = _attn(B=2, Hq=6, Hk=2, Sq=90, Skv=90, Dk=64, Dv=64, mask=((2, 1, 1, 90), "bool"), dtype="float16")(rng)
    want = _reference(arrays, {"is_causal": True})
    q, k, v = arrays[:3]
    row = np.concatenate([np.swapaxes(t, 1, 2) for t in (q, k, v)], axis=2).reshape(2, 90, -1)
    row = np.ascontiguousarray(row)
    given = [row, row, row, arrays[3]]
    attrs = {"is_causal": True, "packed_heads": (6, 2), "sequence_major": (0, 0, 0, out_major)}
    assert _accepts(given, attrs)
    got = _run(given, attrs, np.swapaxes(want, 1, 2).shape if out_major else want.shape)
    _close(np.swapaxes(got, 1, 2) if out_major else got, want)
