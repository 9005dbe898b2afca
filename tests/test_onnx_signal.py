"""ONNX DFT (opsets 17 and 20), STFT, HannWindow, HammingWindow, BlackmanWindow and MelWeightMatrix through the
converters on every device, against NumPy's FFT and ONNX's reference; the node-suite cases whose parameters are
graph inputs, with those parameters given as constants; misuse names the node."""

from __future__ import annotations

import numpy as np
import pytest

import devicelayer as dl

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import devicelayer.onnx as dlo  # noqa: E402
from devicelayer.onnx.testing import make_model  # noqa: E402

R = np.random.default_rng(5)


def _complex(x):
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0]


def _stacked(z):
    return np.stack([z.real, z.imag], -1)


def _close(got, want, tol=2e-5):
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)


def _run(model, device, **feeds):
    return dlo.load(model).compile([device.id])(**feeds)


# -- DFT -------------------------------------------------------------------------------------------------------------
DFT_CASES = {
    # name: (shape, opset, attrs, axis (opset 20 input), dft_length)
    "real-axis1": ((2, 16, 1), 17, {}, None, None),
    "complex-axis1": ((2, 12, 2), 17, {}, None, None),
    "complex-middle-axis": ((2, 5, 7, 3, 2), 17, {"axis": 2}, None, None),
    "real-negative-axis": ((3, 6, 9, 1), 17, {"axis": -3}, None, None),
    "inverse": ((2, 10, 2), 17, {"inverse": 1}, None, None),
    "onesided": ((3, 15, 1), 17, {"onesided": 1}, None, None),
    "onesided-even": ((3, 16, 1), 17, {"onesided": 1}, None, None),
    "padded": ((2, 7, 2), 17, {}, None, 12),
    "truncated": ((2, 12, 1), 17, {}, None, 8),
    "irfft-default-length": ((2, 9, 2), 17, {"onesided": 1, "inverse": 1}, None, None),
    "irfft-odd-length": ((2, 9, 2), 17, {"onesided": 1, "inverse": 1}, None, 17),
    "opset20-default-axis": ((2, 3, 11, 2), 20, {}, None, None),
    "opset20-axis-input": ((2, 11, 3, 1), 20, {}, 1, None),
    "opset20-negative-axis-input": ((4, 6, 2), 20, {"inverse": 1}, -3, 8),
}


def _numpy_dft(x, axis, attrs, length):
    z = _complex(x.astype(np.float64))
    inverse, onesided = attrs.get("inverse", 0), attrs.get("onesided", 0)
    if inverse and onesided:
        return np.fft.irfft(z, n=length, axis=axis)[..., None]
    if onesided:
        return _stacked(np.fft.rfft(z.real, n=length, axis=axis))
    return _stacked((np.fft.ifft if inverse else np.fft.fft)(z, n=length, axis=axis))


@pytest.mark.parametrize("name", sorted(DFT_CASES))
def test_dft_matches_numpy(name, device):
    shape, opset, attrs, axis, length = DFT_CASES[name]
    x = R.standard_normal(shape).astype(np.float32)
    inits = {}
    names = ["x", "", ""]
    if length is not None:
        inits["n"], names[1] = np.array(length, np.int64), "n"
    if axis is not None:
        inits["axis"], names[2] = np.array(axis, np.int64), "axis"
    node = helper.make_node("DFT", [n for n in names] if opset >= 20 else names[:2], ["y"], **attrs)
    got = _run(make_model([node], {"x": x}, ["y"], inits, opset=opset), device, x=x)["y"]
    rank = len(shape)
    a = (axis if axis is not None else -2) if opset >= 20 else attrs.get("axis", 1)
    _close(got, _numpy_dft(x, a % rank, attrs, length).astype(np.float32))


def test_dft_float16_transforms_in_float32(device):
    if "float16" not in device.info.dtypes:
        pytest.skip(f"{device.id} has no float16")
    x = R.standard_normal((2, 32, 2)).astype(np.float16)
    got = _run(make_model([helper.make_node("DFT", ["x"], ["y"])], {"x": x}, ["y"], opset=17), device, x=x)["y"]
    assert got.dtype == np.float16
    _close(got.astype(np.float32), _numpy_dft(x, 1, {}, None), tol=2e-3)


