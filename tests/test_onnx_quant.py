"""ONNX converters of quantization, quantized products, pooling, convolution edge cases, Einsum and the image
ops, on every device, against onnxruntime (ONNX's reference evaluator where onnxruntime refuses the case);
the float8/int4 host references against ONNX's; and the misuse cases, each naming the node, the device
still usable after."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import devicelayer.onnx as dlo  # noqa: E402
from devicelayer.kernels.op import OPS, TensorType  # noqa: E402
from devicelayer.onnx.testing import make_model, onnxruntime_run  # noqa: E402

R = np.random.default_rng(2024)


def f32(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, shape).astype(np.float32)


def ints(dtype, *shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    return R.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1, shape).astype(dtype)


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), name=f"the_{op.lower()}", **attrs)


class Case:
    """One model: inputs fed at run time, initializers, the reference (onnxruntime, ONNX's evaluator, or a
    function of the inputs) and the tolerance (integer outputs compare exactly)."""

    def __init__(self, name, nodes, inputs, outputs=("y",), inits=None, opset=21, tol=1e-4, ref="ort"):
        self.name, self.nodes, self.inputs, self.outputs = name, nodes, inputs, list(outputs)
        self.inits, self.opset, self.tol, self.ref = inits or {}, opset, tol, ref

    def model(self):
        return make_model(self.nodes if isinstance(self.nodes, list) else [self.nodes], self.inputs, self.outputs,
                          self.inits, self.opset)


def _einsum(equation, *shapes, opset=12):
    ins = {f"x{i}": f32(*s) for i, s in enumerate(shapes)}
    return Case(f"Einsum[{equation}]", node("Einsum", list(ins), equation=equation), ins, opset=opset)


def _per_row(case):
    a, b = case.inputs["a"], case.inputs["b"]
    az, bz = case.inits["az"], case.inits["bz"]
    return {"y": ((a.astype(np.int64) - az[:, None]) @ (b.astype(np.int64) - bz)).astype(np.int32)}


def _transpose_past_natural(case):
    """ConvTranspose with an output_shape past the natural output: the natural output (onnxruntime, no
    output_shape) inside a field of the bias, placed by the spec's split of the (negative) total padding."""
    nd = case.nodes
    attrs = {a.name: helper.get_attribute_value(a) for a in nd.attribute}
    shape, upper = attrs.pop("output_shape"), attrs.pop("auto_pad", b"NOTSET") == b"SAME_UPPER"
    plain = make_model([helper.make_node("ConvTranspose", list(nd.input), ["y"], **attrs)], case.inputs, ["y"],
                       case.inits, case.opset)
    natural = onnxruntime_run(plain, case.inputs)["y"]
    bias = case.inits["b"] if "b" in case.inits else np.zeros(natural.shape[1], np.float32)
    y = np.broadcast_to(bias.reshape(1, -1, 1, 1), natural.shape[:2] + tuple(shape)).copy()
    begins = []
    for n, want in zip(natural.shape[2:], shape):
        total = n - want
        begins.append(-(total // 2 if upper else total - total // 2))
    y[(slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(begins, natural.shape[2:]))] = natural
    return {"y": y}


CASES = [
    # quantize / dequantize
    Case("QuantizeLinear_tensor_uint8", node("QuantizeLinear", ["x", "s", "z"]), {"x": f32(3, 5, lo=-30, hi=30)},
         inits={"s": np.float32(0.25), "z": np.uint8(128)}, opset=13),
    Case("QuantizeLinear_saturate_int8_op10", node("QuantizeLinear", ["x", "s", "z"]), {"x": f32(40, lo=-100, hi=100)},
         inits={"s": np.float32(0.5), "z": np.int8(-3)}, opset=10),
    Case("QuantizeLinear_default_uint8", node("QuantizeLinear", ["x", "s"]), {"x": f32(12, lo=-10, hi=90)},
         inits={"s": np.float32(0.3)}, opset=13),
    Case("QuantizeLinear_axis", node("QuantizeLinear", ["x", "s", "z"], axis=1), {"x": f32(2, 3, 4, lo=-5, hi=5)},
         inits={"s": np.array([0.1, 0.2, 0.05], np.float32), "z": np.array([0, -4, 9], np.int8)}, opset=13),
    Case("QuantizeLinear_runtime_scale", node("QuantizeLinear", ["x", "s", "z"], axis=0),
         {"x": f32(4, 6, lo=-5, hi=5), "s": f32(4, lo=0.05, hi=0.2), "z": ints(np.uint8, 4)}, opset=13),
    Case("QuantizeLinear_blocked", node("QuantizeLinear", ["x", "s", "z"], axis=1, block_size=3),
         {"x": f32(3, 7, lo=-5, hi=5)}, inits={"s": f32(3, 3, lo=0.05, hi=0.2), "z": ints(np.int16, 3, 3)}),
    Case("QuantizeLinear_output_dtype", node("QuantizeLinear", ["x", "s"], output_dtype=TensorProto.UINT16),
         {"x": f32(9, lo=0, hi=5000)}, inits={"s": np.float32(0.125)}),
    Case("DequantizeLinear_tensor", node("DequantizeLinear", ["x", "s", "z"]), {"x": ints(np.uint8, 4, 5)},
         inits={"s": np.float32(0.02), "z": np.uint8(7)}, opset=13),
    Case("DequantizeLinear_int32", node("DequantizeLinear", ["x", "s"]), {"x": ints(np.int32, 7, lo=-9999, hi=9999)},
         inits={"s": np.float32(0.5)}, opset=10),
    Case("DequantizeLinear_axis", node("DequantizeLinear", ["x", "s", "z"], axis=-1), {"x": ints(np.int8, 2, 3, 4)},
         inits={"s": f32(4, lo=0.01, hi=1), "z": ints(np.int8, 4)}, opset=13),
    Case("DequantizeLinear_blocked", node("DequantizeLinear", ["x", "s", "z"], axis=0, block_size=2),
         {"x": ints(np.int16, 5, 3)}, inits={"s": f32(3, 3, lo=0.01, hi=1), "z": ints(np.int16, 3, 3)}),
    Case("DynamicQuantizeLinear", node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"]), {"x": f32(4, 7, lo=-3, hi=5)},
         outputs=["y", "s", "z"], opset=11),
    # quantized products
    Case("MatMulInteger", node("MatMulInteger", ["a", "b", "az", "bz"]), {"a": ints(np.uint8, 2, 5, 9),
                                                                         "b": ints(np.uint8, 9, 4)},
         inits={"az": np.uint8(12), "bz": ints(np.uint8, 4)}, opset=10),
    Case("MatMulInteger_int8_no_zero_points", node("MatMulInteger", ["a", "b"]), {"a": ints(np.int8, 6, 7),
                                                                                 "b": ints(np.int8, 7, 3)}, opset=10),
    Case("MatMulInteger_per_row", node("MatMulInteger", ["a", "b", "az", "bz"]), {"a": ints(np.uint8, 5, 9),
                                                                                 "b": ints(np.uint8, 9, 4)},
         inits={"az": ints(np.uint8, 5), "bz": ints(np.uint8, 4)}, opset=10, ref=_per_row),
    Case("ConvInteger_pads_strides", node("ConvInteger", ["x", "w", "xz"], pads=[1, 1, 1, 1], strides=[2, 1]),
         {"x": ints(np.uint8, 1, 3, 7, 6), "w": ints(np.uint8, 4, 3, 3, 3)}, inits={"xz": np.uint8(100)}, opset=10),
    Case("ConvInteger_per_channel", node("ConvInteger", ["x", "w", "xz", "wz"], group=2),
         {"x": ints(np.uint8, 2, 4, 5, 5), "w": ints(np.uint8, 6, 2, 2, 2)},
         inits={"xz": np.uint8(3), "wz": ints(np.uint8, 6)}, opset=10, ref="onnx"),
    Case("QLinearMatMul_3d", node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]),
         {"a": ints(np.uint8, 2, 3, 8), "b": ints(np.uint8, 8, 5)},
         inits={"as": np.float32(0.02), "az": np.uint8(120), "bs": np.float32(0.03), "bz": np.uint8(130),
                "ys": np.float32(0.05), "yz": np.uint8(127)}, opset=10),
    Case("QLinearMatMul_per_column_runtime_scales",
         node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]),
         {"a": ints(np.int8, 4, 6), "as": np.array(0.05, np.float32), "b": ints(np.int8, 6, 3),
          "bs": f32(3, lo=0.01, hi=0.05)},
         inits={"az": np.int8(1), "bz": ints(np.int8, 3, lo=-3, hi=3), "ys": np.float32(0.7), "yz": np.int8(-5)},
         opset=10),
    # (onnxruntime's uint8 x int8 kernel saturates int16 pair sums on CPUs without VNNI: ONNX's reference there)
    Case("QLinearConv_per_channel_bias", node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                                              pads=[1, 1, 1, 1]),
         {"x": ints(np.uint8, 1, 3, 6, 6)},
         inits={"xs": np.float32(0.02), "xz": np.uint8(128), "w": ints(np.int8, 4, 3, 3, 3),
                "ws": f32(4, lo=0.005, hi=0.02), "wz": np.zeros(4, np.int8), "ys": np.float32(0.1),
                "yz": np.uint8(100), "b": ints(np.int32, 4, lo=-500, hi=500)}, opset=10, ref="onnx"),
    Case("QLinearConv_uint8_strides_group", node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"],
                                                 strides=[2, 2], group=2),
         {"x": ints(np.uint8, 2, 4, 7, 7)},
         inits={"xs": np.float32(0.03), "xz": np.uint8(120), "w": ints(np.uint8, 6, 2, 3, 3),
                "ws": np.float32(0.01), "wz": np.uint8(128), "ys": np.float32(0.2), "yz": np.uint8(90)}, opset=10),
    # pooling
    Case("LpPool_p3_pads_strides", node("LpPool", ["x"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=3),
         {"x": f32(2, 3, 8, 7)}, opset=18),
    Case("LpPool_same_upper_1d", node("LpPool", ["x"], kernel_shape=[3], auto_pad="SAME_UPPER", p=2),
         {"x": f32(1, 2, 9)}, opset=18),
    Case("LpPool_op11", node("LpPool", ["x"], kernel_shape=[2, 2], strides=[2, 2]), {"x": f32(1, 2, 6, 6)}, opset=11),
    Case("MaxPool_indices", node("MaxPool", ["x"], ["y", "i"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         {"x": f32(2, 3, 9, 8)}, outputs=["y", "i"], opset=12),
    Case("MaxPool_indices_column_major", node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], storage_order=1),
         {"x": f32(1, 2, 5, 6)}, outputs=["y", "i"], opset=12),
    Case("MaxPool_int8", node("MaxPool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]),
         {"x": ints(np.int8, 1, 3, 7, 7)}, opset=12),
    Case("MaxPool_uint8_indices", node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 3]),
         {"x": ints(np.uint8, 1, 2, 5, 7, lo=0, hi=5)}, outputs=["y", "i"], opset=12),
    Case("MaxUnpool", node("MaxUnpool", ["x", "i"], kernel_shape=[2, 2], strides=[2, 2]),
         {"x": f32(1, 2, 2, 3), "i": np.array([[[[0, 3, 5], [13, 14, 23]], [[25, 27, 29], [32, 38, 47]]]], np.int64)},
         opset=11),
    Case("MaxUnpool_output_shape", node("MaxUnpool", ["x", "i", "s"], kernel_shape=[2, 2], strides=[2, 2]),
         {"x": f32(1, 1, 2, 2), "i": np.array([[[[5, 7], [13, 15]]]], np.int64)}, inits={"s": np.array([1, 1, 5, 5])},
         opset=11, ref="onnx"),
    # convolutions and depth/space
    # (onnxruntime and ONNX's evaluator refuse an output_shape past the natural output, which the spec pads)
    Case("ConvTranspose_output_shape_past_natural", node("ConvTranspose", ["x", "w", "b"], strides=[3, 2],
                                                         output_shape=[12, 9]),
         {"x": f32(1, 2, 3, 3)}, inits={"w": f32(2, 3, 3, 3), "b": f32(3)}, opset=17, ref=_transpose_past_natural),
    Case("ConvTranspose_output_shape_same_upper", node("ConvTranspose", ["x", "w"], strides=[2, 2],
                                                       auto_pad="SAME_UPPER", output_shape=[10, 11]),
         {"x": f32(1, 2, 4, 4)}, inits={"w": f32(2, 3, 3, 3)}, opset=17, ref=_transpose_past_natural),
    Case("CausalConvWithState_past_silu", node("CausalConvWithState", ["x", "w", "b", "p"], ["y", "s"],
                                               activation="silu"),
         {"x": f32(2, 5, 7), "p": f32(2, 5, 3)}, outputs=["y", "s"], inits={"w": f32(5, 1, 4), "b": f32(5)},
         opset=27, ref="onnx"),
    Case("CausalConvWithState_short_input", node("CausalConvWithState", ["x", "w"], ["y", "s"]),
         {"x": f32(1, 3, 2)}, outputs=["y", "s"], inits={"w": f32(3, 1, 5)}, opset=27, ref="onnx"),
    Case("SpaceToDepth_CRD", node("SpaceToDepth", ["x"], blocksize=2, mode="CRD"), {"x": f32(2, 3, 4, 6)}, opset=28),
    Case("SpaceToDepth_DCR", node("SpaceToDepth", ["x"], blocksize=3), {"x": f32(1, 2, 6, 9)}, opset=13),
    Case("DepthToSpace_CRD_SpaceToDepth_CRD", [node("DepthToSpace", ["x"], ["t"], blocksize=2, mode="CRD"),
                                               node("SpaceToDepth", ["t"], blocksize=2, mode="CRD")],
         {"x": f32(1, 8, 3, 2)}, opset=28),
    # Einsum
    _einsum("ij,jk->ik", (3, 4), (4, 5)),
    _einsum("bij,bjk->bik", (2, 3, 4), (2, 4, 5)),
    _einsum("ii->i", (4, 4)),
    _einsum("ii", (5, 5)),
    _einsum("iij->ji", (3, 3, 4)),
    _einsum("...ii->...i", (2, 3, 4, 4)),
    _einsum("i,i", (6,), (6,)),
    _einsum("i,j->ij", (3,), (4,)),
    _einsum("ij->", (3, 4)),
    _einsum("ij", (3, 4)),
    _einsum("ji", (3, 4)),
    _einsum("...j,jk", (2, 3, 4), (4, 5)),
    _einsum("b...ij,b...jk->b...ik", (2, 3, 4, 5), (2, 1, 5, 2)),
    _einsum("ij,jk,kl->il", (2, 3), (3, 4), (4, 5)),
    _einsum("abc,cd,bd->ad", (2, 3, 4), (4, 5), (3, 5)),
    _einsum("ijk,ikl->jl", (3, 2, 4), (3, 4, 5)),
    _einsum("bhqd,bhkd->bhqk", (2, 3, 5, 8), (2, 3, 6, 8)),
    _einsum("ij,kj->ikj", (3, 4), (5, 4)),
    _einsum("i,ij,j->", (4,), (4, 5), (5,)),
    # image ops
    Case("GridSample_bilinear_zeros", node("GridSample", ["x", "g"]), {"x": f32(2, 3, 5, 6), "g": f32(2, 4, 7, 2,
                                                                                                    lo=-1.3, hi=1.3)},
         opset=16),
    Case("GridSample_bicubic_reflection_align", node("GridSample", ["x", "g"], mode="bicubic",
                                                     padding_mode="reflection", align_corners=1),
         {"x": f32(1, 2, 5, 6), "g": f32(1, 3, 4, 2, lo=-1.3, hi=1.3)}, opset=16),
    # (cubic with border padding: the spec and ONNX's reference take the border value for a location outside;
    # onnxruntime, as PyTorch, clamps each tap instead)
    Case("GridSample_cubic_border_align", node("GridSample", ["x", "g"], mode="cubic", padding_mode="border",
                                               align_corners=1),
         {"x": f32(1, 2, 5, 6), "g": f32(1, 3, 4, 2, lo=-1.3, hi=1.3)}, opset=20, ref="onnx"),
    Case("GridSample_nearest_reflection", node("GridSample", ["x", "g"], mode="nearest", padding_mode="reflection"),
         {"x": f32(1, 2, 5, 6), "g": f32(1, 3, 4, 2, lo=-1.7, hi=1.7)}, opset=20),
    Case("GridSample_3d_linear", node("GridSample", ["x", "g"], mode="linear", padding_mode="reflection"),
         {"x": f32(1, 2, 3, 4, 5), "g": f32(1, 2, 3, 4, 3, lo=-1.3, hi=1.3)}, opset=20),
    Case("GridSample_3d_cubic", node("GridSample", ["x", "g"], mode="cubic"),
         {"x": f32(1, 2, 3, 4, 5), "g": f32(1, 2, 3, 4, 3, lo=-1.1, hi=1.1)}, opset=20, ref="onnx"),
    Case("AffineGrid_2d", node("AffineGrid", ["t", "s"]), {"t": f32(2, 2, 3)}, inits={"s": np.array([2, 3, 5, 6])},
         opset=20),
    Case("AffineGrid_3d_align", node("AffineGrid", ["t", "s"], align_corners=1), {"t": f32(2, 3, 4)},
         inits={"s": np.array([2, 1, 3, 4, 5])}, opset=20),
    Case("AffineGrid_into_GridSample", [node("AffineGrid", ["t", "s"], ["g"]), node("GridSample", ["x", "g"])],
         {"t": f32(2, 2, 3, lo=-1, hi=1), "x": f32(2, 3, 6, 7)}, inits={"s": np.array([2, 3, 4, 5])}, opset=20),
    Case("RoiAlign_avg_op16", node("RoiAlign", ["x", "r", "b"], output_height=3, output_width=4, sampling_ratio=2,
                                   spatial_scale=0.5),
         {"x": f32(2, 3, 12, 10), "r": np.array([[0, 0, 9, 9], [2, 4, 15, 18], [5, 5, 8, 6]], np.float32),
          "b": np.array([0, 1, 1], np.int64)}, opset=16),
    Case("RoiAlign_max_adaptive_op10", node("RoiAlign", ["x", "r", "b"], mode="max", output_height=2, output_width=2),
         {"x": f32(1, 2, 10, 10), "r": np.array([[1, 1, 8, 6], [0, 3, 4, 9.5]], np.float32),
          "b": np.array([0, 0], np.int64)}, opset=10),
    Case("DeformConv_mask_bias_groups", node("DeformConv", ["x", "w", "o", "b", "m"], group=2, offset_group=2,
                                             pads=[1, 1, 1, 1]),
         {"x": f32(1, 4, 5, 6), "o": f32(1, 36, 5, 6), "m": f32(1, 18, 5, 6, lo=0, hi=1)},
         inits={"w": f32(2, 2, 3, 3), "b": f32(2)}, opset=19),
    Case("DeformConv_mask_no_bias", node("DeformConv", ["x", "w", "o", "", "m"], strides=[2, 2]),
         {"x": f32(1, 2, 7, 7), "o": f32(1, 8, 3, 3), "m": f32(1, 4, 3, 3, lo=0, hi=1)},
         inits={"w": f32(3, 2, 2, 2)}, opset=19),
    Case("Col2Im_strides_pads", node("Col2Im", ["x", "i", "k"], strides=[2, 2], pads=[1, 1, 1, 1]),
         {"x": f32(2, 12, 9)}, inits={"i": np.array([5, 5]), "k": np.array([2, 2])}, opset=18),
    # (onnxruntime gets 3-D Col2Im with dilations wrong: ONNX's reference there)
    Case("Col2Im_3d", node("Col2Im", ["x", "i", "k"], dilations=[1, 2, 1]), {"x": f32(1, 8, 8)},
         inits={"i": np.array([3, 4, 3]), "k": np.array([2, 2, 2])}, opset=18, ref="onnx"),
    Case("Det", node("Det", ["x"]), {"x": f32(3, 4, 4)}, opset=11),
]
IDS = [c.name for c in CASES]
_REFERENCE: dict[str, tuple] = {}


