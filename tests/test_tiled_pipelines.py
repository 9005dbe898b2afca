"""The tiled product and convolution kernels' pipelines (``matmul.Pipeline``: K slices, shared stages, loads a slice
ahead, vector reads of shared runs, unchecked loads, bands of tile rows) forced on every kernel device with each
micro-tile edge, against NumPy in float64 into poisoned outputs; the pipelines GPUs choose by themselves; misuse of
``forcing_pipeline``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from devicelayer.info import DeviceInfo
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
    # groups with a multiple of every K slice of channels: K walked tap by tap (CINNER), a tap's slices ragged in M
    # and N, padded, strided, dilated, 1-D, 3-D and 1x1 with a stride
    ("conv", [(2, 16, 9, 8), (20, 16, 3, 3), (20,)], {"pads": [1, 2, 0, 1]}),
    ("conv", [(1, 32, 4, 6, 5), (32, 16, 2, 3, 3)], {"group": 2, "pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1]}),
    ("conv", [(2, 32, 19), (24, 32, 5), (24,)], {"strides": [2], "pads": [3, 1], "dilations": [2]}),
    ("conv", [(2, 32, 9, 9), (17, 32, 1, 1)], {"strides": [2, 2]}),
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


@pytest.mark.parametrize("form", ["plain", "gpu", "vectors-bands-of-3"])
@pytest.mark.parametrize("case", [c for c in range(len(CONVS)) if c != 2])  # (2: 8 channels a group, not tiled)
def test_wide_convolutions(device, rng, monkeypatch, case, form):
    """The tiled convolution with rectangular micro-tiles of 4 x 8 (64 x 128 output tiles, ``tiles.WIDE_TILES``)
    forced, with each pipeline (unstrided 1x1 layers too): against float64 into poisoned outputs; the plan's kernel
    has the shape."""
    _kernel_device(device)
    name, shapes, attrs = CONVS[case]
    if device.vendor_op(name) is not None:
        pytest.skip(f"{device.id}'s vendor library takes {name}")
    monkeypatch.setattr(conv_ops, "pointwise_products", lambda *args: False)
    with tiles.forcing((4, 8)), mm.forcing_pipeline(PIPELINES[form]):
        defines = _tiled_defines(device, name, shapes, attrs)
        check_against_float64(device, rng, name, shapes, attrs)
    assert (defines["TM"], defines["TN"], defines["BM"], defines["BN"]) == (4, 8, 64, 128)


@pytest.mark.parametrize("split", [1, 3])
def test_wide_convolution_in_half_precision(device, rng, monkeypatch, split):
    """A float16 convolution on 4 x 8 micro-tiles (on matrix units where the device has them), whole and split in
    3 parts: within float16's tolerance of float64."""
    _kernel_device(device)
    if device.vendor_op("conv") is not None:
        pytest.skip(f"{device.id}'s vendor library takes conv")
    if not device.info.supports("float16"):
        pytest.skip(f"{device.id} has no float16")
    monkeypatch.setattr(conv_ops, "conv_split", lambda *args: split)
    case = ("conv", [(2, 64, 9, 10), (72, 64, 3, 3), (72,)], {"pads": [1, 1, 1, 1]})
    with tiles.forcing((4, 8)):
        steps = _plan_steps(device, case[0], [np.zeros(s, np.float16) for s in case[1]], case[2])
        check_against_float64(device, rng, *case, dtype=np.float16, tolerance=4e-3)
    assert dict(steps[0].spec.defines)["TN"] == 8 and len(steps) == (2 if split > 1 else 1)


