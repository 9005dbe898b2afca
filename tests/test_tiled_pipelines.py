"""The tiled product and convolution kernels' pipelines (``matmul.Pipeline``: K slices, shared stages, loads a slice
ahead, vector reads of shared runs, unchecked loads, bands of tile rows) forced on every kernel device with each
micro-tile edge, against NumPy in float64 into poisoned outputs; the pipelines GPUs choose by themselves; misuse of
``forcing_pipeline``."""

from __future__ import annotations

import numpy as np
import pytest

from devicelayer.kernels import tiles
from devicelayer.kernels.op import OPS, TensorType
from devicelayer.kernels.ops import conv as conv_ops
from devicelayer.kernels.ops import matmul as mm
from devicelayer.kernels.runner import plan_for, run
from devicelayer.ops import names  # noqa: F401  (registers the library)
from devicelayer.tensors import tensor

from test_ops import poisoned

P = mm.Pipeline
#: every optional part of the pipeline alone, the GPU's own, and odd bands (a band of 3 tile rows leaves a short
#: last band)
PIPELINES = {
    "plain": P(),
    "gpu": mm.GPU_PIPELINE,
    "c-gpu": mm.C_GPU_PIPELINE,
    "slices-of-8": P(bk=8),
    "two-stages": P(stages=2),
    "prefetch": P(prefetch=1, aligned=1),
    "vectors-bands-of-3": P(bk=8, prefetch=1, stages=2, vec=1, swizzle=3),
}
EDGES = tiles.MICRO_EDGES

#: (op, input shapes, attributes): products aligned to every tile and slice, ragged ones, batched and broadcast
#: ones, Gemm's transposes with a bias
PRODUCTS = [
    ("matmul", [(256, 64), (64, 256)], {}),
    ("matmul", [(129, 70), (70, 131)], {}),
    ("matmul", [(3, 64, 48), (3, 48, 80)], {}),
    ("matmul", [(2, 1, 100, 33), (1, 4, 33, 17)], {}),
    ("gemm", [(40, 130), (66, 40), (1, 66)], {"transA": 1, "transB": 1, "alpha": 0.5, "beta": -2.0}),
]
CONVS = [
    ("conv", [(2, 8, 13, 11), (24, 8, 3, 3), (24,)], {"strides": [2, 1], "pads": [1, 0, 1, 2]}),
    ("conv", [(1, 32, 9, 9), (48, 32, 1, 1), (48,)], {}),
    ("conv", [(2, 16, 10, 10), (32, 4, 3, 3), (32,)], {"group": 4, "pads": [1, 1, 1, 1], "dilations": [2, 1]}),
    ("conv_transpose", [(1, 16, 7, 6), (16, 20, 3, 3), (20,)], {"strides": [2, 2], "pads": [1, 1, 0, 0]}),
]


def _kernel_device(device):
    if device.info.kernel_language == "python":
        pytest.skip("the host runs products and convolutions on oneDNN and NumPy, not the tiled kernels")


def check_against_float64(device, rng, name, shapes, attrs, dtype=np.float32, tolerance=1e-5):
    """Op ``name`` on random ``dtype`` inputs of ``shapes`` into a poisoned output, against its reference on the same
    values in float64 (``tolerance`` relative, and of the largest magnitude)."""
    op = OPS[name]
    arrays = [rng.uniform(-1, 1, s).astype(dtype) for s in shapes]
    types = [TensorType.of(a.shape, a.dtype) for a in arrays]
    checked, out_types = op.prepare(types, dict(attrs))
    ins = [tensor(a, device) for a in arrays]
    out = poisoned(device, out_types[0])
    try:
        run(name, ins, out=[out], **attrs)
        wide = [a.astype(np.float64) for a in arrays]
        want = op.reference(wide, op.prepare([TensorType.of(a.shape, a.dtype) for a in wide], dict(attrs))[0])[0]
        got = out.numpy().astype(np.float64)
    finally:
        for t in (*ins, out):
            device.pool.free(t.buffer)
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance * scale)