def _reference(case: Case):
    hit = _REFERENCE.get(case.name)
    if hit is None:
        model = case.model()
        if callable(case.ref):
            want = case.ref(case)
        elif case.ref == "onnx":
            feeds = {**case.inputs}
            want = dict(zip(case.outputs, ReferenceEvaluator(model).run(case.outputs, feeds)))
        else:
            want = onnxruntime_run(model, case.inputs)
        hit = _REFERENCE[case.name] = (model, want)
    return hit


def _run(model, inputs, device):
    plan = dlo.load(model).compile([device.id])
    try:
        return plan(**inputs)
    finally:
        plan.release()


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_family_op_matches_reference(case, device):
    model, want = _reference(case)
    try:
        got = _run(model, case.inputs, device)
    except dl.UnsupportedOp as exc:
        missing = {str(np.asarray(a).dtype) for a in [*case.inputs.values(), *want.values()]} - device.info.dtypes
        if missing:
            pytest.skip(f"{device.id} has no {sorted(missing)}: {exc}")
        raise
    for name in case.outputs:
        g, w = got[name], np.asarray(want[name])
        assert g.shape == w.shape, name
        assert g.dtype == w.dtype, name
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=case.tol, atol=case.tol, err_msg=f"{case.name} {name}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{case.name} {name}")


