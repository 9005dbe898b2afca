"""The register-blocked product and convolution kernels (``shaders/gemm_register.dlk``, ``conv_register.dlk``,
``conv_rows.dlk``): the static rule on CPU devices, and forced (``tiles.forcing(tiles.REGISTER)``) on every kernel
device, against the float64 references, outputs poisoned with NaN before each run; edges of every block shape,
strided and transposed operands, batches, groups, windows, epilogues and element types."""

from __future__ import annotations

import math

import numpy as np
import pytest

from devicelayer.kernels import tiles
from devicelayer.kernels.op import OPS, Launch, TensorType
from devicelayer.kernels.ops import conv as conv_ops
from devicelayer.kernels.ops import matmul as mm
from devicelayer.kernels.runner import execute, programs
from devicelayer.ops import names  # noqa: F401  (registers the library)

from op_cases import reference64

# (op, input shapes, attrs): products and convolutions whose blocks end inside the output on every side
PRODUCTS = [
    ("matmul", [(70, 45), (45, 37)], {}),  # 8 x 8 blocks, ragged rows and columns
    ("matmul", [(2, 1, 9, 17), (3, 17, 20)], {}),  # broadcast batches
    ("matmul", [(3, 29), (29, 5)], {}),  # 1 x 4 blocks
    ("matmul", [(1, 300), (300, 1)], {}),  # 1 x 1
    ("matmul", [(0, 4), (4, 6)], {}),  # no rows
    ("gemm", [(45, 33), (70, 45), (70,)], {"transA": 1, "transB": 1, "alpha": 0.5}),  # strided columns of B
    ("gemm", [(16, 24), (24, 40), (16, 40)], {"beta": 2.0}),
    ("gemm", [(9, 0), (0, 11), (11,)], {"beta": 0.5}),  # K of 0: the bias only
]
CONVS = [
    ((2, 6, 9, 7), (34, 3, 3, 2), 34, {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1]}),
    ((1, 16, 15, 19), (24, 16, 3, 3), 24, {"pads": [1, 1, 1, 1]}),
    ((1, 8, 11, 23), (8, 8, 5, 5), None, {"dilations": [2, 1], "pads": [3, 2, 1, 4], "strides": [1, 3]}),
    ((2, 12, 13, 17), (12, 1, 3, 3), 12, {"group": 12, "pads": [1, 1, 1, 1]}),  # depthwise
    ((1, 10, 14, 30), (10, 1, 3, 3), 10, {"group": 10, "strides": [2, 2], "pads": [0, 1, 1, 0]}),
    ((1, 4, 9, 9), (12, 1, 5, 5), 12, {"group": 4, "dilations": [2, 2], "pads": [4, 4, 4, 4]}),  # 3 per group
    ((1, 6, 7, 3), (6, 1, 3, 3), None, {"group": 6, "pads": [2, 2, 2, 2]}),  # every tap past an edge
    ((3, 5, 33), (7, 5, 4), 7, {"strides": [2], "pads": [1, 2]}),  # 1-D
    ((1, 4, 5, 6, 7), (6, 2, 2, 3, 3), 6, {"group": 2, "pads": [1, 0, 1, 0, 1, 1]}),  # 3-D
    ((1, 8, 6, 6), (16, 8, 1, 1), 16, {}),  # 1x1: the product kernel
]


def _poisoned(device, t: TensorType):
    buf = device.pool.allocate(max(t.size * t.dtype.itemsize, t.dtype.itemsize), t.dtype)
    if t.size:
        fill = np.full(t.shape, np.nan if t.dtype.kind == "f" else -7, t.dtype)
        device.pool.upload(buf, fill).wait()
    return buf


def _forced(device, name, arrays, attrs, tol):
    """Run op ``name`` on ``device`` through its kernels with the register-blocked shape forced (no vendor
    library), outputs poisoned first; check against float64 and return the kernel specs that ran."""
    op = OPS[name]
    ins = [TensorType.of(a.shape, a.dtype) for a in arrays]
    checked, outs = op.prepare(ins, dict(attrs))
    why = op.unsupported(ins, checked, device.info)
    if why is not None:
        pytest.skip(why)
    with tiles.forcing(tiles.REGISTER):
        plan = op.plan(ins, outs, checked, device.info)
    bufs: list = []
    try:
        for a in arrays:
            bufs.append(device.pool.allocate(max(a.nbytes, a.dtype.itemsize), a.dtype))
            if a.size:
                device.pool.upload(bufs[-1], np.ascontiguousarray(a)).wait()
        out_bufs = [_poisoned(device, t) for t in outs]
        bufs += out_bufs
        temps = [_poisoned(device, t) for t in plan.temps]
        bufs += temps
        compiled = programs(op, device, plan, ins, outs, checked)
        execute(op, device, plan, ins, outs, checked, bufs[:len(arrays)], out_bufs, temps, [], compiled).wait()
        got = np.empty(outs[0].shape, outs[0].dtype)
        if got.size:
            device.pool.download(out_bufs[0], got).wait()
    finally:
        for b in bufs:
            device.pool.free(b)
    want = reference64(name, arrays, attrs)[0]
    scale = float(np.max(np.abs(want))) if want.size else 1.0
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * max(1.0, scale))
    return [s.spec for s in plan.steps if isinstance(s, Launch)]


