"""The host's oneDNN route for LSTM and GRU: every direction, both layouts, initial states, peepholes, both GRU
forms, batches of one and more, against the op's float64 NumPy reference; the calls oneDNN does not compute as
ONNX defines them (clip, other activations, input_forget, short sequences, float64) run NumPy and stay right;
constant weights are relaid out once per plan; misuse keeps its typed error.

Skipped as a whole where oneDNN is not installed (``DEVICELAYER_REQUIRE=onednn`` makes that a failure).
"""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.backends.host import dnnl as host_dnnl
from devicelayer.kernels.op import TensorType, get
from devicelayer.ops import names  # noqa: F401  (registers the op library)

pytestmark = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")

GATES = {"lstm": 4, "gru": 3}
ORDER = ("B", "sequence_lens", "initial_h", "initial_c", "P")


@pytest.fixture
def runs(monkeypatch):
    """Counts of oneDNN layer runs (per call, or of a call bound once: ``Layer.bind``) and weight relayouts in
    this test, with the host runner off (its batches run the layers without Python, and its two-direction form
    is two layers: ``test_host_runner`` covers both)."""
    from devicelayer.backends.host import rnn_layer

    monkeypatch.setenv("DEVICELAYER_HOST_RUNNER", "0")
    count = {"run": 0, "prepare": 0}
    for name in count:
        orig = getattr(rnn_layer.RnnLayer, name)

        def counted(self, *args, _orig=orig, _name=name):
            count[_name] += 1
            return _orig(self, *args)
        monkeypatch.setattr(rnn_layer.RnnLayer, name, counted)
    bind = rnn_layer.RnnLayer.bind

    def bound(self, *args, **kwargs):
        call = bind(self, *args, **kwargs)

        def counted_call():
            count["run"] += 1
            return call()
        return counted_call
    monkeypatch.setattr(rnn_layer.RnnLayer, "bind", bound)
    return count


def _inputs(rng, op, T, B, I, H, dirs, layout=0, given=(), lens=None):
    """X, W, R and the optional inputs up to the last of ``given`` (random, never zero; full lengths unless
    ``lens``)."""
    G = GATES[op]
    state = (B, dirs, H) if layout else (dirs, B, H)
    shapes = {"B": (dirs, 2 * G * H), "initial_h": state, "initial_c": state, "P": (dirs, 3 * H)}
    arrays = [rng.uniform(-1, 1, (B, T, I) if layout else (T, B, I)),
              rng.uniform(-0.6, 0.6, (dirs, G * H, I)), rng.uniform(-0.6, 0.6, (dirs, G * H, H))]
    for name in ORDER[:max((ORDER.index(n) for n in given), default=-1) + 1]:
        if name == "sequence_lens":
            arrays.append(np.array(lens if lens is not None else [T] * B, np.int32))
        else:
            arrays.append(rng.uniform(-0.5, 0.5, shapes[name]))
    return [a if a.dtype == np.int32 else a.astype(np.float32) for a in arrays]


def _reference(op, arrays, attrs):
    types = [TensorType(a.shape, a.dtype) for a in arrays]
    checked, outs = get(op).prepare(types, dict(attrs))
    wide = [a if a.dtype == np.int32 else a.astype(np.float64) for a in arrays]
    return get(op).reference(wide, checked), checked, outs


def _run_poisoned(op, arrays, attrs):
    """The op run eagerly on the host into outputs filled with NaN first; also the float64 reference."""
    want, checked, outs = _reference(op, arrays, attrs)
    host = dl.device("host")
    out = [dl.tensor(np.full(t.shape, np.nan, t.dtype), host) for t in outs]
    dl.ops.run(op, [dl.tensor(a, host) for a in arrays], out=out, **attrs)
    return [o.numpy() for o in out], want, checked, outs


