"""The normalization, attention and loss converters on every device against onnxruntime on the same model (ONNX's
reference evaluator for the ops onnxruntime does not run yet), opset variants and optional outputs included; and
their misuse: a typed devicelayer error naming the node, with the device still usable."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper

import devicelayer.onnx as dlo
from devicelayer.onnx.testing import make_model, onnxruntime_run

R = np.random.default_rng(4321)


def f(*shape, dtype=np.float32, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, shape).astype(dtype)


def node(op, ins, outs=("y",), **attrs):
    return helper.make_node(op, list(ins), list(outs), name=f"the_{op.lower()}", **attrs)


class Case:
    """One model: nodes, graph inputs, outputs; ``onnx_ref`` takes ONNX's reference evaluator as the oracle."""

    def __init__(self, name, nodes, inputs, outputs=("y",), inits=None, opset=17, tol=1e-4, onnx_ref=False):
        self.name, self.nodes, self.inputs, self.outputs = name, nodes, inputs, list(outputs)
        self.inits, self.opset, self.tol, self.onnx_ref = inits or {}, opset, tol, onnx_ref

    def model(self):
        return make_model(self.nodes if isinstance(self.nodes, list) else [self.nodes], self.inputs, self.outputs,
                          self.inits, self.opset)

    def dtypes(self):
        return {a.dtype.name for a in self.inputs.values()} | {a.dtype.name for a in self.inits.values()}


def _nll_inputs(shape, weighted, ignore=None):
    C = shape[1]
    t = R.integers(0, C, (shape[0],) + shape[2:]).astype(np.int64)
    if ignore is not None:
        t.reshape(-1)[::4] = ignore
    ins = {"x": f(*shape), "t": t}
    if weighted:
        ins["w"] = f(C, lo=0.2, hi=2.0)
    return ins


def _attention_inputs(q, k, v, mask=None, past=None, nonpad=None, dtype=np.float32):
    ins = {"Q": f(*q, dtype=dtype, lo=-1, hi=1), "K": f(*k, dtype=dtype, lo=-1, hi=1),
           "V": f(*v, dtype=dtype, lo=-1, hi=1)}
    if mask is not None:
        shape, kind = mask
        ins["M"] = R.uniform(0, 1, shape) < 0.8 if kind == "bool" else f(*shape, dtype=dtype, lo=-1, hi=1)
    if past is not None:
        ins["PK"], ins["PV"] = f(*past[0], dtype=dtype, lo=-1, hi=1), f(*past[1], dtype=dtype, lo=-1, hi=1)
    if nonpad is not None:
        ins["NP"] = np.array(nonpad, np.int64)
    return ins


def _attention(name, ins, outs=("y",), opset=23, tol=1e-4, **attrs):
    names = ["Q", "K", "V", "M" if "M" in ins else "", "PK" if "PK" in ins else "", "PV" if "PV" in ins else "",
             "NP" if "NP" in ins else ""]
    while not names[-1]:
        names.pop()
    return Case(name, node("Attention", names, outs, **attrs), ins, outs, opset=opset, tol=tol)