def test_wide_rule():
    """GPUs take 4 x 8 micro-tiles for float32 and float16 convolutions of 64 channels or fewer a group whose
    64 x 128 tiles fill the compute units; square ones elsewhere; a forced square edge stays square."""
    gpu = DeviceInfo(id="vulkan:0", backend="vulkan", index=0, name="described", vendor="", device_type="gpu",
                     driver_version="", api_version="", kernel_language="glsl", memory_total=1 << 34,
                     max_allocation=1 << 32, compute_units=132, max_work_group_size=1024,
                     max_work_item_sizes=(1024, 1024, 64), subgroup_size=32, local_memory=49152,
                     dtypes=frozenset({"float16", "float32"}), unified_memory=False)
    # (ResNet-50's 56 x 56 layers of 64 channels at batch 16 and 1)
    assert conv_ops.wide_columns(gpu, "float", 4, 64, 16 * 3136, 1) == 8
    assert conv_ops.wide_columns(gpu, "f16", 4, 64, 16 * 3136, 1) == 8
    assert conv_ops.wide_columns(gpu, "float", 4, 64, 3136, 1) == 4
    assert conv_ops.wide_columns(gpu, "float", 4, 128, 16 * 3136, 1) == 4
    assert conv_ops.wide_columns(gpu, "float", 8, 64, 16 * 3136, 1) == 8
    assert conv_ops.wide_columns(gpu, "f64", 4, 64, 16 * 3136, 1) == 4
    assert conv_ops.wide_columns(dataclasses.replace(gpu, device_type="cpu"), "float", 4, 64, 16 * 3136, 1) == 4
    micro, cols, _ = conv_ops.conv_tile(gpu, "float", (64, 16 * 3136, 576), 1, False, True)
    assert (micro, cols) == (4, 8)
    with tiles.forcing(4):
        assert conv_ops.conv_tile(gpu, "float", (64, 16 * 3136, 576), 1, False, True)[:2] == (4, 4)
    with tiles.forcing((4, 8)):
        assert conv_ops.conv_tile(gpu, "float", (256, 784, 2304), 1, False, True)[:2] == (4, 8)
        assert conv_ops.conv_tile(dataclasses.replace(gpu, local_memory=8192), "float", (256, 784, 2304), 1, False,
                                  True)[:2] != (4, 8)


