"""ONNX RNN, GRU and LSTM through the converter on every device, against onnxruntime: directions, sequence
lengths (reverse sequences from their own end), initial states, peepholes, clip, activations with alpha/beta,
linear_before_reset, input_forget, optional inputs left out in the middle; misuse names the node."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402

import devicelayer.onnx as dlo  # noqa: E402
from devicelayer.onnx.testing import make_model, onnxruntime_run  # noqa: E402

R = np.random.default_rng(77)
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _f32(*shape, scale=1.0):
    return (R.uniform(-scale, scale, shape)).astype(np.float32)


def _layer(op, T=6, B=3, I=4, H=5, dirs=1, names=("X", "W", "R"), outputs=("Y", "Y_h"), lens=None, **attrs):
    """A one-node model of ``op`` with the named inputs ("" leaves a slot out) and its feeds."""
    G = GATES[op]
    data = {"X": _f32(T, B, I), "W": _f32(dirs, G * H, I, scale=0.6), "R": _f32(dirs, G * H, H, scale=0.6),
            "B": _f32(dirs, 2 * G * H, scale=0.5), "initial_h": _f32(dirs, B, H, scale=0.5),
            "initial_c": _f32(dirs, B, H, scale=0.5), "P": _f32(dirs, 3 * H, scale=0.5),
            "sequence_lens": np.array(lens if lens is not None else [T] * B, np.int32)}
    node = helper.make_node(op, list(names), list(outputs), name=f"the_{op.lower()}", hidden_size=H, **attrs)
    feeds = {n: data[n] for n in names if n}
    return make_model([node], feeds, [o for o in outputs if o], opset=14), feeds


CASES = {
    "rnn-forward": ("RNN", {}),
    "rnn-reverse-lens": ("RNN", dict(names=("X", "W", "R", "B", "sequence_lens"), lens=[6, 2, 4],
                                     direction="reverse")),
    "rnn-bidirectional-all": ("RNN", dict(dirs=2, names=("X", "W", "R", "B", "sequence_lens", "initial_h"),
                                          lens=[3, 6, 1], direction="bidirectional")),
    "rnn-gap-initial-h": ("RNN", dict(names=("X", "W", "R", "", "", "initial_h"))),
    "rnn-activations": ("RNN", dict(dirs=2, names=("X", "W", "R", "B"), direction="bidirectional",
                                    activations=["LeakyRelu", "HardSigmoid"], activation_alpha=[0.2, 0.3],
                                    activation_beta=[0.4])),
    "rnn-clip": ("RNN", dict(names=("X", "W", "R", "B"), clip=0.4)),
    "gru-forward": ("GRU", dict(names=("X", "W", "R", "B"))),
    "gru-reverse-lens": ("GRU", dict(names=("X", "W", "R", "B", "sequence_lens", "initial_h"), lens=[6, 1, 3],
                                     direction="reverse")),
    "gru-bidirectional-lbr": ("GRU", dict(dirs=2, names=("X", "W", "R", "B", "sequence_lens", "initial_h"),
                                          lens=[2, 6, 5], direction="bidirectional", linear_before_reset=1)),
    "gru-clip-activations": ("GRU", dict(names=("X", "W", "R", "B"), clip=0.5,
                                         activations=["HardSigmoid", "Softsign"], activation_alpha=[0.3],
                                         activation_beta=[0.6])),
    "lstm-forward-yc": ("LSTM", dict(names=("X", "W", "R", "B"), outputs=("Y", "Y_h", "Y_c"))),
    "lstm-peepholes-lens": ("LSTM", dict(names=("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
                                         lens=[4, 6, 2], outputs=("Y", "Y_h", "Y_c"))),
    "lstm-bidirectional-all": ("LSTM", dict(dirs=2, names=("X", "W", "R", "B", "sequence_lens", "initial_h",
                                                           "initial_c", "P"),
                                            lens=[6, 3, 5], direction="bidirectional", outputs=("Y", "Y_h", "Y_c"))),
    "lstm-gap-peepholes": ("LSTM", dict(names=("X", "W", "R", "", "", "", "", "P"), outputs=("", "Y_h", "Y_c"))),
    "lstm-input-forget-clip": ("LSTM", dict(names=("X", "W", "R", "B"), input_forget=1, clip=0.7)),
    "lstm-only-y": ("LSTM", dict(names=("X", "W", "R", "B"), outputs=("Y",))),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_recurrent_layer_matches_onnxruntime(name, device):
    op, kw = CASES[name]
    model, feeds = _layer(op, **kw)
    want = onnxruntime_run(model, feeds)
    got = dlo.load(model).compile([device.id])(**feeds)
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype
        np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-5, err_msg=k)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_batch_first_layout_is_the_transposed_time_first_layer(op, device):
    """layout=1 (which onnxruntime does not run) equals layout 0 on the transposed tensors."""
    extra = ("initial_c",) if op == "LSTM" else ()
    names = ("X", "W", "R", "B", "sequence_lens", "initial_h") + extra
    model0, feeds = _layer(op, dirs=2, names=names, lens=[6, 2, 4], direction="bidirectional",
                           outputs=("Y", "Y_h") + (("Y_c",) if op == "LSTM" else ()))
    want = dlo.load(model0).compile([device.id])(**feeds)
    feeds1 = dict(feeds, X=feeds["X"].transpose(1, 0, 2), initial_h=feeds["initial_h"].transpose(1, 0, 2))
    if op == "LSTM":
        feeds1["initial_c"] = feeds["initial_c"].transpose(1, 0, 2)
    node = helper.make_node(op, list(names), list(want), hidden_size=5, direction="bidirectional", layout=1)
    got = dlo.load(make_model([node], feeds1, list(want), opset=14)).compile([device.id])(**feeds1)
    np.testing.assert_allclose(got["Y"], want["Y"].transpose(2, 0, 1, 3), rtol=1e-6, atol=1e-6)
    for k in set(want) - {"Y"}:
        np.testing.assert_allclose(got[k], want[k].transpose(1, 0, 2), rtol=1e-6, atol=1e-6)


def test_weights_as_initializers_give_the_same_answer(device):
    model, feeds = _layer("LSTM", names=("X", "W", "R", "B"))
    inits = {k: v for k, v in feeds.items() if k != "X"}
    node = model.graph.node[0]
    const = make_model([node], {"X": feeds["X"]}, ["Y", "Y_h"], initializers=inits, opset=14)
    want = onnxruntime_run(model, feeds)
    got = dlo.load(const).compile([device.id])(X=feeds["X"])
    np.testing.assert_allclose(got["Y_h"], want["Y_h"], rtol=2e-5, atol=2e-5)


def _unchecked(op, feeds, name, **attrs):
    """A one-node model the checker accepts but shape inference is not asked about."""
    node = helper.make_node(op, list(feeds), ["Y"], name=name, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, 1, v.shape) for k, v in feeds.items()],
                              [helper.make_tensor_value_info("Y", 1, ["?"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


@pytest.mark.parametrize("attrs, match", [
    ({"direction": "sideways"}, "direction"),
    ({"activations": ["Swish"]}, "activation"),
    ({"activations": ["Tanh", "Tanh"]}, "activations"),
    ({"clip": -1.0}, "clip"),
    ({"hidden_size": 7}, "hidden_size"),
])
def test_bad_attributes_name_the_node_and_leave_the_device_usable(attrs, match, device):
    feeds = {"X": _f32(4, 2, 3), "W": _f32(1, 5, 3), "R": _f32(1, 5, 5)}
    with pytest.raises(dl.GraphError, match=f"bad_rnn.*{match}"):
        dlo.load(_unchecked("RNN", feeds, "bad_rnn", **{"hidden_size": 5, **attrs}))
    model, feeds = _layer("RNN")
    assert dlo.load(model).compile([device.id])(**feeds)["Y"].shape == (6, 1, 3, 5)


def test_wrong_weight_shape_names_the_node():
    feeds = {"X": _f32(4, 2, 3), "W": _f32(1, 12, 3), "R": _f32(1, 15, 5)}
    with pytest.raises(dl.GraphError, match="bad_gru.*W must have shape"):
        dlo.load(_unchecked("GRU", feeds, "bad_gru", hidden_size=5))