X4 = f(2, 4, 3, 5)
CASES = [
    # layer normalization with its Mean and InvStdDev, RMS, group (per group before opset 21), instance
    Case("LayerNormalization_stats", node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=1),
         {"x": f(2, 3, 4)}, ["y", "mean", "inv"], inits={"s": f(3, 4), "b": f(3, 4)}),
    Case("LayerNormalization_stats_f16", node("LayerNormalization", ["x", "s"], ["y", "", "inv"], axis=-1),
         {"x": f(4, 16, dtype=np.float16), "s": f(16, dtype=np.float16)}, ["y", "inv"], tol=1e-2),
    Case("RMSNormalization_op23", node("RMSNormalization", ["x", "s"], axis=-2, epsilon=1e-3),
         {"x": f(2, 3, 4, 5), "s": f(4, 5)}, opset=23),
    Case("GroupNormalization_op21", node("GroupNormalization", ["x", "s", "b"], num_groups=2, epsilon=1e-2),
         {"x": X4, "s": f(4), "b": f(4)}, opset=21),
    Case("InstanceNormalization", node("InstanceNormalization", ["x", "s", "b"]), {"x": X4, "s": f(4), "b": f(4)}),
    Case("LpNormalization_p1_axis0", node("LpNormalization", ["x"], p=1, axis=0), {"x": f(3, 4)}),
    Case("LpNormalization_p2", node("LpNormalization", ["x"]), {"x": f(2, 3, 4)}),
    Case("MeanVarianceNormalization", node("MeanVarianceNormalization", ["x"], axes=[0, 2, 3]), {"x": X4}),
    Case("MeanVarianceNormalization_axes", node("MeanVarianceNormalization", ["x"], axes=[1, 3]), {"x": X4}),
    Case("BatchNormalization_training", node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                                            training_mode=1, momentum=0.8, epsilon=1e-3),
         {"x": X4, "s": f(4), "b": f(4), "m": f(4), "v": f(4, lo=0.5, hi=2)}, ["y", "rm", "rv"], opset=15),
    # softmax on old opsets (coerced to 2-D) and the current one
    Case("Softmax_op11_axis1", node("Softmax", ["x"], axis=1), {"x": X4}, opset=11),
    Case("LogSoftmax_op13_axis1", node("LogSoftmax", ["x"], axis=1), {"x": X4}, opset=13),
    # losses
    Case("NegativeLogLikelihoodLoss_weight_ii", node("NegativeLogLikelihoodLoss", ["x", "t", "w"], ignore_index=2),
         _nll_inputs((3, 5, 4), True, 2), opset=13),
    Case("NegativeLogLikelihoodLoss_none", node("NegativeLogLikelihoodLoss", ["x", "t"], reduction="none"),
         _nll_inputs((3, 5, 2, 2), False), opset=13),
    Case("SoftmaxCrossEntropyLoss_log_prob", node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["y", "lp"],
                                                  reduction="sum", ignore_index=-1),
         _nll_inputs((3, 5, 4), True, -1), ["y", "lp"], opset=13),
    # rotary embeddings, attention
    Case("RotaryEmbedding_3d_positions", node("RotaryEmbedding", ["x", "c", "s", "p"], num_heads=2, interleaved=1),
         {"x": f(2, 3, 16), "c": f(10, 4), "s": f(10, 4), "p": R.integers(0, 10, (2, 3)).astype(np.int64)},
         opset=23),
    _attention("Attention_3d_gqa_past_mask_qk", _attention_inputs((2, 3, 16), (2, 2, 8), (2, 2, 12),
                                                                  mask=((3, 6), "float"),
                                                                  past=((2, 2, 4, 4), (2, 2, 4, 6))),
               ("y", "pk", "pv", "qk"), q_num_heads=4, kv_num_heads=2, qk_matmul_output_mode=2),
    _attention("Attention_4d_bool_mask_causal_softcap", _attention_inputs((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8),
                                                                          mask=((2, 1, 4, 6), "bool")),
               is_causal=1, softcap=2.0),
    _attention("Attention_4d_nonpad_causal", _attention_inputs((2, 2, 3, 8), (2, 2, 6, 8), (2, 2, 6, 8),
                                                               nonpad=[6, 4]), opset=24, is_causal=1),
    _attention("Attention_4d_f16_scaled", _attention_inputs((1, 2, 3, 8), (1, 2, 5, 8), (1, 2, 5, 8),
                                                            mask=((3, 5), "float"), dtype=np.float16),
               scale=0.2, tol=2e-3),
    Case("LinearAttention_gated_delta", node("LinearAttention", ["q", "k", "v", "", "d", "b"], ["y", "state"],
                                             q_num_heads=4, kv_num_heads=2),
         {"q": f(2, 3, 16, lo=-1, hi=1), "k": f(2, 3, 8, lo=-1, hi=1), "v": f(2, 3, 8, lo=-1, hi=1),
          "d": f(2, 3, 8, lo=-0.5, hi=-0.01), "b": f(2, 3, 2, lo=0.1, hi=0.9)}, ["y", "state"], opset=27,
         onnx_ref=True),
    Case("CausalConvWithState_past_silu", node("CausalConvWithState", ["x", "w", "b", "s"], ["y", "state"],
                                               activation="silu"),
         {"x": f(2, 3, 5), "w": f(3, 1, 3), "b": f(3), "s": f(2, 3, 2)}, ["y", "state"], opset=27, onnx_ref=True),
    # Dropout: the identity in training mode with ratio 0
    Case("Dropout_training_ratio0", node("Dropout", ["x", "r", "t"], ["y", "mask"]), {"x": f(3, 4)},
         ["y", "mask"], inits={"r": np.array(0.0, np.float32), "t": np.array(True)}, opset=13),
]
IDS = [c.name for c in CASES]
_REFERENCE: dict[str, tuple] = {}


def _reference(case: Case):
    hit = _REFERENCE.get(case.name)
    if hit is None:
        model = case.model()
        if case.onnx_ref:
            from onnx.reference import ReferenceEvaluator

            got = ReferenceEvaluator(model).run(case.outputs, case.inputs)
            want = dict(zip(case.outputs, got))
        else:
            want = onnxruntime_run(model, case.inputs)
        hit = _REFERENCE[case.name] = (model, want)
    return hit


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_converter_matches_reference(case, device):
    missing = case.dtypes() - set(device.info.dtypes)
    if missing:
        pytest.skip(f"{device.id} has no {sorted(missing)}")
    model, want = _reference(case)
    plan = dlo.load(model).compile([device.id])
    try:
        got = plan(**case.inputs)
    finally:
        plan.release()
    assert list(got) == case.outputs
    for name in case.outputs:
        g, w = got[name], np.asarray(want[name])
        assert g.shape == w.shape and g.dtype == w.dtype, name
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g.astype(np.float64), w, rtol=case.tol, atol=case.tol,
                                       err_msg=f"{case.name} {name}")
        else:
            np.testing.assert_array_equal(g, w, err_msg=f"{case.name} {name}")