def _close(got, want):
    for g, w in zip(got, want):
        assert g.shape == w.shape and not np.isnan(g).any()
        np.testing.assert_allclose(g.astype(np.float64), w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("given", [(), ("B",), ("B", "sequence_lens", "initial_h"),
                                   ("B", "sequence_lens", "initial_h", "initial_c"), ORDER])
def test_lstm_through_onednn_matches_the_float64_reference(direction, layout, batch, given, rng, runs):
    dirs = 2 if direction == "bidirectional" else 1
    arrays = _inputs(rng, "lstm", 7, batch, 5, 6, dirs, layout, given)
    got, want, _, _ = _run_poisoned("lstm", arrays, {"direction": direction, "layout": layout})
    _close(got, want)
    assert runs["run"] == 1


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("lbr", [0, 1])
@pytest.mark.parametrize("given", [(), ("B",), ("B", "sequence_lens", "initial_h")])
def test_gru_through_onednn_matches_the_float64_reference(direction, layout, batch, lbr, given, rng, runs):
    dirs = 2 if direction == "bidirectional" else 1
    arrays = _inputs(rng, "gru", 6, batch, 4, 5, dirs, layout, given)
    attrs = {"direction": direction, "layout": layout, "linear_before_reset": lbr}
    got, want, _, _ = _run_poisoned("gru", arrays, attrs)
    _close(got, want)
    assert runs["run"] == 1


@pytest.mark.parametrize("op", ["lstm", "gru"])
def test_a_layer_on_onednn_s_team_matches_the_reference(op, rng, runs):
    """Wide enough a step (``rnn.SMALL_STEP_FLOPS``) to run on the OpenMP team, not the calling thread alone."""
    from devicelayer.backends.host import rnn

    arrays = _inputs(rng, op, 9, 8, 64, 96, 2, 0, ("B", "sequence_lens", "initial_h"))
    got, want, checked, outs = _run_poisoned(op, arrays, {"direction": "bidirectional"})
    _close(got, want)
    g = rnn.geometry(op, [TensorType(a.shape, a.dtype) for a in arrays], outs, checked)
    assert not rnn.OnednnRecurrent.small(g) and runs["run"] == 1


@pytest.mark.parametrize("op, attrs", [
    ("lstm", {"clip": 0.5}),
    ("lstm", {"input_forget": 1}),
    ("lstm", {"activations": ["Sigmoid", "Tanh", "Relu"]}),
    ("gru", {"activations": ["HardSigmoid", "Tanh"], "direction": "bidirectional"}),
    ("gru", {"clip": 0.3, "linear_before_reset": 1}),
])
def test_what_onednn_does_not_compute_runs_numpy(op, attrs, rng, runs):
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    arrays = _inputs(rng, op, 5, 3, 4, 6, dirs, 0, ("B", "sequence_lens", "initial_h"))
    got, want, checked, outs = _run_poisoned(op, arrays, attrs)
    _close(got, want)
    assert runs["run"] == 0
    assert not dl.device("host").vendor_op(op).accepts([TensorType(a.shape, a.dtype) for a in arrays], outs,
                                                       checked)


@pytest.mark.parametrize("op", ["lstm", "gru"])
def test_short_sequences_run_numpy_and_full_ones_onednn(op, rng, runs):
    """sequence_lens is read per call: a sequence shorter than the tensor sends that call to NumPy."""
    arrays = _inputs(rng, op, 6, 3, 4, 5, 2, 0, ("B", "sequence_lens", "initial_h"), lens=[6, 2, 4])
    attrs = {"direction": "bidirectional"}
    got, want, _, _ = _run_poisoned(op, arrays, attrs)
    _close(got, want)
    assert runs["run"] == 0
    arrays[4] = np.array([6, 6, 9], np.int32)  # (past the end counts as whole, as the reference clips it)
    got, want, _, _ = _run_poisoned(op, arrays, attrs)
    _close(got, want)
    assert runs["run"] == 1


def test_float64_runs_numpy(rng, runs):
    arrays = [a if a.dtype == np.int32 else a.astype(np.float64) for a in _inputs(rng, "lstm", 5, 2, 3, 4, 1)]
    got, want, _, _ = _run_poisoned("lstm", arrays, {})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-12)
    assert runs["run"] == 0


def test_an_eager_output_over_an_input_is_computed_apart(rng, runs):
    host = dl.device("host")
    x, w, r = _inputs(rng, "gru", 4, 2, 5, 5, 1)
    want, _, _ = _reference("gru", [x, w, r], {})
    tx = dl.tensor(x, host)  # Y (4, 1, 2, 5) over X (4, 2, 5): the same 40 floats
    y_h = dl.tensor(np.full((1, 2, 5), np.nan, np.float32), host)
    dl.ops.run("gru", [tx, dl.tensor(w, host), dl.tensor(r, host)], out=[tx.reshape((4, 1, 2, 5)), y_h])
    _close([tx.numpy().reshape(4, 1, 2, 5), y_h.numpy()], want)
    assert runs["run"] == 0