def test_dft_is_one_matrix_product():
    x = R.standard_normal((1, 64, 1)).astype(np.float32)
    g = dlo.convert(dlo.read_model(make_model([helper.make_node("DFT", ["x"], ["y"], onesided=1)], {"x": x}, ["y"],
                                              opset=17)))
    assert [n.op for n in g.nodes] == ["reshape", "matmul", "reshape"]


# -- STFT -------------------------------------------------------------------------------------------------------------
def _numpy_stft(signal, step, window, frame, onesided):
    z = _complex(signal.astype(np.float64))
    frames = 1 + (z.shape[1] - frame) // step
    w = np.ones(frame) if window is None else window.astype(np.float64)
    out = np.stack([np.fft.fft(z[:, f * step:f * step + frame] * w, axis=1) for f in range(frames)], axis=1)
    return _stacked(out[:, :, :frame // 2 + 1] if onesided else out)


@pytest.mark.parametrize("channels, onesided, window, as_input", [
    (1, 1, None, False), (1, 1, "hann", False), (1, 1, "hann", True), (1, 0, "hann", False), (2, 1, "hann", True),
    (2, 0, None, False),
])
def test_stft_matches_numpy(channels, onesided, window, as_input, device):
    signal = R.standard_normal((2, 100, channels)).astype(np.float32)
    frame, step = 16, 6
    w = None if window is None else (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(frame) / frame)).astype(np.float32)
    feeds, inits = {"signal": signal}, {"step": np.array(step, np.int64)}
    if w is not None:
        (feeds if as_input else inits)["window"] = w
    else:
        inits["frame"] = np.array(frame, np.int64)
    node = helper.make_node("STFT", ["signal", "step", "window" if w is not None else "",
                                     "frame" if w is None else ""], ["y"], onesided=onesided)
    got = _run(make_model([node], feeds, ["y"], inits, opset=17), device, **feeds)["y"]
    _close(got, _numpy_stft(signal, step, w, frame, onesided and channels == 1).astype(np.float32))


# -- windows and the mel filter bank -----------------------------------------------------------------------------------
def window_float64(kind, size, periodic):
    """The windows' definitions (PyTorch's), in float64."""
    n = np.arange(size) / (size if periodic else size - 1)
    if kind == "HannWindow":
        return np.sin(np.pi * n) ** 2
    if kind == "HammingWindow":
        return 25 / 46 - 21 / 46 * np.cos(2 * np.pi * n)
    return 0.42 - 0.5 * np.cos(2 * np.pi * n) + 0.08 * np.cos(4 * np.pi * n)


@pytest.mark.parametrize("kind", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("size, periodic, dtype", [(10, 1, TensorProto.FLOAT), (11, 0, TensorProto.DOUBLE),
                                                   (7, 1, TensorProto.FLOAT16), (2, 0, TensorProto.FLOAT)])
def test_windows_match_onnx_reference(kind, size, periodic, dtype, device):
    node = helper.make_node(kind, ["size"], ["y"], periodic=periodic, output_datatype=dtype)
    model = make_model([node], {}, ["y"], {"size": np.array(size, np.int32)}, opset=17)
    want = ReferenceEvaluator(model).run(None, {})[0]
    got = _run(model, device)["y"]
    assert got.dtype == want.dtype and got.shape == (size,)
    tol = 5e-3 if got.dtype == np.float16 else 1e-6  # ONNX's reference computes a float16 window in float16
    exact = window_float64(kind, size, periodic)
    np.testing.assert_allclose(got.astype(np.float64), exact, rtol=tol, atol=tol)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("mels, length, rate, low, high", [(8, 16, 8192, 0.0, 4096.0), (40, 512, 16000, 20.0, 7600.0),
                                                          (10, 64, 22050, 300.0, 8000.0)])
def test_mel_weight_matrix_matches_onnx_reference(mels, length, rate, low, high, device):
    node = helper.make_node("MelWeightMatrix", ["m", "n", "r", "lo", "hi"], ["y"])
    inits = {"m": np.array(mels, np.int32), "n": np.array(length, np.int32), "r": np.array(rate, np.int32),
             "lo": np.array(low, np.float32), "hi": np.array(high, np.float32)}
    model = make_model([node], {}, ["y"], inits, opset=17)
    want = ReferenceEvaluator(model).run(None, {})[0]
    got = _run(model, device)["y"]
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


# -- the node suite's cases with their parameters as constants --------------------------------------------------------
@pytest.fixture(scope="module")
def suite():
    from devicelayer.onnx.conformance import node_cases

    return {c.name: c for c in node_cases(r"^test_(dft|stft|hannwindow|hammingwindow|blackmanwindow|melweightmatrix)")}


#: (case, inputs the converter reads as parameters); test_dft_inverse* compare against float32 FFT noise (values of
#: 2e-7 where the transform is exactly 0, with atol 1e-7) that no exact transform reproduces
PARAMETERS = {"test_dft": ("axis",), "test_dft_axis": ("axis",), "test_dft_rfft": ("axis",),
              "test_dft_irfft": ("axis",), "test_stft": ("frame_step", "frame_length"),
              "test_stft_with_window": ("frame_step",), "test_melweightmatrix": None,
              **{f"test_{w}window{s}": None for w in ("hann", "hamming", "blackman") for s in ("", "_symmetric")}}


def _with_constants(case, names):
    """The case's model with the named graph inputs (all when ``names`` is None) made initializers."""
    model = onnx.ModelProto.FromString(case.model.SerializeToString())
    inputs, _ = case.data_sets[0]
    values = {vi.name: np.asarray(v) for vi, v in zip(model.graph.input, inputs)}
    keep = [vi for vi in model.graph.input if names is not None and vi.name not in names]
    for name, v in values.items():
        if names is None or name in names:
            model.graph.initializer.append(onnx.numpy_helper.from_array(v, name))
    del model.graph.input[:]
    model.graph.input.extend(keep)
    return model, {vi.name: values[vi.name] for vi in keep}


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_node_suite_case_with_constant_parameters(name, suite, device):
    case = suite[name]
    model, feeds = _with_constants(case, PARAMETERS[name])
    got = _run(model, device, **feeds)
    for want, (out, value) in zip(case.data_sets[0][1], got.items()):
        want = np.asarray(want)
        assert value.dtype == want.dtype and value.shape == want.shape
        np.testing.assert_allclose(value, want, rtol=case.rtol, atol=case.atol)


# -- misuse ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("node_args, inits, match", [
    (("DFT", ["x"], ["y"], {"axis": 2}), {}, "axis"),
    (("DFT", ["x", "n"], ["y"], {}), {"n": np.array(0, np.int64)}, "dft_length"),
    (("STFT", ["x", "s", "", "f"], ["y"], {}), {"s": np.array(4, np.int64), "f": np.array(40, np.int64)},
     "frame_length"),
    (("STFT", ["x", "s", "w", "f"], ["y"], {}), {"s": np.array(4, np.int64), "f": np.array(8, np.int64),
                                                 "w": np.ones(6, np.float32)}, "window"),
])
def test_misuse_names_the_node_and_leaves_the_device_usable(node_args, inits, match, device):
    op, ins, outs, attrs = node_args
    x = R.standard_normal((2, 30, 1)).astype(np.float32)
    node = helper.make_node(op, ins, outs, name="bad_signal", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["?"])],
                              [onnx.numpy_helper.from_array(v, k) for k, v in inits.items()])
    with pytest.raises(dl.GraphError, match=f"bad_signal.*{match}"):
        dlo.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    ok = make_model([helper.make_node("DFT", ["x"], ["y"])], {"x": x}, ["y"], opset=17)
    assert _run(ok, device, x=x)["y"].shape == (2, 30, 2)