def _kernel_device(device):
    if device.info.kernel_language == "python":
        pytest.skip("the host runs NumPy, not kernels")


def _registered(specs):
    assert specs and all(tiles.REGISTER_DEFINE in s.defines for s in specs), [s.name for s in specs]


@pytest.mark.parametrize("case", range(len(PRODUCTS)))
def test_products_on_the_register_kernels(device, rng, case):
    _kernel_device(device)
    name, shapes, attrs = PRODUCTS[case]
    arrays = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
    specs = _forced(device, name, arrays, attrs, 1e-4)
    if all(math.prod(s) for s in shapes[:2]):
        _registered(specs)


@pytest.mark.parametrize("summand, activation", [(False, None), (False, "relu"), (True, "swish")])
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_convolutions_on_the_register_kernels(device, rng, case, summand, activation):
    _kernel_device(device)
    x, w, bias, attrs = CONVS[case]
    arrays = [rng.uniform(-1, 1, x).astype(np.float32), rng.uniform(-1, 1, w).astype(np.float32)]
    if bias is not None or summand:
        arrays.append(rng.uniform(-1, 1, (w[0],)).astype(np.float32))
    attrs = dict(attrs, **({"activation": activation} if activation else {}))
    if summand:
        out = OPS["conv"].prepare([TensorType.of(a.shape, a.dtype) for a in arrays], dict(attrs))[1][0]
        arrays.append(rng.uniform(-1, 1, out.shape).astype(np.float32))
    specs = _forced(device, "conv", arrays, attrs, 1e-4)
    _registered(specs)
    depthwise = w[1] == 1 and not summand
    assert any("conv_rows" in s.name for s in specs) == depthwise  # one row a work item: one input channel, no Z


@pytest.mark.parametrize("dtype", ["float64", "float16"])
@pytest.mark.parametrize("case", [0, 3, 5])
def test_other_float_types_on_the_register_convolutions(device, rng, dtype, case):
    _kernel_device(device)
    if not device.info.supports(dtype):
        pytest.skip(f"{device.id} has no {dtype}")
    x, w, _, attrs = CONVS[case]
    arrays = [rng.uniform(-1, 1, s).astype(dtype) for s in (x, w, (w[0],))]
    _registered(_forced(device, "conv", arrays, dict(attrs, activation="relu"), 1e-2 if dtype == "float16" else 1e-10))


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_other_float_types_on_the_register_products(device, rng, dtype):
    _kernel_device(device)
    if not device.info.supports(dtype):
        pytest.skip(f"{device.id} has no {dtype}")
    a, b = rng.uniform(-1, 1, (19, 40)).astype(dtype), rng.uniform(-1, 1, (40, 13)).astype(dtype)
    _registered(_forced(device, "matmul", [a, b], {}, 1e-2 if dtype == "float16" else 1e-10))


def test_cpu_devices_take_the_register_kernels_and_other_devices_the_tiled_ones(device):
    """The static rule: a CPU device's products and convolutions run the register-blocked kernels; a GPU's the
    tiled ones; a forced tile edge runs the tiled kernels anywhere."""
    _kernel_device(device)
    ins = [TensorType.of((1, 16, 20, 20), np.float32), TensorType.of((32, 16, 3, 3), np.float32)]
    checked, outs = OPS["conv"].prepare(ins, {"pads": [1, 1, 1, 1], "activation": "hard_sigmoid"})
    spec = OPS["conv"].plan(ins, outs, checked, device.info).steps[0].spec
    assert (tiles.REGISTER_DEFINE in spec.defines) == (device.info.device_type == "cpu")
    assert mm.register_kernels(device.info) == (device.info.device_type == "cpu")
    with tiles.forcing(4):
        assert not mm.register_kernels(device.info)
        spec = OPS["conv"].plan(ins, outs, checked, device.info).steps[0].spec
        assert spec.shared and dict(spec.defines)["TM"] == 4
    with tiles.forcing(tiles.REGISTER):
        assert mm.register_kernels(device.info)


def test_block_shapes():
    assert mm.register_block(70, 37) == (8, 8)
    assert mm.register_block(5, 3) == (4, 1)
    assert mm.register_block(1, 1000) == (1, 8)
    assert conv_ops.register_block(64, 56) == (8, 8)
    assert conv_ops.register_block(1, 7) == (1, 8)  # a row of 7 as one block of 8
    assert conv_ops.register_block(12, 3) == (8, 1)


def test_a_work_group_size_leaves_several_groups_a_compute_unit(device):
    """Two sizes only (a CPU driver compiles a kernel once per work-group size): the device's SIMD width, and the
    larger where every compute unit gets four groups of it."""
    _kernel_device(device)
    for items in (1, 7, 100, 5000, 10**7):
        local = mm.register_local(device.info, items)
        lanes = min(device.info.subgroup_size or 1, mm.REGISTER_GROUP, device.info.max_work_group_size)
        assert local in (lanes, min(mm.REGISTER_GROUP, device.info.max_work_group_size))
        assert local == lanes or items // local >= 4 * device.info.compute_units
    assert mm.register_local(device.info, 10**7) > 1 or device.info.max_work_group_size == 1
