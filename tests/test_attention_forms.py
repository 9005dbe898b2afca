"""Attention's four plans (``kernels/ops/attention.py``: the fused kernel for decoding, the tiled and the blocked
kernels for longer query blocks, the composition of products and a row kernel), each forced on every kernel device
against the float64 reference, outputs poisoned first: the op cases, and long query blocks over several tiles and
key blocks (ragged ends, causal tiles cut short, padded keys, keys given transposed, empty rows as zeros or NaN,
grouped heads, the largest head size, the qk outputs, half precision); operands and output sequence-major."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import TensorType, get
from devicelayer.kernels.ops import attention as attention_op
from devicelayer.kernels.runner import run
from devicelayer.ops import names  # noqa: F401  (registers the library)
from devicelayer.tensors import tensor
from op_cases import Case, reference64
from op_cases.attention import CASES as OP_CASES
from op_cases.attention import _attn
from test_ops import TOL, poisoned



def _kt(make):
    """A case maker whose k is given transposed, (B, Hk, Dk, Skv)."""
    def made(rng):
        arrays = make(rng)
        arrays[1] = np.ascontiguousarray(np.swapaxes(arrays[1], 2, 3))
        return arrays
    return made


A = "attention"
LONG = [
    Case(A, _attn(B=2, Hq=4, Hk=2, Sq=70, Skv=75, Dk=64, Dv=48, mask=((1, 1, 70, 75), "float"), neginf=True,
                  full_row=True), {"nan_rows": True}, id="gqa-mask-nan-rows"),
    Case(A, _attn(B=2, Hq=2, Hk=2, Sq=130, Skv=135, Dk=32, Dv=32), {"is_causal": True, "offset": 5},
         id="causal-offset-tiles-cut"),
    Case(A, _attn(B=2, Hq=3, Hk=1, Sq=40, Skv=75, Dk=16, Dv=24, mask=((2, 3, 40, 60), "bool"), full_row=True,
                  nonpad=[75, 30]), {"is_causal": True}, id="nonpad-causal-empty-rows"),
    Case(A, _kt(_attn(B=1, Hq=4, Hk=4, Sq=50, Skv=77, Dk=64, Dv=64, mask=((50, 77), "float"))),
         {"k_transposed": True, "scale": 0.2}, id="k-transposed"),
    Case(A, _attn(B=1, Hq=2, Hk=2, Sq=33, Skv=40, Dk=128, Dv=128), {"softcap": 3.0}, id="largest-heads"),
    Case(A, _attn(B=1, Hq=2, Hk=2, Sq=21, Skv=37, Dk=3, Dv=5, mask=((2, 1, 37), "float")),
         {"left_window_size": 4, "right_window_size": 2}, id="odd-heads-window"),
    Case(A, _attn(B=2, Hq=2, Hk=1, Sq=20, Skv=45, Dk=16, Dv=16, mask=((20, 45), "float")),
         {"is_causal": True, "offset": 25, "qk_matmul_output_mode": 2}, id="causal-qk2"),
    Case(A, _attn(B=1, Hq=2, Hk=2, Sq=40, Skv=70, Dk=32, Dv=32), {"softcap": 2.0, "qk_matmul_output_mode": 1},
         id="qk1"),
    Case(A, _attn(B=1, Hq=2, Hk=2, Sq=40, Skv=70, Dk=32, Dv=32, mask=((40, 70), "float"), dtype="float16"),
         {"is_causal": True, "offset": 30}, id="f16", dtype="float16"),
]
CASES = OP_CASES + LONG


def _forced_run(device, case, arrays, form, lanes=None, rows=None):
    """Run ``case`` on ``device`` with ``form`` forced (the tiled kernel with ``lanes`` items a row, the blocked one
    with ``rows`` rows an item, where given); the outputs, or None where the inputs do not take it."""
    op = get(A)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    attrs, out_types = op.prepare(types, dict(case.attrs))
    with attention_op.forcing(form, lanes, rows):
        if op.form(op.heads_major(types, attrs), device.info, attrs["qk_matmul_output_mode"]) != form:
            return None
        ins = [tensor(a, device) for a in arrays]
        outs = [poisoned(device, t) for t in out_types]
        run(A, ins, out=outs, **case.attrs)
    got = [o.numpy() for o in outs]
    for t in ins + outs:
        device.pool.free(t.buffer)
    return got


def _check(got, want, dtype):
    """Each output against its float64 reference, atol scaled by the reference's largest finite magnitude."""
    tol = TOL[dtype][0]
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape
        finite = np.where(np.isfinite(w), w, 0)
        scale = max(1.0, float(np.max(np.abs(finite)))) if w.size else 1.0
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=tol, atol=tol * scale)