# -- float8 / int4 / int2 / float4 on the host: the ops' references against ONNX's -------------------------------
def _ml_dtype(name):
    import ml_dtypes

    return np.dtype(getattr(ml_dtypes, name))


@pytest.mark.parametrize("elem,attrs", [
    (TensorProto.INT4, {}), (TensorProto.UINT4, {}), (TensorProto.INT2, {}), (TensorProto.UINT2, {}),
    (TensorProto.FLOAT8E4M3FN, {}), (TensorProto.FLOAT8E4M3FN, {"saturate": 0}), (TensorProto.FLOAT8E5M2, {}),
    (TensorProto.FLOAT8E5M2, {"saturate": 0}), (TensorProto.FLOAT4E2M1, {}), (TensorProto.INT4, {"block_size": 2}),
])
def test_narrow_quantized_types_match_onnx_reference(elem, attrs):
    """QuantizeLinear to the ml_dtypes storage types and DequantizeLinear back, as ONNX's reference computes."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    x = f32(3, 4, lo=-600, hi=600) if dtype.kind in "fV" and "float" in dtype.name else f32(3, 4, lo=-5, hi=5)
    blocked = attrs.get("block_size")
    scale = f32(3, 2, lo=0.5, hi=1.5) if blocked else f32(3, lo=0.5, hi=1.5)
    zero = np.zeros(scale.shape, np.float32).astype(dtype)
    model = make_model([node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=0 if not blocked else 1, **attrs),
                        node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0 if not blocked else 1,
                             **({"block_size": blocked} if blocked else {}))],
                       {"x": x}, ["q", "y"], {"s": scale, "z": zero}, opset=25)
    want_q, want_y = ReferenceEvaluator(model).run(["q", "y"], {"x": x})
    base = {"axis": 0 if not blocked else 1, **({"block_size": blocked} if blocked else {})}
    quantize, dequantize = OPS["quantize_linear"], OPS["dequantize_linear"]
    checked, _ = quantize.prepare([TensorType.of(a.shape, a.dtype) for a in (x, scale, zero)], {**base, **attrs})
    got_q = quantize.reference([x, scale, zero], checked)[0]
    assert got_q.dtype == dtype
    np.testing.assert_array_equal(got_q.astype(np.float32), want_q.astype(np.float32))
    checked, _ = dequantize.prepare([TensorType.of(a.shape, a.dtype) for a in (got_q, scale, zero)], base)
    np.testing.assert_allclose(dequantize.reference([got_q, scale, zero], checked)[0], want_y, rtol=1e-6)


def test_bfloat16_quantization_matches_onnx_reference():
    """bfloat16 values and scales (host storage through ml_dtypes): the division rounds to bfloat16 first."""
    bf16 = _ml_dtype("bfloat16")
    x, scale, zero = f32(6, 5, lo=-9, hi=9).astype(bf16), f32(6, lo=0.05, hi=0.3).astype(bf16), ints(np.uint8, 6)
    model = make_model([node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=0),
                        node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0)],
                       {"x": x}, ["q", "y"], {"s": scale, "z": zero}, opset=21)
    want_q, want_y = ReferenceEvaluator(model).run(["q", "y"], {"x": x})
    quantize, dequantize = OPS["quantize_linear"], OPS["dequantize_linear"]
    checked, _ = quantize.prepare([TensorType.of(a.shape, a.dtype) for a in (x, scale, zero)], {"axis": 0})
    got_q = quantize.reference([x, scale, zero], checked)[0]
    np.testing.assert_array_equal(got_q, want_q)
    checked, _ = dequantize.prepare([TensorType.of(a.shape, a.dtype) for a in (got_q, scale, zero)], {"axis": 0})
    got_y = dequantize.reference([got_q, scale, zero], checked)[0]
    assert got_y.dtype == bf16
    np.testing.assert_array_equal(got_y.astype(np.float32), want_y.astype(np.float32))


# -- misuse -------------------------------------------------------------------------------------------------------
def _raw(nodes, inputs, outputs, inits=None, opset=21):
    """A model built without shape inference, which would refuse some of the misuse first."""
    graph = helper.make_graph(nodes, "misuse",
                              [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                               for n, a in inputs.items()],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["d"]) for o in outputs],
                              [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


X4 = f32(1, 3, 6, 6)
MISUSE = [
    ("QuantizeLinear_zero_point_shape", node("QuantizeLinear", ["x", "s", "z"], axis=1), {"x": X4},
     {"s": np.ones(3, np.float32), "z": np.zeros(2, np.uint8)}, 13, "zero_point"),
    ("QuantizeLinear_axis_scale_length", node("QuantizeLinear", ["x", "s"], axis=1), {"x": X4},
     {"s": np.ones(4, np.float32)}, 13, "per-axis scale"),
    ("QuantizeLinear_blocked_scale_shape", node("QuantizeLinear", ["x", "s"], axis=2, block_size=4), {"x": X4},
     {"s": np.ones((1, 3, 3, 6), np.float32)}, 21, "blocked scale"),
    ("QuantizeLinear_output_dtype_mismatch", node("QuantizeLinear", ["x", "s", "z"], output_dtype=TensorProto.INT8),
     {"x": X4}, {"s": np.float32(1), "z": np.uint8(0)}, 21, "output_dtype"),
    ("DequantizeLinear_float_input", node("DequantizeLinear", ["x", "s"]), {"x": X4}, {"s": np.float32(1)}, 13,
     "quantized"),
    ("MatMulInteger_zero_point_dtype", node("MatMulInteger", ["a", "b", "az"]), {"a": ints(np.uint8, 2, 3)},
     {"b": ints(np.uint8, 3, 2), "az": np.int8(0)}, 10, "a_zero_point"),
    ("ConvInteger_float", node("ConvInteger", ["x", "w"]), {"x": X4}, {"w": f32(2, 3, 3, 3)}, 10, "ConvInteger|X must"),
    ("LpPool_p0", node("LpPool", ["x"], kernel_shape=[2, 2], p=0), {"x": X4}, {}, 18, "p must be"),
    ("MaxPool_int32", node("MaxPool", ["x"], kernel_shape=[2, 2]), {"x": ints(np.int32, 1, 1, 4, 4)}, {}, 12,
     "floating-point"),
    ("MaxUnpool_small_output_shape", node("MaxUnpool", ["x", "i", "s"], kernel_shape=[2, 2], strides=[2, 2]),
     {"x": f32(1, 1, 2, 2), "i": np.zeros((1, 1, 2, 2), np.int64)}, {"s": np.array([1, 1, 3, 3])}, 11, "output_shape"),
    ("Einsum_unknown_output_label", node("Einsum", ["a", "b"], equation="ij,jk->iq"), {"a": f32(2, 3), "b": f32(3, 4)},
     {}, 12, "name no input axis"),
    ("Einsum_rank_mismatch", node("Einsum", ["a"], equation="ijk->i"), {"a": f32(2, 3)}, {}, 12, "does not fit"),
    ("Einsum_size_mismatch", node("Einsum", ["a", "b"], equation="ij,jk->ik"), {"a": f32(2, 3), "b": f32(4, 4)}, {}, 12,
     "sizes 3 and 4"),
    ("GridSample_bad_mode", node("GridSample", ["x", "g"], mode="quadratic"), {"x": X4, "g": f32(1, 2, 2, 2)}, {}, 20,
     "mode"),
    ("GridSample_grid_rank", node("GridSample", ["x", "g"]), {"x": X4, "g": f32(1, 2, 2, 3)}, {}, 20, "grid must"),
    ("RoiAlign_rois_shape", node("RoiAlign", ["x", "r", "b"]), {"x": X4, "r": f32(2, 5)},
     {"b": np.zeros(2, np.int64)}, 16, "rois"),
    ("DeformConv_offset_shape", node("DeformConv", ["x", "w", "o"]), {"x": X4, "o": f32(1, 8, 3, 3)},
     {"w": f32(2, 3, 2, 2)}, 19, "offset must"),
    ("Col2Im_block_count", node("Col2Im", ["x", "i", "k"]), {"x": f32(1, 4, 10)},
     {"i": np.array([5, 5]), "k": np.array([2, 2])}, 18, "blocks"),
    ("AffineGrid_theta_shape", node("AffineGrid", ["t", "s"]), {"t": f32(2, 3, 3)}, {"s": np.array([2, 1, 4, 4])},
     20, "theta"),
    ("CausalConvWithState_bad_activation", node("CausalConvWithState", ["x", "w"], ["y", "s"], activation="gelu"),
     {"x": f32(1, 2, 5)}, {"w": f32(2, 1, 3)}, 27, "activation"),
    ("Det_not_square", node("Det", ["x"]), {"x": f32(2, 3, 4)}, {}, 11, "square"),
    ("SpaceToDepth_bad_mode", node("SpaceToDepth", ["x"], blocksize=2, mode="XYZ"), {"x": X4}, {}, 28, "mode"),
]


@pytest.mark.parametrize("name,nd,inputs,inits,opset,match", MISUSE, ids=[m[0] for m in MISUSE])
def test_misuse_is_a_typed_error_naming_the_node(name, nd, inputs, inits, opset, match, device):
    with pytest.raises(dl.DeviceLayerError, match=match) as info:
        model = _raw([nd], inputs, ["y"], inits, opset)
        dlo.load(model).compile([device.id])
    assert isinstance(info.value, (dl.GraphError, dl.InvalidArgument, dl.UnsupportedOp))
    assert "the_" in str(info.value), str(info.value)
    # the device still works
    case = CASES[0]
    model, want = _reference(case)
    np.testing.assert_array_equal(_run(model, case.inputs, device)["y"], want["y"])


def test_parameters_given_at_run_time_specialise_the_plan_per_value(device):
    """Col2Im's image and block shapes as graph inputs: read on the host, one specialisation per value."""
    x = f32(1, 4, 16)
    model = make_model([node("Col2Im", ["x", "i", "k"])], {"x": x, "i": np.array([5, 5]), "k": np.array([2, 2])},
                       ["y"], opset=18)
    plan = dlo.load(model).compile([device.id])
    for image in ([5, 5], [9, 3], [5, 5]):  # 4 x 4 and 8 x 2 blocks of 2 x 2
        feeds = {"x": x, "i": np.array(image), "k": np.array([2, 2])}
        want = onnxruntime_run(model, feeds)["y"] if image == [5, 5] else None
        got = plan(**feeds)["y"]
        assert got.shape == (1, 1, *image)
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert plan.cache_info()["misses"] == 2