@pytest.mark.parametrize("bad, match", [("W", "W must have shape"), ("initial_h", "initial_h must have shape"),
                                        ("R", "R must be")])
def test_bad_shapes_keep_their_typed_error_and_the_device_works(bad, match, rng):
    host = dl.device("host")
    arrays = _inputs(rng, "lstm", 5, 2, 3, 4, 1, 0, ("B", "sequence_lens", "initial_h"))
    index = {"W": 1, "R": 2, "initial_h": 5}[bad]
    arrays[index] = np.concatenate([arrays[index], arrays[index]], axis=-1)
    with pytest.raises(dl.InvalidArgument, match=match):
        dl.ops.run("lstm", [dl.tensor(a, host) for a in arrays])
    arrays = _inputs(rng, "lstm", 5, 2, 3, 4, 1)
    got = [t.numpy() for t in dl.ops.run("lstm", [dl.tensor(a, host) for a in arrays])]
    _close(got, _reference("lstm", arrays, {})[0])


# -- through the ONNX loader: constants relaid out once per plan, optional outputs --------------------------------
def _model(op, arrays, slots, outputs, constant, **attrs):
    """A one-node ONNX model: X fed, the rest initializers where ``constant``, else fed too."""
    helper = pytest.importorskip("onnx.helper")
    from devicelayer.onnx.testing import make_model

    node = helper.make_node(op.upper(), list(slots), list(outputs), hidden_size=arrays[2].shape[2], **attrs)
    feeds = {n: a for n, a in zip(slots, arrays) if n}
    inits = {k: v for k, v in feeds.items() if k != "X"} if constant else {}
    fed = {k: v for k, v in feeds.items() if k not in inits}
    return make_model([node], fed, [o for o in outputs if o], initializers=inits, opset=14), fed


def _load(model):
    import devicelayer.onnx as dlo

    return dlo.load(model)


@pytest.mark.parametrize("outputs", [("Y",), ("", "Y_h"), ("", "", "Y_c"), ("Y", "", "Y_c"), ("Y", "Y_h", "Y_c")])
@pytest.mark.parametrize("constant", [True, False])
def test_lstm_optional_outputs_and_weights_relaid_out_once(outputs, constant, rng, runs):
    slots = ("X", "W", "R", "B", "", "initial_h", "initial_c", "P")
    arrays = _inputs(rng, "lstm", 6, 2, 4, 5, 2, 0, ORDER)
    model, feeds = _model("lstm", arrays, slots, outputs, constant, direction="bidirectional")
    want = dict(zip(("Y", "Y_h", "Y_c"), _reference("lstm", arrays, {"direction": "bidirectional"})[0]))
    plan = _load(model).compile(["host"])
    for _ in range(3):
        got = plan.run_numpy(feeds)
        assert set(got) == {o for o in outputs if o}
        for k, v in got.items():
            np.testing.assert_allclose(v.astype(np.float64), want[k], rtol=2e-5, atol=2e-5, err_msg=k)
    assert runs["run"] == 3
    assert runs["prepare"] == (1 if constant else 3)
    plan.release()


@pytest.mark.parametrize("lbr", [0, 1])
def test_gru_batch_first_plan_with_constant_weights(lbr, rng, runs):
    slots = ("X", "W", "R", "B", "", "initial_h")
    arrays = _inputs(rng, "gru", 5, 3, 4, 6, 2, 1, ("B", "sequence_lens", "initial_h"))  # (lengths: left out)
    model, feeds = _model("gru", arrays, slots, ("Y", "Y_h"), True, direction="bidirectional", layout=1,
                          linear_before_reset=lbr)
    want = _reference("gru", arrays, {"direction": "bidirectional", "layout": 1, "linear_before_reset": lbr})[0]
    plan = _load(model).compile(["host"])
    got = plan.run_numpy(feeds)
    _close([got["Y"], got["Y_h"]], want)
    assert runs == {"run": 1, "prepare": 1}
    plan.release()