#: convolutions split along K (``conv.conv_split``): a tap walked channel block by channel block with a bias, the
#: summand Z and an activation (the sums' epilogue), element by element (3 channels a group, grouped, strided),
#: transposed, 1-D; float16 parts summed in float32
SPLITS = [
    ("conv", [(2, 16, 9, 8), (20, 16, 3, 3), (20,), (2, 20, 9, 8)], {"pads": [1, 1, 1, 1], "activation": "relu"}),
    ("conv", [(2, 6, 11, 9), (34, 3, 3, 2), (34,)], {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ("conv_transpose", [(1, 16, 5, 6), (16, 18, 3, 3), (18,)], {"strides": [2, 2], "output_padding": [1, 0]}),
    ("conv", [(3, 32, 21), (24, 32, 5)], {"pads": [2, 2], "activation": "leaky_relu", "activation_alpha": 0.2}),
]


@pytest.mark.parametrize("split", [2, 3, 7, 40])
@pytest.mark.parametrize("form", ["plain", "gpu"])
@pytest.mark.parametrize("case", range(len(SPLITS)))
def test_split_convolutions(device, rng, monkeypatch, case, form, split):
    """K split in parts that divide its slices or not, more parts than slices (parts past the end hold zeros), summed
    with the bias and epilogue by the second kernel: against float64 into poisoned outputs, at 32 x 32 tiles."""
    _kernel_device(device)
    if device.vendor_op(name := SPLITS[case][0]) is not None:
        pytest.skip(f"{device.id}'s vendor library takes {name}")
    monkeypatch.setattr(conv_ops, "conv_split", lambda *args: split)
    name, shapes, attrs = SPLITS[case]
    with tiles.forcing(2), mm.forcing_pipeline(PIPELINES[form]):
        steps = _plan_steps(device, name, shapes, attrs)
        check_against_float64(device, rng, name, shapes, attrs)
    assert [dict(s.spec.defines).get("SPLIT") for s in steps] == [split, split]
    assert "conv_split_sum" in steps[1].spec.name


def test_split_convolution_in_half_precision(device, rng, monkeypatch):
    """A float16 convolution split in 5 parts sums them in float32: within float16's tolerance of float64."""
    _kernel_device(device)
    if device.vendor_op("conv") is not None:
        pytest.skip(f"{device.id}'s vendor library takes conv")
    if not device.info.supports("float16"):
        pytest.skip(f"{device.id} has no float16")
    monkeypatch.setattr(conv_ops, "conv_split", lambda *args: 5)
    with tiles.forcing(2):
        steps = _plan_steps(device, "conv", [(2, 32, 7, 7), (40, 32, 3, 3), (40,)], {"pads": [1, 1, 1, 1]})
        check_against_float64(device, rng, "conv", [(2, 32, 7, 7), (40, 32, 3, 3), (40,)], {"pads": [1, 1, 1, 1]},
                              dtype=np.float16, tolerance=4e-3)
    assert len(steps) == 2 and [p.type for p in steps[0].spec.params if p.name == "y"] == ["float"]


def test_split_rule():
    """GPUs split K where the tiles leave compute units short of groups, into enough parts to fill them, each of
    SPLIT_LEAST slices or more; never on CPU devices or for integer types."""
    gpu = DeviceInfo(id="vulkan:0", backend="vulkan", index=0, name="described", vendor="", device_type="gpu",
                     driver_version="", api_version="", kernel_language="glsl", memory_total=1 << 34,
                     max_allocation=1 << 32, compute_units=132, max_work_group_size=1024,
                     max_work_item_sizes=(1024, 1024, 64), subgroup_size=32, local_memory=49152,
                     dtypes=frozenset({"float16", "float32"}), unified_memory=False)
    # (ResNet-50's 3x3 layers at 14 x 14 and 7 x 7, batch 16: 64 x 64 and 128 x 128 tiles)
    assert conv_ops.conv_split(gpu, "float", 196, 288, 4) == 5
    assert conv_ops.conv_split(gpu, "f16", 28, 576, 8) == 10
    assert conv_ops.conv_split(gpu, "float", 10, 40) == 2  # (too few slices for more parts)
    assert conv_ops.conv_split(gpu, "float", 2, 4000) == conv_ops.SPLIT_MOST
    assert conv_ops.conv_split(gpu, "float", 784, 72) == 1
    assert conv_ops.conv_split(gpu, "float", 196, 20) == 1
    assert conv_ops.conv_split(gpu, "int", 10, 400) == 1
    assert conv_ops.conv_split(dataclasses.replace(gpu, device_type="cpu"), "float", 10, 400) == 1
    # a deep convolution keeps 64 x 64 tiles where they are too few (the split fills the units), a shallow one 32 x 32
    assert mm.micro_tile(gpu, 256, 3136, 1, 2304, "float", False, True) == 4
    assert mm.micro_tile(gpu, 256, 3136, 1, 2304, "float", False, False) == 2
    # unstrided 1x1 convolutions: the tiled convolution on GPUs, products on CPU devices and where it cannot run
    assert not conv_ops.pointwise_products(gpu, 256, 3136)
    assert conv_ops.pointwise_products(dataclasses.replace(gpu, device_type="cpu"), 256, 3136)
    assert conv_ops.pointwise_products(dataclasses.replace(gpu, local_memory=4096), 256, 3136)


#: unstrided 1x1 convolutions: a bias, groups, a summand and activation, 1-D, few positions an image
POINTWISE = [
    ("conv", [(3, 32, 7, 7), (40, 32, 1, 1), (40,)], {}),
    ("conv", [(2, 32, 5, 6), (48, 16, 1, 1)], {"group": 2}),
    ("conv", [(4, 64, 3, 3), (24, 64, 1, 1), (24,), (4, 24, 3, 3)], {"activation": "relu"}),
    ("conv", [(2, 16, 33), (20, 16, 1)], {}),
]


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("case", range(len(POINTWISE)))
def test_pointwise_on_the_tiled_convolution(device, rng, monkeypatch, case, edge):
    """Unstrided 1x1 convolutions on the tiled convolution (GPUs take it there: ``conv.pointwise_products``),
    split along K too, against float64 into poisoned outputs."""
    _kernel_device(device)
    name, shapes, attrs = POINTWISE[case]
    if device.vendor_op(name) is not None:
        pytest.skip(f"{device.id}'s vendor library takes {name}")
    monkeypatch.setattr(conv_ops, "pointwise_products", lambda *args: False)
    monkeypatch.setattr(conv_ops, "conv_split", lambda *args: 2 if edge == 4 else 1)
    with tiles.forcing(edge):
        steps = _plan_steps(device, name, shapes, attrs)
        check_against_float64(device, rng, name, shapes, attrs)
    assert steps[0].spec.name.startswith(f"conv_tiled{edge}") and len(steps) == (2 if edge == 4 else 1)


def test_pointwise_rule(device):
    """GPUs run unstrided 1x1 convolutions on the tiled convolution where it takes them; CPU devices as products."""
    info = device.info
    gpu = info.device_type == "gpu" and mm.tiled_fits(info)
    assert conv_ops.pointwise_products(info, 64, 784) is not gpu
    assert conv_ops.pointwise_products(info, 8, 784) and conv_ops.pointwise_products(info, 64, 9)
    if info.kernel_language == "python" or device.vendor_op("conv") is not None:
        return
    steps = _plan_steps(device, "conv", [(2, 64, 14, 14), (128, 64, 1, 1)], {})
    assert steps[0].spec.name.startswith("conv_tiled" if gpu else "gemm")


def _plan_steps(device, name, shapes, attrs):
    """The launches of ``name``'s plan on ``device`` for inputs of these shapes (float32) or arrays."""
    op = OPS[name]
    types = [TensorType.of(s.shape, s.dtype) if isinstance(s, np.ndarray) else TensorType.of(s, np.float32)
             for s in shapes]
    checked, outs = op.prepare(types, dict(attrs))
    return [s for s in plan_for(op, device, types, outs, checked).steps if getattr(s, "spec", None) is not None]


@pytest.mark.parametrize("edge", EDGES)
@pytest.mark.parametrize("channels", [6, 16])
def test_integer_convolution_tiles(device, rng, channels, edge):
    """conv_integer on the tiled kernel at each edge, K walked tap by tap where a group's channels fill whole
    slices (16) and element by element elsewhere (6): exact against NumPy, per-channel zero points, padding and
    stride, into a poisoned output."""
    _kernel_device(device)
    x = rng.integers(0, 256, (2, 2 * channels, 7, 9), dtype=np.uint8)
    w = rng.integers(0, 256, (36, channels, 3, 3), dtype=np.uint8)
    xz, wz = np.array(131, np.uint8), rng.integers(0, 256, 36, dtype=np.uint8)
    bias = rng.integers(-5000, 5000, 36, dtype=np.int32)
    attrs = {"group": 2, "pads": [1, 1, 0, 1], "strides": [1, 2]}
    op = OPS["conv_integer"]
    arrays = [x, w, xz, wz, bias]
    checked, outs = op.prepare([TensorType.of(a.shape, a.dtype) for a in arrays], dict(attrs))
    ins = [tensor(a, device) for a in arrays]
    out = poisoned(device, outs[0])
    try:
        with tiles.forcing(edge):
            defines = _tiled_defines(device, "conv_integer", arrays, attrs)
            run("conv_integer", ins, out=[out], **attrs)
        got = out.numpy()
    finally:
        for t in (*ins, out):
            device.pool.free(t.buffer)
    assert defines["TM"] == edge and defines["CINNER"] == int(channels % mm.BK == 0)
    np.testing.assert_array_equal(got, op.reference(arrays, checked)[0])


def _tiled_defines(device, name, shapes, attrs):
    specs = [s.spec for s in _plan_steps(device, name, shapes, attrs) if s.spec.shared]
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
    """GPUs take two stages of 8-deep slices in the tiled convolution, with vector reads of runs at micro-tiles of 4
    or more, and 4 x 8 micro-tiles for 64 channels at batch 16; other devices the plain pipeline."""
    _kernel_device(device)
    gpu = device.info.device_type == "gpu"
    assert conv_ops.conv_pipeline(device.info, "float", 4) == (conv_ops.GPU_CONV_PIPELINE if gpu else P())
    assert conv_ops.conv_pipeline(device.info, "float", 2) == (conv_ops.GPU_CONV_PIPELINE._replace(vec=0) if gpu
                                                               else P())
    assert conv_ops.conv_pipeline(device.info, "f64", 4) == P()
    if device.vendor_op("conv") is not None:
        return  # (the vendor library takes the convolution)
    defines = _tiled_defines(device, "conv", [(4, 64, 28, 28), (64, 64, 3, 3)], {"pads": [1, 1, 1, 1]})
    if defines is None:
        assert device.info.device_type == "cpu"  # (the register-blocked kernels)
        return
    assert (defines["BK"], defines["STAGES"], defines["VEC"]) == ((8, 2, 1) if gpu else (16, 1, 0))
    assert defines["CINNER"] == 1  # (64 channels: whole K slices within each tap)
    assert _tiled_defines(device, "conv", [(4, 24, 28, 28), (64, 24, 3, 3)], {"pads": [1, 1, 1, 1]})["CINNER"] == int(
        24 % defines["BK"] == 0)
    assert _tiled_defines(device, "conv_transpose", [(4, 64, 14, 14), (64, 64, 3, 3)], {})["CINNER"] == 0
    if gpu:  # (ResNet-50's 3x3 layer of 64 channels at batch 16: 64 x 128 tiles)
        wide = _tiled_defines(device, "conv", [(16, 64, 56, 56), (64, 64, 3, 3)], {"pads": [1, 1, 1, 1]})
        assert (wide["TM"], wide["TN"]) == (4, 8 if device.info.compute_units * 2 <= 392 else 4)


def test_channels_inner_rule():
    """K is walked tap by tap for forward convolutions whose group's channels are a multiple of the K slice."""
    assert conv_ops.channels_inner(False, 64, 8) == 1 and conv_ops.channels_inner(False, 64, 32) == 1
    assert conv_ops.channels_inner(False, 24, 16) == 0 and conv_ops.channels_inner(False, 3, 8) == 0
    assert conv_ops.channels_inner(True, 64, 8) == 0


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
