"""Property tests of matmul, gemm, conv and conv_transpose: random shapes and attributes on every device,
against the NumPy reference in float64; misuse raises InvalidArgument naming the op; the kernels render
to every language, compile as GLSL and stay within 16 KiB of shared memory."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import devicelayer as dl
from devicelayer.kernels.dialect import TYPES
from devicelayer.kernels.op import OPS, TensorType
from devicelayer.kernels.render import render
from devicelayer.kernels.runner import run
from devicelayer.ops import names  # noqa: F401  (registers the library)
from devicelayer.tensors import tensor

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _check(device, name, arrays, attrs, tol=1e-4):
    op = OPS[name]
    types = [TensorType.of(a.shape, a.dtype) for a in arrays]
    checked, out_types = op.prepare(types, dict(attrs))
    why = op.unsupported(types, checked, device.info)
    if why is not None:
        pytest.skip(why)
    ins = [tensor(a, device) for a in arrays]
    outs = run(name, ins, **attrs)
    wide = [a.astype(np.float64) for a in arrays]
    want = op.reference(wide, op.prepare([TensorType.of(a.shape, a.dtype) for a in wide], dict(attrs))[0])[0]
    got = outs[0].numpy()
    assert got.shape == want.shape == out_types[0].shape
    scale = float(np.max(np.abs(want))) if want.size else 1.0
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * max(1.0, scale))
    for t in ins + outs:
        device.pool.free(t.buffer)


def _arr(rng, shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


# -- matmul / gemm --------------------------------------------------------------------------------
@st.composite
def matmul_shapes(draw):
    batch = draw(st.lists(st.integers(1, 3), max_size=3))
    def side():
        dims = [d if draw(st.booleans()) else 1 for d in batch]
        return dims[draw(st.integers(0, len(dims))):]
    m, n, k = draw(st.integers(1, 80)), draw(st.integers(1, 80)), draw(st.integers(0, 40))
    a = (k,) if draw(st.integers(0, 5)) == 0 else (*side(), m, k)
    b = (k,) if draw(st.integers(0, 5)) == 0 else (*side(), k, n)
    return tuple(a), tuple(b)


@SETTINGS
@given(shapes=matmul_shapes(), seed=st.integers(0, 2**31))
def test_matmul_random(device, shapes, seed):
    rng = np.random.default_rng(seed)
    a, b = shapes
    _check(device, "matmul", [_arr(rng, a), _arr(rng, b)], {})


@SETTINGS
@given(m=st.integers(1, 100), n=st.integers(1, 100), k=st.integers(0, 70), ta=st.integers(0, 1),
       tb=st.integers(0, 1), c=st.sampled_from(["none", "scalar", "1", "n", "1n", "m1", "mn", "11"]),
       alpha=st.floats(-2, 2), beta=st.floats(-2, 2), seed=st.integers(0, 2**31))
def test_gemm_random(device, m, n, k, ta, tb, c, alpha, beta, seed):
    rng = np.random.default_rng(seed)
    arrays = [_arr(rng, (k, m) if ta else (m, k)), _arr(rng, (n, k) if tb else (k, n))]
    cshape = {"none": None, "scalar": (), "1": (1,), "n": (n,), "1n": (1, n), "m1": (m, 1), "mn": (m, n),
              "11": (1, 1)}[c]
    if cshape is not None:
        arrays.append(_arr(rng, cshape))
    _check(device, "gemm", arrays, {"transA": ta, "transB": tb, "alpha": alpha, "beta": beta})


# -- conv / conv_transpose --------------------------------------------------------------------------
@st.composite
def conv_problem(draw, transposed=False):
    nd = draw(st.integers(1, 3))
    group = draw(st.integers(1, 3))
    cg = draw(st.integers(1, 4))
    mg = draw(st.sampled_from([1, 2, 5, 16, 20]))
    big = mg >= 16
    n = draw(st.integers(1, 2))
    k = [draw(st.integers(1, 3)) for _ in range(nd)]
    s = [draw(st.integers(1, 3)) for _ in range(nd)]
    d = [draw(st.integers(1, 2)) for _ in range(nd)]
    limit = 3 if nd == 3 or big else 7
    attrs = {"group": group, "strides": s, "dilations": d}
    auto = draw(st.sampled_from(["NOTSET", "NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]))
    if transposed:
        size = [draw(st.integers(1, limit)) for _ in range(nd)]
        attrs["output_padding"] = [draw(st.integers(0, si - 1)) for si in s]
        natural = [s[i] * (size[i] - 1) + attrs["output_padding"][i] + d[i] * (k[i] - 1) + 1 for i in range(nd)]
        if auto == "NOTSET":
            pads = [draw(st.integers(0, 2)) for _ in range(2 * nd)]
            assume(all(natural[i] - pads[i] - pads[nd + i] >= 1 for i in range(nd)))
            attrs["pads"] = pads
        elif auto != "VALID":
            assume(all(natural[i] >= size[i] * s[i] for i in range(nd)))
        w = (group * cg, mg, *k)
        bias = group * mg
    else:
        size = [d[i] * (k[i] - 1) + 1 + draw(st.integers(0, limit)) for i in range(nd)]
        if auto == "NOTSET":
            attrs["pads"] = [draw(st.integers(0, 2)) for _ in range(2 * nd)]
        w = (group * mg, cg, *k)
        bias = group * mg
    if auto != "NOTSET":
        attrs["auto_pad"] = auto
    x = (n, group * cg, *size)
    return x, w, bias if draw(st.booleans()) else None, attrs


@SETTINGS
@given(problem=conv_problem(), seed=st.integers(0, 2**31))
def test_conv_random(device, problem, seed):
    rng = np.random.default_rng(seed)
    x, w, bias, attrs = problem
    arrays = [_arr(rng, x), _arr(rng, w)] + ([_arr(rng, (bias,))] if bias else [])
    _check(device, "conv", arrays, attrs)


@SETTINGS
@given(problem=conv_problem(transposed=True), seed=st.integers(0, 2**31))
def test_conv_transpose_random(device, problem, seed):
    rng = np.random.default_rng(seed)
    x, w, bias, attrs = problem
    arrays = [_arr(rng, x), _arr(rng, w)] + ([_arr(rng, (bias,))] if bias else [])
    _check(device, "conv_transpose", arrays, attrs)


def test_conv_1x1_and_matmul_agree_with_einsum(device):
    """A 1x1 convolution is a matmul over channels: both against an independent einsum."""
    rng = np.random.default_rng(5)
    x, w = _arr(rng, (2, 24, 5, 7)), _arr(rng, (40, 24, 1, 1))
    want = np.einsum("nchw,mc->nmhw", x.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
    got = run("conv", [tensor(x, device), tensor(w, device)])[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    got = run("matmul", [tensor(w[:, :, 0, 0], device), tensor(x.reshape(2, 24, 35), device)])[0].numpy()
    np.testing.assert_allclose(got.reshape(2, 40, 5, 7), want, rtol=1e-4, atol=1e-4)


def test_conv_transpose_is_the_adjoint_of_conv(device):
    """<conv(x), y> == <x, conv_transpose(y)> with the same weights, strides, pads and dilations."""
    rng = np.random.default_rng(7)
    attrs = {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [1, 2], "group": 2}
    x, w = _arr(rng, (2, 4, 11, 13)), _arr(rng, (6, 2, 3, 3))
    y = run("conv", [tensor(x, device), tensor(w, device)], **attrs)[0].numpy()
    g = _arr(rng, y.shape)
    # conv_transpose's output must come back to x's spatial size: pick output_padding for it
    op = OPS["conv_transpose"]
    base, _ = op.prepare([TensorType.of(g.shape, g.dtype), TensorType.of(w.shape, w.dtype)], dict(attrs))
    natural = op.infer([TensorType.of(g.shape, g.dtype), TensorType.of(w.shape, w.dtype)],
                       {**base, "output_padding": (0, 0)})[0].shape[2:]
    extra = [xs - ns for xs, ns in zip(x.shape[2:], natural)]
    xt = run("conv_transpose", [tensor(g, device), tensor(w, device)], **attrs, output_padding=extra)[0].numpy()
    assert xt.shape == x.shape
    lhs = float(np.sum(y.astype(np.float64) * g))
    rhs = float(np.sum(x.astype(np.float64) * xt))
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs))


@pytest.mark.parametrize("runs", [False, True])
@pytest.mark.parametrize("micro", [2, 4, 8])
def test_every_tile_shape(device, monkeypatch, micro, runs):
    """The 32 x 32 tiles (GPUs with few tiles), the 64 x 64 ones and the 128 x 128 ones, in both micro-tile layouts
    (``tile_runs``: strided and runs of 4), forced on every device (CPU devices too, which otherwise run the
    register-blocked kernels: ``tests/test_register_kernels.py``)."""
    import devicelayer.kernels.ops.matmul as mm

    monkeypatch.setattr(mm, "register_kernels", lambda info: False)
    monkeypatch.setattr(mm, "micro_tile", lambda *args: micro)
    monkeypatch.setattr(mm, "tile_runs", lambda info: runs)
    rng = np.random.default_rng(micro)
    _check(device, "matmul", [_arr(rng, (2, 70, 45)), _arr(rng, (45, 37))], {})
    _check(device, "gemm", [_arr(rng, (45, 33)), _arr(rng, (70, 45)), _arr(rng, (70,))],
           {"transA": 1, "transB": 1, "alpha": 0.5})
    _check(device, "conv", [_arr(rng, (2, 6, 9, 7)), _arr(rng, (34, 3, 3, 2)), _arr(rng, (34,))],
           {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1]})
    _check(device, "conv_transpose", [_arr(rng, (1, 4, 5, 6)), _arr(rng, (4, 17, 3, 3))],
           {"group": 2, "strides": [2, 2], "output_padding": [1, 0]})


# -- misuse -----------------------------------------------------------------------------------------
def _t(*shape, dtype="float32"):
    return TensorType.of(shape, dtype)


MISUSE = [
    ("matmul", [_t(3, 4), _t(5, 6)], {}),
    ("matmul", [_t(), _t(3)], {}),
    ("matmul", [_t(2, 3, 4), _t(3, 4, 5)], {}),
    ("matmul", [_t(3, 4), _t(4, 5, dtype="float16")], {}),
    ("matmul", [_t(3, 4, dtype="bool"), _t(4, 5, dtype="bool")], {}),
    ("matmul", [_t(3, 4), _t(4, 5)], {"transA": 1}),
    ("gemm", [_t(2, 3, 4), _t(4, 5)], {}),
    ("gemm", [_t(3, 4), _t(5, 6)], {}),
    ("gemm", [_t(3, 4), _t(6, 4)], {"transB": 0}),
    ("gemm", [_t(3, 4), _t(4, 5), _t(4, 5)], {}),
    ("gemm", [_t(3, 4), _t(4, 5), _t(2, 3, 5)], {}),
    ("gemm", [_t(3, 4), _t(4, 5)], {"transA": 2}),
    ("gemm", [_t(3, 4), _t(4, 5)], {"alpha": "x"}),
    ("gemm", [_t(3, 4), _t(4, 5)], {"beta": float("inf")}),
    ("gemm", [_t(3, 4), _t(4, 5)], {"trans_a": 1}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3)], {}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 2, 3, 3)], {}),
    ("conv", [_t(1, 4, 5, 5), _t(4, 2, 3, 3)], {"group": 3}),
    ("conv", [_t(1, 4, 5, 5), _t(4, 4, 3, 3)], {"group": 0}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3, 3)], {"auto_pad": "SAME"}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3, 3)], {"pads": [1, 1]}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3, 3)], {"pads": [1, 1, -1, 0]}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3, 3)], {"strides": [0, 1]}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3, 3)], {"dilations": [1.5, 1]}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3, 3)], {"kernel_shape": [2, 2]}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3, 3), _t(3)], {}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3, 3)], {"auto_pad": "SAME_UPPER", "pads": [1, 1, 1, 1]}),
    ("conv", [_t(1, 3, 2, 5), _t(4, 3, 3, 3)], {}),
    ("conv", [_t(1, 3, 5, 5, dtype="int32"), _t(4, 3, 3, 3, dtype="int32")], {}),
    ("conv", [_t(3, 5), _t(4, 3)], {}),
    ("conv", [_t(1, 1, 2, 2, 2, 2), _t(1, 1, 1, 1, 1, 1)], {}),
    ("conv", [_t(1, 3, 5, 5), _t(4, 3, 3, 3)], {"output_padding": [1, 1]}),
    ("conv_transpose", [_t(1, 3, 5, 5), _t(4, 2, 3, 3)], {}),
    ("conv_transpose", [_t(1, 4, 5, 5), _t(4, 2, 3, 3)], {"group": 3}),
    ("conv_transpose", [_t(1, 3, 5, 5), _t(3, 2, 3, 3)], {"output_padding": [-1, 0]}),
    ("conv_transpose", [_t(1, 3, 5, 5), _t(3, 2, 3, 3)], {"output_shape": [0, 12]}),  # (a larger one pads)
    ("conv_transpose", [_t(1, 3, 5, 5), _t(3, 2, 3, 3)], {"output_shape": [5, 5], "pads": [1, 1, 1, 1]}),
    ("conv_transpose", [_t(1, 3, 5, 5), _t(3, 2, 3, 3)], {"pads": [4, 4, 4, 4]}),
    ("conv_transpose", [_t(1, 3, 5, 5), _t(3, 2, 3, 3), _t(3)], {}),
]


@pytest.mark.parametrize("name,types,attrs", MISUSE, ids=[f"{m[0]}-{i}" for i, m in enumerate(MISUSE)])
def test_misuse_raises_invalid_argument_naming_the_op(name, types, attrs):
    with pytest.raises(dl.InvalidArgument, match=name):
        OPS[name].prepare(types, attrs)


@pytest.mark.parametrize("name,count", [("matmul", 1), ("matmul", 3), ("gemm", 1), ("gemm", 4), ("conv", 1),
                                        ("conv", 4), ("conv_transpose", 1), ("conv_transpose", 4)])
def test_wrong_arity_names_the_op(name, count):
    with pytest.raises(dl.InvalidArgument, match=name):
        OPS[name].prepare([_t(1, 2, 3, 3)] * count, {})


def test_eager_misuse_names_the_op():
    host = dl.device("host")
    a, b = tensor(np.ones((3, 4), np.float32), host), tensor(np.ones((5, 6), np.float32), host)
    with pytest.raises(dl.InvalidArgument, match="matmul"):
        dl.ops.matmul(a, b)
    with pytest.raises(dl.InvalidArgument, match="gemm"):
        dl.ops.gemm(a, b)


def test_checked_attributes_check_again_unchanged():
    """prepare's output attributes are a fixed point (the graph executor may check twice)."""
    for name, types, attrs in [
        ("conv", [_t(1, 3, 8, 9), _t(4, 3, 3, 2)], {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
        ("conv_transpose", [_t(1, 3, 4, 4), _t(3, 2, 3, 3)], {"output_shape": [9, 10], "strides": [2, 3]}),
        ("conv_transpose", [_t(1, 3, 4, 4), _t(3, 2, 3, 3)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
        ("gemm", [_t(3, 4), _t(5, 4)], {"transB": 1}),
    ]:
        op = OPS[name]
        first, out1 = op.prepare(types, attrs)
        second, out2 = op.prepare(types, first)
        assert first == second and out1 == out2


# -- kernels: every language renders, GLSL compiles, shared memory within 16 KiB ----------------------
def _specs():
    from devicelayer.kernels.ops.conv import Conv, ConvTranspose  # noqa: F401
    from devicelayer.kernels.ops.matmul import gemm_spec, register_gemm_spec
    from devicelayer.info import DeviceInfo

    info = DeviceInfo(id="fake", backend="fake", index=0, name="fake", vendor="", device_type="gpu",
                      driver_version="", api_version="", kernel_language="glsl", memory_total=1 << 30,
                      max_allocation=1 << 30, compute_units=1, max_work_group_size=1024,
                      max_work_item_sizes=(1024, 1024, 64), subgroup_size=32, local_memory=16384,
                      dtypes=frozenset({"float32", "float16"}), unified_memory=False)
    specs = []
    for elem in ("float", "f16"):
        for tiled in (True, False):
            for a_m in (False, True):
                for bias in (False, True):
                    specs.append(gemm_spec(elem, tiled, a_m, not a_m, bias))
        for runs in (False, True):  # both micro-tile layouts (matmul.tile_runs)
            specs += [gemm_spec(elem, True, False, True, True, micro=m, runs=runs) for m in (2, 4)]
        specs += [register_gemm_spec(elem, block, unit, bias) for block in ((8, 8), (1, 4)) for unit in (False, True)
                  for bias in (False, True)]
        dtype = TYPES[elem]
        for name, x, w, g in [("conv", (1, 32, 9, 9), (32, 32, 3, 3), 1), ("conv", (1, 4, 9, 9), (4, 1, 3, 3), 4),
                              ("conv_transpose", (1, 32, 5, 5), (32, 32, 3, 3), 1),
                              ("conv_transpose", (1, 4, 5, 5), (4, 1, 3, 3), 4)]:
            op = OPS[name]
            m = w[1] * g if "transpose" in name else w[0]
            types = [_t(*x, dtype=dtype), _t(*w, dtype=dtype), _t(m, dtype=dtype)]
            attrs, outs = op.prepare(types, {"strides": [2, 1], "pads": [1, 1, 0, 1], "group": g})
            specs += [s.spec for s in op.plan(types, outs, attrs, info).steps]
            specs += [s.spec for s in op.plan(types, outs, attrs, replace(info, device_type="cpu")).steps]
            specs += [s.spec for s in op.plan(types, outs, attrs, replace(info, kernel_language="opencl-c")).steps]
    return specs


def test_kernels_fit_16k_shared_memory():
    for spec in _specs():
        used = sum(count * np.dtype(TYPES[spec.resolve(t)]).itemsize for t, _, count in spec.shared)
        assert used <= 16384, f"{spec.name} uses {used} bytes of shared memory"


@pytest.mark.parametrize("language", ["cuda-c", "opencl-c", "glsl"])
def test_kernels_render(language):
    for spec in _specs():
        src = render(spec, language)
        assert spec.body.strip().splitlines()[-1].strip() in src


@pytest.mark.skipif(shutil.which("glslc") is None, reason="glslc is not installed")
def test_glsl_compiles(tmp_path):
    for i, spec in enumerate(_specs()):
        path = tmp_path / f"k{i}.comp"
        path.write_text(render(spec, "glsl"))
        done = subprocess.run(["glslc", "-fshader-stage=compute", "--target-env=vulkan1.2", str(path), "-o",
                               str(tmp_path / f"k{i}.spv")], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{spec.name}:\n{done.stderr}"