@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("form", list(PIPELINES))
@pytest.mark.parametrize("case", range(len(PRODUCTS)))
def test_products(device, rng, case, form, edge):
    _kernel_device(device)
    with tiles.forcing(edge), mm.forcing_pipeline(PIPELINES[form]):
        check_against_float64(device, rng, *PRODUCTS[case])


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("form", ["plain", "gpu", "c-gpu", "vectors-bands-of-3"])
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_convolutions(device, rng, case, form, edge):
    _kernel_device(device)
    with tiles.forcing(edge), mm.forcing_pipeline(PIPELINES[form]):
        check_against_float64(device, rng, *CONVS[case])


def _tiled_defines(device, name, shapes, attrs):
    op = OPS[name]
    types = [TensorType.of(s, np.float32) for s in shapes]
    checked, outs = op.prepare(types, dict(attrs))
    plan = plan_for(op, device, types, outs, checked)
    specs = [s.spec for s in plan.steps if getattr(s, "spec", None) is not None and s.spec.shared]
    return dict(specs[0].defines) if specs else None


def test_static_choices(device):
    """GPUs take GPU_PIPELINE's (C_GPU_PIPELINE's) 128 x 128 tiles for a product with a tile for every compute unit,
    and the plain pipeline at smaller edges; other devices the plain one throughout."""
    _kernel_device(device)
    if device.vendor_op("matmul") is not None:
        pytest.skip(f"{device.id}'s vendor library takes plain products")
    if device.info.device_type != "gpu":  # (CPU devices run the register-blocked kernels unless tiles are forced)
        with tiles.forcing(8):
            big = _tiled_defines(device, "matmul", [(2048, 2048), (2048, 2048)], {})
        assert (big["TM"], big["STAGES"], big["VEC"], big["PREFETCH"], big["UNROLL_TILES"]) == (8, 1, 0, 0, 0)
        return
    big = _tiled_defines(device, "matmul", [(2048, 2048), (2048, 2048)], {})
    assert big["TM"] == 8 and big["RUNS"] == 1
    vec = int(device.info.kernel_language == "glsl")  # (C compilers read the runs as vectors themselves)
    assert (big["BK"], big["STAGES"], big["PREFETCH"], big["ALIGNED"], big["SWIZZLE"]) == (8, 2, 1, 1, 8)
    assert big["VEC"] == vec and big["UNROLL_TILES"] == 1
    ragged = _tiled_defines(device, "matmul", [(2047, 2048), (2048, 2049)], {})
    assert ragged["TM"] == 8 and ragged["ALIGNED"] == 0
    small = _tiled_defines(device, "matmul", [(96, 80), (80, 72)], {})
    assert small["TM"] in (2, 4) and small["STAGES"] == 1


def test_convolution_choice(device):
    """GPUs compiling GLSL take two stages of 8-deep slices in the tiled convolution; other devices the plain one."""
    _kernel_device(device)
    glsl_gpu = device.info.device_type == "gpu" and device.info.kernel_language == "glsl"
    assert conv_ops.conv_pipeline(device.info, "float", 4) == (conv_ops.GLSL_GPU_PIPELINE if glsl_gpu else P())
    if device.vendor_op("conv") is not None:
        return  # (the vendor library takes the convolution)
    defines = _tiled_defines(device, "conv", [(4, 64, 28, 28), (64, 64, 3, 3)], {"pads": [1, 1, 1, 1]})
    if defines is None:
        assert device.info.device_type == "cpu"  # (the register-blocked kernels)
        return
    assert (defines["BK"], defines["STAGES"]) == ((8, 2) if glsl_gpu else (16, 1))


@pytest.mark.parametrize("bad", [P(bk=4), P(bk=32), P(stages=3), P(swizzle=-1)])
def test_forcing_refuses_what_the_kernels_do_not_take(bad):
    with pytest.raises(ValueError, match="pipeline"):
        with mm.forcing_pipeline(bad):
            pass
    assert mm.forced_pipeline() is None


def test_forcing_nests_and_restores():
    with mm.forcing_pipeline(P(bk=8)):
        with mm.forcing_pipeline(mm.GPU_PIPELINE):
            assert mm.forced_pipeline() == mm.GPU_PIPELINE
        assert mm.forced_pipeline() == P(bk=8)
    assert mm.forced_pipeline() is None