def _kernel_device(device, dtype=None):
    """Skip on the host (it runs the op's reference or oneDNN) and on a device without ``dtype``."""
    if device.info.kernel_language == "python":
        pytest.skip("the host runs the op's reference or oneDNN, not the kernels")
    if dtype is not None and dtype not in device.info.dtypes:
        pytest.skip(f"{device.id} has no {dtype}")


@pytest.mark.parametrize("form", attention_op.FORMS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_form_matches_the_float64_reference(device, rng, case, form):
    _kernel_device(device, case.dtype)
    arrays = case.make(rng)
    got = _forced_run(device, case, arrays, form)
    if got is None:
        pytest.skip(f"the {form} plan does not take these inputs on {device.id}")
    _check(got, reference64(A, arrays, case.attrs), case.dtype)


#: the cases the lanes test runs: the long ones, and the op cases of many keys
LANE_CASES = LONG + [c for c in OP_CASES if c.id in ("attn-decode-long", "attn-prefill-long", "attn-qk1",
                                                     "attn-mask-neginf-causal", "attn-negative-offset")]


@pytest.mark.parametrize("lanes", [2, 8])
@pytest.mark.parametrize("case", LANE_CASES, ids=[c.id for c in LANE_CASES])
def test_rows_dealt_among_lanes_match_the_float64_reference(device, rng, case, lanes):
    """The tiled kernel with each row's keys dealt among 2 or 8 items (as for few heads on a large GPU), merged at
    the end of the tile."""
    _kernel_device(device, case.dtype)
    arrays = case.make(rng)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    with attention_op.forcing("tiled", lanes=lanes):
        tiling = get(A)._tiling(types, device.info)
        if tiling is None:
            pytest.skip("the tiled kernel does not take these heads")
        assert tiling[0] * tiling[1] == attention_op.group_local(device.info, 64) and tiling[1] == lanes
        got = _forced_run(device, case, arrays, "tiled", lanes)
    if got is None:
        pytest.skip("the tiled kernel does not take these inputs")
    _check(got, reference64(A, arrays, case.attrs), case.dtype)


@pytest.mark.parametrize("case", LONG, ids=[c.id for c in LONG])
def test_long_query_blocks_take_the_tiled_kernel_where_forced(device, case):
    """Every long case runs tiled when forced (the test above would skip it otherwise), on every kernel device."""
    _kernel_device(device, case.dtype)
    types = [TensorType(a.shape, a.dtype) for a in case.make(np.random.default_rng(0))]
    attrs, _ = get(A).prepare(types, dict(case.attrs))
    with attention_op.forcing("tiled"):
        assert get(A).form(types, device.info, attrs["qk_matmul_output_mode"]) == "tiled"


def test_the_default_forms(device):
    """Decoding runs fused; a long float32 query block blocked on GPUs, composed on CPU devices; heads over the
    blocked kernel's limit, or the probabilities as a second output, composed."""
    _kernel_device(device)
    op, info = get(A), device.info
    f32 = np.dtype(np.float32)

    def qkv(Sq, D, Skv=128):
        return [TensorType((1, 4, Sq, D), f32), TensorType((1, 4, Skv, D), f32), TensorType((1, 4, Skv, D), f32)]

    gpu = info.device_type != "cpu"
    assert op.form(qkv(1, 64), info) == ("fused" if gpu else "composed")
    assert op.form(qkv(128, 64), info) == ("blocked" if gpu else "composed")
    assert op.form(qkv(128, 64), info, mode=3) == "composed"
    assert op.form(qkv(128, 64, Skv=attention_op.TILED_KEYS_MAX + 1), info) == ("blocked" if gpu else "composed")
    assert op.form(qkv(128, attention_op.BLOCKED_HEAD_MAX + 8), info) == "composed"


def test_an_unknown_form_or_lane_count_is_refused():
    with pytest.raises(ValueError, match="sideways"):
        with attention_op.forcing("sideways"):
            pass
    with pytest.raises(ValueError, match="lanes 3"):
        with attention_op.forcing("tiled", lanes=3):
            pass
    with pytest.raises(ValueError, match="rows 3"):
        with attention_op.forcing("blocked", rows=3):
            pass


def test_a_tiled_run_leaves_the_device_usable_after_a_refused_call(device, rng):
    """A call with mismatched heads is refused before any kernel runs; the same device then runs the tiled plan."""
    _kernel_device(device)
    q = rng.uniform(-1, 1, (1, 3, 40, 16)).astype(np.float32)
    k = rng.uniform(-1, 1, (1, 2, 50, 16)).astype(np.float32)
    with pytest.raises(dl.InvalidArgument, match="divide"):
        run(A, [tensor(q, device), tensor(k, device), tensor(k, device)])
    k = k[:, :1]
    with attention_op.forcing("tiled"):
        y = run(A, [tensor(q, device), tensor(k, device), tensor(k, device)])
    want = reference64(A, [q, k, k], {})[0]
    np.testing.assert_allclose(y[0].numpy() if isinstance(y, (list, tuple)) else y.numpy(), want, rtol=2e-5,
                               atol=2e-5)


@pytest.mark.parametrize("rows", attention_op.BLOCKED_ROWS)
@pytest.mark.parametrize("case", LANE_CASES, ids=[c.id for c in LANE_CASES])
def test_blocked_kernel_with_each_row_count_matches_the_float64_reference(device, rng, case, rows):
    """The blocked kernel with 1, 2 and 4 query rows an item: tiles of 16 to 64 rows over ragged ends."""
    _kernel_device(device, case.dtype)
    arrays = case.make(rng)
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    with attention_op.forcing("blocked", rows=rows):
        blocking = get(A)._blocking(types, device.info)
        if blocking is None:
            pytest.skip("the blocked kernel does not take these heads")
        assert blocking[1] == rows
    got = _forced_run(device, case, arrays, "blocked", rows=rows)
    if got is None:
        pytest.skip("the blocked kernel does not take these inputs")
    _check(got, reference64(A, arrays, case.attrs), case.dtype)


def _sequence_major(case, flags):
    """``case`` with q, k and v given as (B, S, H, D) where ``flags`` (q, k, v, output) say so."""
    def made(rng):
        arrays = case.make(rng)
        return [np.ascontiguousarray(np.swapaxes(a, 1, 2)) if i < 3 and flags[i] else a
                for i, a in enumerate(arrays)]
    return Case(A, made, {**case.attrs, "sequence_major": flags}, id=case.id, dtype=case.dtype)


FLAGS = [(1, 1, 1, 1), (1, 0, 1, 0), (0, 1, 0, 1)]
MAJOR_CASES = [c for c in LONG + OP_CASES if c.id in ("gqa-mask-nan-rows", "causal-offset-tiles-cut",
                                                       "nonpad-causal-empty-rows", "k-transposed", "odd-heads-window",
                                                       "causal-qk2", "f16", "attn-decode-long")]


@pytest.mark.parametrize("flags", FLAGS, ids=["".join(map(str, f)) for f in FLAGS])
@pytest.mark.parametrize("form", attention_op.FORMS)
@pytest.mark.parametrize("case", MAJOR_CASES, ids=[c.id for c in MAJOR_CASES])
def test_sequence_major_operands_match_the_float64_reference(device, rng, case, form, flags):
    """q, k, v and the output (B, S, H, D) where flagged, as an exported model's projections write them, on
    each plan; the reference transposes them."""
    _kernel_device(device, case.dtype)
    if flags[1] and case.attrs.get("k_transposed"):
        flags = (flags[0], 0, *flags[2:])
    major = _sequence_major(case, flags)
    arrays = major.make(rng)
    got = _forced_run(device, major, arrays, form)
    if got is None:
        pytest.skip(f"the {form} plan does not take these inputs on {device.id}")
    want = reference64(A, arrays, major.attrs)
    plain = reference64(A, [np.swapaxes(a, 1, 2) if i < 3 and flags[i] else a for i, a in enumerate(arrays)],
                        case.attrs)
    np.testing.assert_allclose(want[0], np.swapaxes(plain[0], 1, 2) if flags[3] else plain[0])
    _check(got, want, case.dtype)


@pytest.mark.parametrize("flags, why", [((1, 1, 1), "four flags"), ((1, 2, 0, 0), "four flags"),
                                        ((True, 0, 0, 0), "four flags"), ("1111", "four flags")])
def test_bad_sequence_major_flags_are_refused(device, rng, flags, why):
    q = tensor(rng.uniform(-1, 1, (1, 2, 8, 16)).astype(np.float32), device)
    with pytest.raises(dl.InvalidArgument, match=why):
        run(A, [q, q, q], sequence_major=flags)
    y = run(A, [q, q, q], sequence_major=(1, 1, 1, 1))
    got = y[0].numpy() if isinstance(y, (list, tuple)) else y.numpy()
    want = reference64(A, [q.numpy()] * 3, {"sequence_major": (1, 1, 1, 1)})[0]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_k_both_transposed_and_sequence_major_is_refused(device, rng):
    q = tensor(rng.uniform(-1, 1, (1, 2, 8, 16)).astype(np.float32), device)
    with pytest.raises(dl.InvalidArgument, match="transposed or sequence-major"):
        run(A, [q, q, q], k_transposed=True, sequence_major=(0, 1, 0, 0))
    with pytest.raises(dl.InvalidArgument, match="sequence, heads"):
        run(A, [tensor(np.ones((2, 8, 16), np.float32), device), q, q], sequence_major=(1, 0, 0, 0))


def _packed(arrays, heads):
    """q, k and v of a case (B, H, S, D, one S and D) as one (B, S, (Hq + 2·Hk)·D) tensor, and the mask after."""
    q, k, v = arrays[:3]
    B, _, S, D = q.shape
    row = np.concatenate([np.swapaxes(t, 1, 2) for t in (q, k, v)], axis=2)
    return [np.ascontiguousarray(row.reshape(B, S, -1))] + list(arrays[3:])


PACKED_CASES = [
    Case(A, _attn(B=2, Hq=4, Hk=4, Sq=70, Skv=70, Dk=32, Dv=32), {"is_causal": True}, id="mha-causal"),
    Case(A, _attn(B=1, Hq=6, Hk=2, Sq=45, Skv=45, Dk=16, Dv=16, mask=((1, 1, 45, 45), "float"), neginf=True,
                  full_row=True), {"nan_rows": True}, id="gqa-mask-nan-rows"),
    Case(A, _attn(B=2, Hq=2, Hk=1, Sq=9, Skv=9, Dk=8, Dv=8, mask=((2, 2, 9, 9), "bool")), {"scale": 0.3},
         id="mqa-bool-mask"),
    Case(A, _attn(B=1, Hq=2, Hk=2, Sq=40, Skv=40, Dk=32, Dv=32, dtype="float16"), {"is_causal": True},
         id="f16", dtype="float16"),
]


@pytest.mark.parametrize("out_major", [0, 1])
@pytest.mark.parametrize("form", attention_op.FORMS)
@pytest.mark.parametrize("case", PACKED_CASES, ids=[c.id for c in PACKED_CASES])
def test_packed_operands_match_the_float64_reference(device, rng, case, form, out_major):
    """q, k and v as the heads of one (B, S, (Hq + 2·Hk)·D) tensor (``packed_heads``, GPT-2's fused projection),
    on each plan and the host; the output heads-major or sequence-major; the reference unpacks them."""
    if device.info.kernel_language != "python":
        _kernel_device(device, case.dtype)
    elif case.dtype not in device.info.dtypes:
        pytest.skip(f"{device.id} has no {case.dtype}")
    arrays = case.make(rng)
    heads = (arrays[0].shape[1], arrays[1].shape[1])
    plain = reference64(A, arrays, case.attrs)[0]
    attrs = {**case.attrs, "packed_heads": heads, "sequence_major": (0, 0, 0, out_major)}
    packed = Case(A, None, attrs, id=case.id, dtype=case.dtype)
    given = _packed(arrays, heads)
    given = [given[0]] * 3 + given[1:]
    want = reference64(A, given, attrs)
    np.testing.assert_allclose(want[0], np.swapaxes(plain, 1, 2) if out_major else plain)
    if device.info.kernel_language == "python":
        if form != "composed":
            pytest.skip("the host has one plan")
        outs = [poisoned(device, TensorType(w.shape, np.dtype(case.dtype))) for w in want]
        run(A, [tensor(a, device) for a in given], out=outs, **attrs)
        got = [o.numpy() for o in outs]
    else:
        got = _forced_run(device, packed, given, form)
        if got is None:
            pytest.skip(f"the {form} plan does not take these inputs on {device.id}")
    _check(got, want, case.dtype)


@pytest.mark.parametrize("attrs, shapes, why", [
    ({"packed_heads": (2, 3)}, [(1, 4, 48)] * 3, "dividing"),
    ({"packed_heads": (2,)}, [(1, 4, 48)] * 3, "two head counts"),
    ({"packed_heads": (2, True)}, [(1, 4, 48)] * 3, "two head counts"),
    ({"packed_heads": (0, 2)}, [(1, 4, 48)] * 3, "dividing"),
    ({"packed_heads": (2, 1)}, [(1, 4, 50)] * 3, "does not hold"),
    ({"packed_heads": (2, 1)}, [(1, 4, 48), (1, 4, 48), (1, 5, 48)], "one shape"),
    ({"packed_heads": (2, 1)}, [(1, 2, 4, 12)] * 3, "3-D"),
    ({"packed_heads": (2, 1), "sequence_major": (1, 0, 0, 0)}, [(1, 4, 48)] * 3, "sequence_major flags 0"),
    ({"packed_heads": (2, 1), "k_transposed": True}, [(1, 4, 48)] * 3, "no k_transposed"),
])
def test_bad_packed_operands_are_refused(device, rng, attrs, shapes, why):
    ins = [tensor(rng.uniform(-1, 1, s).astype(np.float32), device) for s in shapes]
    with pytest.raises(dl.InvalidArgument, match=why):
        run(A, ins, **attrs)
    ok = tensor(rng.uniform(-1, 1, (1, 4, 48)).astype(np.float32), device)  # (the device still runs the op)
    got = run(A, [ok, ok, ok], packed_heads=(2, 1))
    got = got[0].numpy() if isinstance(got, (list, tuple)) else got.numpy()
    want = reference64(A, [ok.numpy()] * 3, {"packed_heads": (2, 1)})[0]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
