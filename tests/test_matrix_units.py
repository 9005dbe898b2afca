"""The tiled product and convolution kernels' MMA form (float16 multiplied on a device's matrix units, through the
dialect's MMA macros): float16 products and convolutions on every device that lists the unit, against NumPy in
float64 into poisoned outputs, with the plan checked to take the form; the GLSL form compiled to SPIR-V wherever a
shader compiler is present; the choice on described devices; the forced form on devices without units; misuse of
``forcing_pipeline``; ``DeviceInfo.matrix_units`` in ``info``."""

from __future__ import annotations

import dataclasses
import json
import math
import struct

import numpy as np
import pytest

from devicelayer.info import DeviceInfo
from devicelayer.kernels import tiles
from devicelayer.kernels.op import OPS, TensorType
from devicelayer.kernels.ops import conv as conv_ops
from devicelayer.kernels.ops import matmul as mm
from devicelayer.kernels.render import render
from devicelayer.kernels.runner import plan_for
from devicelayer.ops import names  # noqa: F401  (registers the library)
from devicelayer.tensors import tensor

from test_ops import poisoned
from test_tiled_pipelines import check_against_float64

#: (op, input shapes, attributes): aligned to the 128 x 128 tiles and 32-deep slices, ragged in every dimension,
#: batched and broadcast, Gemm's transposes with a bias, a product at the 64 x 64 tile, a deep ragged one
PRODUCTS = [
    ("matmul", [(256, 256), (256, 256)], {}),
    ("matmul", [(257, 200), (200, 131)], {}),
    ("matmul", [(3, 64, 48), (3, 48, 80)], {}),
    ("matmul", [(2, 1, 100, 33), (1, 4, 33, 17)], {}),
    ("gemm", [(40, 130), (66, 40), (1, 66)], {"transA": 1, "transB": 1, "alpha": 0.5, "beta": -2.0}),
    ("gemm", [(512, 384), (384, 640), (640,)], {"epilogue": (("relu", {}, (0,)),), "epilogue_inputs": 0}),
    ("matmul", [(96, 520), (520, 72)], {}),
    ("matmul", [(2, 128, 64), (2, 64, 128)], {}),
    ("gemm", [(256, 128), (192, 128)], {"transB": 1}),
    ("matmul", [(200, 640), (640, 136)], {}),
]
#: (op, input shapes, attributes): a 3x3 residual layer, a 1x1 one, a strided 7x7 stem, a grouped and dilated
#: one, a 1-D one, a transposed one, and a layer with its bias and ReLU
CONVS = [
    ("conv", [(2, 64, 20, 20), (64, 64, 3, 3), (64,)], {"pads": [1, 1, 1, 1]}),
    ("conv", [(2, 256, 14, 14), (128, 256, 1, 1), (128,)], {}),
    ("conv", [(2, 3, 45, 45), (64, 3, 7, 7), (64,)], {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ("conv", [(2, 64, 12, 12), (96, 16, 3, 3), (96,)], {"group": 4, "pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ("conv", [(3, 40, 50), (72, 40, 5), (72,)], {"pads": [2, 2]}),
    ("conv_transpose", [(1, 32, 9, 8), (32, 64, 3, 3), (64,)], {"strides": [2, 2], "pads": [1, 1, 0, 0]}),
    ("conv", [(4, 128, 16, 16), (160, 128, 3, 3), (160,)], {"pads": [1, 1, 1, 1], "activation": "relu"}),
]
#: the convolutions large enough for the MMA form (``mma_fits``: 64 or more output channels a group, output
#: positions and depth)
BIG_CONVS = (0, 1, 2, 4, 5, 6)
UNIT = mm.MMA_UNIT


def _info(**changes) -> DeviceInfo:
    """A GPU described as NVIDIA's Vulkan driver describes one with matrix units."""
    base = DeviceInfo(id="vulkan:0", backend="vulkan", index=0, name="described", vendor="NVIDIA",
                      device_type="gpu", driver_version="", api_version="Vulkan 1.3", kernel_language="glsl",
                      memory_total=1 << 34, max_allocation=1 << 32, compute_units=132, max_work_group_size=1024,
                      max_work_item_sizes=(1024, 1024, 64), subgroup_size=32, local_memory=49152,
                      dtypes=frozenset({"float16", "float32"}), unified_memory=False, view_alignment=16,
                      matrix_units=(UNIT,))
    return dataclasses.replace(base, **changes)


def _spec_defines(device_or_info, name, shapes, attrs, dtype=np.float16):
    """The defines of the tiled kernel a plan of ``name`` takes (None where it takes none)."""
    op = OPS[name]
    types = [TensorType.of(s, dtype) for s in shapes]
    checked, outs = op.prepare(types, dict(attrs))
    if isinstance(device_or_info, DeviceInfo):
        steps = op.plan(types, outs, checked, device_or_info).steps
    else:
        steps = plan_for(op, device_or_info, types, outs, checked).steps
    specs = [s.spec for s in steps if getattr(s, "spec", None) is not None and s.spec.shared]
    return dict(specs[0].defines) if specs else None


def _check(device, rng, name, shapes, attrs):
    # float32 accumulation, one rounding to float16 at the store
    check_against_float64(device, rng, name, shapes, attrs, np.float16, 2e-3)


def _units_device(device):
    if not mm.takes_mma(device.info, "f16"):
        pytest.skip(f"{device.id} lists no {UNIT[0]} -> {UNIT[1]} {UNIT[2]}x{UNIT[3]}x{UNIT[4]} matrix unit "
                    f"with subgroups of {mm.MMA_SUBGROUP} in a language with the MMA macros")


def _product(name, shapes, attrs):
    """(rows, columns, depth) of a matmul or gemm case."""
    a, b = shapes[0], shapes[1]
    if name == "gemm":
        (m, k), n = (a[::-1] if attrs.get("transA") else a), (b[0] if attrs.get("transB") else b[1])
        return m, n, k
    return a[-2], b[-1], a[-1]


@pytest.mark.parametrize("case", range(len(PRODUCTS)))
def test_products_on_matrix_units(device, rng, case):
    """Each product with the static choice and at 64 x 64 tiles: the MMA form wherever the product is large enough
    (``mma_fits``) and its tiles are 64 x 64 or more."""
    _units_device(device)
    name, shapes, attrs = PRODUCTS[case]
    if device.vendor_op(name) is None:
        defines = _spec_defines(device, name, shapes, attrs)
        assert defines["MMA"] == int(mm.mma_fits(*_product(name, shapes, attrs)) and defines["TM"] >= 4)
        with tiles.forcing(4):
            defines = _spec_defines(device, name, shapes, attrs)
        assert defines["MMA"] == int(mm.mma_fits(*_product(name, shapes, attrs)))
    _check(device, rng, name, shapes, attrs)
    with tiles.forcing(4):
        _check(device, rng, name, shapes, attrs)


#: how the MMA form reads and stages its slices: (vload, stage_words)
_SLICE_FORMS = {"elements": (0, 0), "words read": (1, 0), "words staged": (1, 1)}


@pytest.mark.parametrize("form", list(_SLICE_FORMS))
@pytest.mark.parametrize("bk", [16, 32, 64])
@pytest.mark.parametrize("stages", [1, 2])
@pytest.mark.parametrize("case", [0, 1, 4, 7, 8])
def test_forced_mma_pipelines(device, rng, case, stages, bk, form):
    """Each K slice and stage count of the MMA form, with slices read element by element or as 16-byte words
    (where the product is aligned and its rows whole words: cases 0 and 7), staged as elements or as those words,
    at both of its tile edges; a pipeline whose stages shared memory cannot hold runs the usual multiply."""
    _units_device(device)
    vload, words = _SLICE_FORMS[form]
    for edge in (4, 8):
        forced = mm.MMA_PIPELINE._replace(bk=bk, stages=stages, vload=vload, stage_words=words)
        with tiles.forcing(edge), mm.forcing_pipeline(forced):
            defines = _spec_defines(device, *PRODUCTS[case])
            if device.info.local_memory < mm.tiled_shared_bytes("f16", edge, bk, stages, True):
                assert (defines["MMA"], defines["BK"], defines["STAGE_WORDS"]) == (0, 16, 0)
            else:
                assert (defines["MMA"], defines["BK"], defines["STAGES"], defines["TM"]) == (1, bk, stages, edge)
                assert defines["VLOAD"] == int(bool(vload) and case in (0, 7))
                assert defines["STAGE_WORDS"] == int(bool(words) and defines["VLOAD"])
            _check(device, rng, *PRODUCTS[case])


@pytest.mark.parametrize("case", range(len(CONVS)))
def test_convolutions_on_matrix_units(device, rng, case):
    """Each convolution at the static tiles and forced to 64 x 64, 128 x 128 and 64 x 128 ones: the MMA form where it
    is large enough, in 64-deep slices where a group's input channels are whole slices of 64 (the 1x1 layer at
    128 x 128 tiles excepted)."""
    _units_device(device)
    name, shapes, attrs = CONVS[case]
    deep = name == "conv" and shapes[1][1] % 64 == 0 and math.prod(shapes[1][1:]) >= 256
    if device.vendor_op("conv") is None:
        for edge in (4, 8, tiles.WIDE_TILES[0]):
            with tiles.forcing(edge):
                defines = _spec_defines(device, name, shapes, attrs)
            one_tap = math.prod(shapes[1][2:]) == 1
            assert defines is not None and defines["MMA"] == int(case in BIG_CONVS)
            if defines["MMA"]:
                assert defines["BK"] == (64 if deep and not (edge == 8 and one_tap) else 16 if edge != 8 else 32)
    _check(device, rng, name, shapes, attrs)
    for edge in (4, 8, tiles.WIDE_TILES[0]):
        with tiles.forcing(edge):
            _check(device, rng, name, shapes, attrs)


@pytest.mark.parametrize("case", [0, 2])
def test_float32_stays_off_the_units(device, case):
    """The MMA form is for float16 operands: float32 products and convolutions keep the usual multiply."""
    _units_device(device)
    name, shapes, attrs = (PRODUCTS + CONVS)[case]
    if device.vendor_op(name) is not None:
        pytest.skip(f"{device.id}'s vendor library takes float32 {name}")
    defines = _spec_defines(device, name, shapes, attrs, np.float32)
    assert defines is None or defines.get("MMA", 0) == 0


@pytest.mark.parametrize("case", [1, 4])
def test_forced_form_elsewhere_is_the_usual_multiply(device, rng, case):
    """Forcing the MMA form on a device without the unit (or at the 32 x 32 tile) plans K slices of 16 on the usual
    multiply, and the results hold."""
    if device.info.kernel_language == "python":
        pytest.skip("the host runs products on NumPy, not the tiled kernels")
    if "float16" not in device.info.dtypes:
        pytest.skip(f"{device.id} has no float16")
    if device.vendor_op(PRODUCTS[case][0]) is not None:
        pytest.skip(f"{device.id}'s vendor library takes {PRODUCTS[case][0]}")
    edges = (2,) if mm.takes_mma(device.info, "f16") else (2, 4, 8)
    for edge in edges:
        with tiles.forcing(edge), mm.forcing_pipeline(mm.MMA_PIPELINE):
            defines = _spec_defines(device, *PRODUCTS[case])
            assert (defines["MMA"], defines["BK"]) == (0, 16)
            _check(device, rng, *PRODUCTS[case])


# -- the GLSL form, compiled -------------------------------------------------------------------------------------
def _mma_specs():
    info = _info()
    specs = []
    big = ("gemm", [(2048, 1536), (1536, 2048), (2048,)], {"epilogue": (("relu", {}, (0,)),), "epilogue_inputs": 0})
    for name, shapes, attrs in (big, PRODUCTS[1], CONVS[0], CONVS[5], CONVS[6]):
        op = OPS[name]
        types = [TensorType.of(s, np.float16) for s in shapes]
        checked, outs = op.prepare(types, dict(attrs))
        with tiles.forcing(8 if name == "gemm" else 4):
            # (the tiled kernels: a convolution split along K also plans the sum of its parts)
            specs += [s.spec for s in op.plan(types, outs, checked, info).steps if s.spec.shared]
    name, shapes, attrs = big
    types = [TensorType.of(s, np.float16) for s in shapes]
    checked, outs = OPS[name].prepare(types, dict(attrs))
    for forced in (mm.MMA_PIPELINE._replace(bk=64, stages=1), mm.MMA_PIPELINE._replace(stage_words=0)):
        with tiles.forcing(8), mm.forcing_pipeline(forced):
            specs += [s.spec for s in OPS[name].plan(types, outs, checked, info).steps if s.spec.shared]
    return specs


def test_glsl_form_compiles_to_cooperative_matrices():
    """The MMA form's GLSL compiles (through the Vulkan backend's compiler) to SPIR-V declaring the
    CooperativeMatrixNV capability, for 128 x 128 and 64 x 64 tiles, products and convolutions, with epilogues."""
    spirv = pytest.importorskip("backends.vulkan.spirv")
    specs = _mma_specs()
    assert {dict(s.defines)["TM"] for s in specs} == {4, 8} and all(dict(s.defines)["MMA"] == 1 for s in specs)
    assert {(d["BK"], d["STAGE_WORDS"]) for d in map(dict, (s.defines for s in specs)) if d.get("VLOAD")} == {
        (32, 1), (64, 1), (32, 0)}
    for spec in specs:
        if not spirv.compiler_version():
            pytest.skip("no GLSL compiler (libshaderc or glslc)")
        words = spirv.compile_glsl(render(spec, "glsl"), filename=f"{spec.name}.comp")
        code = struct.unpack(f"<{len(words) // 4}I", words)
        capabilities = {code[i + 1] for i in range(5, len(code) - 1) if code[i] == (2 << 16) | 17}
        assert 5357 in capabilities, spec.name  # CooperativeMatrixNV


def test_other_languages_have_no_mma_form():
    for language in ("opencl-c", "cuda-c", "python"):
        assert not mm.takes_mma(_info(kernel_language=language), "f16")


# -- the choice on described devices -------------------------------------------------------------------------------
def test_choice_on_described_devices():
    info = _info()
    assert mm.takes_mma(info, "f16")
    for elem in ("float", "bf16", "f64", "int"):
        assert not mm.takes_mma(info, elem)
    for other in (_info(matrix_units=()), _info(subgroup_size=16), _info(matrix_units=(("float16", "float16", 16, 16, 16),))):
        assert not mm.takes_mma(other, "f16")
    big = _spec_defines(info, "matmul", [(4096, 4096), (4096, 4096)], {})
    assert (big["MMA"], big["TM"], big["BK"], big["STAGES"], big["PREFETCH"], big["ALIGNED"]) == (1, 8, 32, 2, 1, 1)
    assert big["VLOAD"] == 1
    transposed = _spec_defines(info, "gemm", [(4096, 4096), (4096, 4096)], {"transA": 1, "transB": 1})
    assert (transposed["MMA"], transposed["TM"], transposed["A_MFAST"], transposed["B_NFAST"]) == (1, 8, 1, 0)
    assert transposed["VLOAD"] == 0  # (rows along m and k: read element by element)
    assert _spec_defines(info, "matmul", [(4096, 4104), (4104, 4096)], {})["VLOAD"] == 0  # (K % 32)
    assert _spec_defines(info, "matmul", [(2, 2048, 2048), (2048, 2048)], {})["VLOAD"] == 1
    assert _spec_defines(_info(view_alignment=4), "matmul", [(4096, 4096), (4096, 4096)], {})["VLOAD"] == 0
    small = _spec_defines(info, "matmul", [(96, 80), (80, 72)], {})
    assert (small["MMA"], small["TM"]) == (0, 2)  # (the static rule's 32 x 32 tiles: too few of 64 x 64)
    middle = _spec_defines(info, "matmul", [(64, 4096, 80), (80, 72)], {})
    assert (middle["MMA"], middle["TM"], middle["BK"], middle["ALIGNED"]) == (1, 4, mm.MMA_SMALL_BK, 0)
    assert _spec_defines(info, "matmul", [(4096, 48), (48, 4096)], {})["MMA"] == 0  # (too shallow)
    assert _spec_defines(info, "matmul", [(4096, 4096), (4096, 40)], {})["MMA"] == 0  # (too few columns)
    assert _spec_defines(info, "matmul", [(4096, 4096), (4096, 4096)], {}, np.float32)["MMA"] == 0
    # deep products at 64 x 64 tiles: 64-deep slices through one stage, where K is whole slices of 64
    deep = _spec_defines(info, "matmul", [(2048, 3072), (3072, 768)], {})
    assert (deep["MMA"], deep["TM"], deep["BK"], deep["STAGES"], deep["VLOAD"]) == (1, 4, 64, 1, 1)
    assert _spec_defines(info, "matmul", [(2048, 336), (336, 768)], {})["BK"] == mm.MMA_SMALL_BK  # (K % 64)
    assert _spec_defines(info, "matmul", [(2048, 192), (192, 768)], {})["BK"] == mm.MMA_SMALL_BK  # (3 slices)
    assert _spec_defines(info, "matmul", [(8192, 4096), (4096, 8192)], {})["BK"] == 32  # (128 x 128 tiles)
    assert conv_ops.conv_pipeline(info, "f16", 8) == conv_ops.MMA_CONV_PIPELINE
    assert conv_ops.conv_pipeline(info, "f16", 4) == conv_ops.MMA_CONV_PIPELINE._replace(bk=mm.MMA_SMALL_BK)
    # convolutions: deep where a group's input channels are whole slices of 64, at both edges (1x1 layers at
    # 64 x 64 tiles only)
    for edge in (4, 8):
        assert conv_ops.conv_pipeline(info, "f16", edge, (256, 3136, 2304), 256) == \
            conv_ops.MMA_CONV_PIPELINE._replace(bk=64, stages=1)
        for product, channels in (((256, 3136, 864), 96), ((256, 3136, 64), 64), ((256, 3136, 576), 0)):
            assert conv_ops.conv_pipeline(info, "f16", edge, product, channels).bk == (16 if edge == 4 else 32)
    assert conv_ops.conv_pipeline(info, "f16", 4, (256, 3136, 1024), 1024).bk == 64
    assert conv_ops.conv_pipeline(info, "f16", 8, (256, 3136, 1024), 1024) == conv_ops.MMA_CONV_PIPELINE
    stem = _spec_defines(info, "conv", [(16, 3, 224, 224), (64, 3, 7, 7)], {"strides": [2, 2], "pads": [3] * 4})
    assert stem["BK"] != 64
    layer = _spec_defines(info, "conv", [(16, 256, 14, 14), (256, 256, 3, 3)], {"pads": [1] * 4})
    assert (layer["MMA"], layer["BK"], layer["STAGES"], layer["CINNER"]) == (1, 64, 1, 1)
    assert conv_ops.conv_pipeline(info, "f16", 2) == conv_ops.GPU_CONV_PIPELINE._replace(vec=0)
    assert conv_ops.conv_pipeline(info, "float", 8) == conv_ops.GPU_CONV_PIPELINE
    # too little shared memory for the form's stages and scratch: the usual multiply
    tight = _info(local_memory=32768)
    assert mm.gemm_pipeline(tight, "f16", 8, 4096, 4096, 4096).mma == 0
    assert conv_ops.conv_pipeline(tight, "f16", 8).mma == 0


def test_shared_memory_of_the_form():
    """Slices staged in float16 (rows padded by 8) and a 16 x 20 float scratch per subgroup: 48,128 bytes at
    128 x 128 tiles with two 32-deep stages."""
    assert mm.tiled_shared_bytes("f16", 8, 32, 2, True) == 2 * (128 * 40 + 32 * 136) * 2 + 8 * 16 * 20 * 4
    # staged as 16-byte words: the same bytes, an eighth of the entries
    elements, words = mm.tiled_shared("f16", 8, 32, 2, True), mm.tiled_shared("f16", 8, 32, 2, True, words=True)
    assert [("u32x4", n, c // 8) for _, n, c in elements[:2]] == list(words[:2])
    assert elements[2] == words[2]
    assert mm.tiled_shared_bytes("float", 4) == 4 * 16 * 68 * 2


# -- misuse ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [mm.Pipeline(bk=32), mm.Pipeline(bk=64), mm.MMA_PIPELINE._replace(bk=8),
                                 mm.MMA_PIPELINE._replace(bk=128), mm.Pipeline(vload=1),
                                 mm.MMA_PIPELINE._replace(vload=0), mm.Pipeline(mma=1, prefetch=1, stage_words=1),
                                 mm.MMA_PIPELINE._replace(prefetch=0),
                                 mm.MMA_PIPELINE._replace(vec=1), mm.MMA_PIPELINE._replace(stages=3)])
def test_forcing_refuses_forms_the_kernels_do_not_take(bad):
    with pytest.raises(ValueError, match="pipeline"):
        with mm.forcing_pipeline(bad):
            pass
    assert mm.forced_pipeline() is None


# -- DeviceInfo ------------------------------------------------------------------------------------------------
def test_matrix_units_in_info(device):
    info = device.info
    assert isinstance(info.matrix_units, tuple)
    for unit in info.matrix_units:
        a, c, m, n, k = unit
        assert a in info.dtypes or a in ("int8", "uint8"), unit
        assert c in ("float16", "float32", "float64", "int32", "uint32") and min(m, n, k) > 0
    doc = json.loads(json.dumps(info.as_dict()))
    assert doc["matrix_units"] == [list(u) for u in info.matrix_units]
    if info.kernel_language != "glsl":
        assert info.matrix_units == ()  # (only the Vulkan backend reads them today)


def test_info_document_lists_matrix_units(device):
    from devicelayer.cli import device_document

    doc = device_document(device.info, 0)
    assert doc["matrix_units"] == [list(u) for u in device.info.matrix_units]


# -- views of input buffers as 16-byte words (KernelSpec.views) -----------------------------------------------------
def test_buffer_views_read_words(device, rng):
    """A kernel reading an input both element by element and through its view of 16-byte words sees the same
    bytes (in GLSL the view is a second block on the buffer's binding)."""
    if device.info.kernel_language == "python":
        pytest.skip("the host runs no dialect kernels")
    from devicelayer.kernels.dialect import KernelSpec, Param
    from devicelayer.kernels.runner import program_for

    body = """    FOR_EACH(i, n) {
        y[i] = x_v4[i].x + x_v4[i].w * 3u + x[4 * i + 1];
    }"""
    spec = KernelSpec("view_words", (Param("x", "uint", "in"), Param("y", "uint", "out"), Param("n", "int", "scalar")),
                      body, elem="uint", views=("x",))
    words = 1000
    x = rng.integers(0, 1 << 20, 4 * words, dtype=np.uint32)
    tx = tensor(x, device)
    out = poisoned(device, TensorType.of((words,), np.uint32))
    try:
        program = program_for(device, spec)
        local = 64
        device.launch(program, [tx.buffer, out.buffer, words], (-(-words // local) * local,), (local,),
                      wait=[tx.ready, out.ready]).wait()
        got = out.numpy()
    finally:
        for t in (tx, out):
            device.pool.free(t.buffer)
    w = x.reshape(words, 4)
    np.testing.assert_array_equal(got, w[:, 0] + w[:, 3] * np.uint32(3) + w[:, 1])


def test_shared_words(device, rng):
    """A shared array of 16-byte words (``dialect.WORD``) holds a word stored whole: each work item stores one word
    read through a view and reads back its neighbour's, in every kernel language."""
    if device.info.kernel_language == "python":
        pytest.skip("the host runs no dialect kernels")
    from devicelayer.kernels.dialect import WORD, KernelSpec, Param
    from devicelayer.kernels.runner import program_for

    local = 64
    body = f"""    const int l = LID(0);
    const int i = GROUP(0) * {local} + l;
    sw[l] = x_v4[i];
    BARRIER();
    const int j = GROUP(0) * {local} + (l + 1) % {local};
    y[4 * i] = sw[(l + 1) % {local}].x;
    y[4 * i + 1] = sw[(l + 1) % {local}].y + 1u;
    y[4 * i + 2] = sw[(l + 1) % {local}].z + CAST(uint, j);
    y[4 * i + 3] = sw[(l + 1) % {local}].w;"""
    spec = KernelSpec("shared_words", (Param("x", "uint", "in"), Param("y", "uint", "out")), body, elem="uint",
                      views=("x",), shared=((WORD, "sw", local),), local_size=(local,))
    groups = 7
    x = rng.integers(0, 1 << 20, 4 * local * groups, dtype=np.uint32)
    tx = tensor(x, device)
    out = poisoned(device, TensorType.of(x.shape, np.uint32))
    try:
        device.launch(program_for(device, spec), [tx.buffer, out.buffer], (groups * local,), (local,),
                      wait=[tx.ready, out.ready]).wait()
        got = out.numpy().reshape(groups, local, 4)
    finally:
        for t in (tx, out):
            device.pool.free(t.buffer)
    want = np.roll(x.reshape(groups, local, 4), -1, axis=1)
    want[:, :, 1] += np.uint32(1)
    want[:, :, 2] += ((np.arange(local) + 1) % local + local * np.arange(groups)[:, None]).astype(np.uint32)
    np.testing.assert_array_equal(got, want)


def test_views_must_name_input_buffers():
    from devicelayer.kernels.dialect import KernelSpec, Param

    params = (Param("x", "uint", "in"), Param("y", "uint", "out"), Param("n", "int", "scalar"))
    for bad in (("y",), ("n",), ("z",)):
        with pytest.raises(ValueError, match="view"):
            KernelSpec("bad_view", params, "", elem="uint", views=bad)