@pytest.mark.parametrize("constant", [False, True], ids=["input-params", "constant-params"])
def test_group_normalization_18_scales_per_group(device, constant):
    """GroupNormalization-18 (which ONNX's checker now refuses as deprecated, so through ``convert``): one scale
    and bias per group."""
    from devicelayer.onnx.loader import convert

    x, s, b = X4, f(2), f(2)
    params = {"s": s, "b": b}
    model = loose_model([node("GroupNormalization", ["x", "s", "b"], num_groups=2, epsilon=1e-3)],
                        {"x": x} if constant else {"x": x, **params}, ["y"], params if constant else None, opset=18)
    plan = convert(model).compile([device.id])
    try:
        got = plan(**({"x": x} if constant else {"x": x, **params}))["y"]
    finally:
        plan.release()
    g = x.astype(np.float64).reshape(2, 2, -1)
    g = (g - g.mean(axis=2, keepdims=True)) / np.sqrt(g.var(axis=2, keepdims=True) + 1e-3)
    want = g.reshape(x.shape) * np.repeat(s, 2).reshape(1, 4, 1, 1) + np.repeat(b, 2).reshape(1, 4, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


# -- misuse ------------------------------------------------------------------------------------------------------
def loose_model(nodes, inputs, outputs, inits=None, opset=17):
    """A model built without shape inference (which would refuse some of these models before the loader)."""
    from onnx import numpy_helper

    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in inputs.items()]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, ["d0"]) for o in outputs]
    graph = helper.make_graph(nodes, "misuse", ins, outs,
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = helper.find_min_ir_version_for(list(model.opset_import))
    return model


MISUSE = [
    ("dropout-random-mask", dl.UnsupportedOp, r"the_dropout.*ratio 0\.5.*random",
     lambda: loose_model([node("Dropout", ["x", "r", "t"], ["y", "mask"])], {"x": f(3, 4)}, ["y", "mask"],
                        {"r": np.array(0.5, np.float32), "t": np.array(True)}, opset=13)),
    ("groups-not-dividing-channels", dl.GraphError, r"the_groupnormalization.*num_groups",
     lambda: loose_model([node("GroupNormalization", ["x", "s", "b"], num_groups=3)],
                        {"x": X4, "s": f(4), "b": f(4)}, ["y"], opset=21)),
    ("attention-3d-without-heads", dl.GraphError, r"the_attention.*head count",
     lambda: loose_model([node("Attention", ["Q", "K", "V"], q_num_heads=2)],
                        {"Q": f(1, 2, 8), "K": f(1, 3, 8), "V": f(1, 3, 8)}, ["y"], opset=23)),
    ("attention-heads-not-dividing", dl.GraphError, r"the_attention.*divide",
     lambda: loose_model([node("Attention", ["Q", "K", "V"])],
                        {"Q": f(1, 3, 2, 8), "K": f(1, 2, 2, 8), "V": f(1, 2, 2, 8)}, ["y"], opset=23)),
    ("layernorm-integer-stash", dl.GraphError, r"the_layernormalization.*stash_type",
     lambda: loose_model([node("LayerNormalization", ["x", "s"], ["y", "mean"], stash_type=TensorProto.INT64)],
                        {"x": f(2, 3), "s": f(3)}, ["y", "mean"], opset=17)),
    ("nll-unknown-reduction", dl.GraphError, r"the_negativeloglikelihoodloss.*reduction",
     lambda: loose_model([node("NegativeLogLikelihoodLoss", ["x", "t"], reduction="avg")],
                        _nll_inputs((3, 5), False), ["y"], opset=13)),
    ("rotary-odd-dim", dl.GraphError, r"the_rotaryembedding.*rotary_embedding_dim",
     lambda: loose_model([node("RotaryEmbedding", ["x", "c", "s"], rotary_embedding_dim=3)],
                        {"x": f(1, 2, 3, 8), "c": f(1, 3, 2), "s": f(1, 3, 2)}, ["y"], opset=23)),
    ("linear-attention-missing-decay", dl.GraphError, r"the_linearattention.*update_rule",
     lambda: loose_model([node("LinearAttention", ["q", "k", "v", "", "", "b"], ["y", "s"],
                              q_num_heads=2, kv_num_heads=2, update_rule="gated_delta")],
                        {"q": f(1, 2, 8), "k": f(1, 2, 8), "v": f(1, 2, 8), "b": f(1, 2, 2)}, ["y", "s"], opset=27)),
]


@pytest.mark.parametrize("name,error,match,build", MISUSE, ids=[m[0] for m in MISUSE])
def test_misuse_names_the_node_and_leaves_the_device_usable(device, name, error, match, build):
    with pytest.raises(error, match=match):
        dlo.load(build()).compile([device.id])
    ok = next(c for c in CASES if c.name == "LpNormalization_p2")
    m, want = _reference(ok)
    plan = dlo.load(m).compile([device.id])
    try:
        np.testing.assert_allclose(plan(**ok.inputs)["y"], want["y"], rtol=1e-4, atol=1e-5)
    finally:
        plan.release()
