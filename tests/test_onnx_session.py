"""devicelayer.onnx.InferenceSession against onnxruntime: the same calling code run on both, answers compared;
bad input refused naming the input or output; providers; IOBinding on every device; reports and profiling."""

from __future__ import annotations

import json

import numpy as np
import pytest

import devicelayer as dl
import devicelayer.onnx as dlort
from devicelayer.memory import settle
from devicelayer.onnx.testing import make_model, scaled_error

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper

RUNTIMES = [pytest.param(ort, id="onnxruntime"), pytest.param(dlort, id="devicelayer")]


def symbolic_model():
    """x (N, ?, 4) float -> relu(x @ w) (N, ?, 3); k (2,) int64 -> k + 1; with metadata."""
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Relu", ["xw"], ["y"]),
             helper.make_node("Add", ["k", "one"], ["k1"])]
    model = make_model(nodes, {"x": np.zeros((2, 5, 4), np.float32), "k": np.zeros(2, np.int64)}, ["y", "k1"],
                       initializers={"w": w, "one": np.ones(1, np.int64)}, dynamic={"x": ["N", None, 4]})
    model.producer_name, model.domain, model.doc_string, model.model_version = "tests", "dom.test", "a model", 7
    model.graph.doc_string = "the graph"
    helper.set_model_props(model, {"author": "devicelayer", "purpose": "tests"})
    return model


def feeds(n=2, m=5, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, m, 4)).astype(np.float32), "k": np.array([3, -4], np.int64)}


def calling_code(runtime, model_bytes, feed, providers=("CPUExecutionProvider",)):
    """What a user of onnxruntime writes: the module is the only thing that changes."""
    sess = runtime.InferenceSession(model_bytes, providers=list(providers))
    inputs = [(i.name, i.shape, i.type) for i in sess.get_inputs()]
    outputs = [(o.name, o.shape, o.type) for o in sess.get_outputs()]
    everything = sess.run(None, feed)
    first = sess.run([outputs[0][0]], feed)
    reordered = sess.run([o[0] for o in reversed(outputs)], feed)
    meta = sess.get_modelmeta()
    return {"inputs": inputs, "outputs": outputs, "all": everything, "first": first, "reordered": reordered,
            "meta": (meta.producer_name, meta.graph_name, meta.domain, meta.description, meta.graph_description,
                     meta.version, meta.custom_metadata_map), "providers": sess.get_providers()}


@pytest.mark.parametrize("which", ["symbolic", "tiny_cnn"])
def test_same_calling_code_same_answers(which):
    if which == "symbolic":
        model, feed = symbolic_model().SerializeToString(), feeds()
    else:
        with open(dlort.bundled("tiny_cnn"), "rb") as f:
            model = f.read()
        feed = {"x": np.random.default_rng(2).standard_normal((3, 3, 32, 32)).astype(np.float32)}
    want = calling_code(ort, model, feed)
    got = calling_code(dlort, model, feed)
    for key in ("inputs", "outputs", "meta", "providers"):
        assert got[key] == want[key], key
    for key in ("all", "first", "reordered"):
        assert len(got[key]) == len(want[key])
        for g, w in zip(got[key], want[key]):
            assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape
            assert scaled_error(g, w) < 1e-5


def test_unnamed_and_missing_shapes_and_sequences_read_as_onnxruntime_reads_them():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    x.type.tensor_type.shape.dim[0].Clear()  # a dynamic dimension without a name
    nodes = [helper.make_node("Relu", ["x"], ["o"]), helper.make_node("SequenceConstruct", ["x", "o"], ["s"])]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info("o", TensorProto.FLOAT, None),
                                                 helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data = model.SerializeToString()
    a = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    with pytest.warns(UserWarning, match="breaks the ONNX spec"):  # an output without a shape: loaded anyway
        b = dlort.InferenceSession(data, providers=["CPUExecutionProvider"])
    for ra, rb in ((a.get_inputs(), b.get_inputs()), (a.get_outputs(), b.get_outputs())):
        assert [(v.name, v.shape, v.type) for v in ra] == [(v.name, v.shape, v.type) for v in rb]
    value = np.array([-1.0, 2.0], np.float32)
    want, got = a.run(None, {"x": value}), b.run(None, {"x": value})
    np.testing.assert_array_equal(got[0], want[0])
    assert isinstance(got[1], list) and len(got[1]) == 2
    for g, w in zip(got[1], want[1]):
        np.testing.assert_array_equal(g, w)


# -- bad input: named, typed -------------------------------------------------------------------------------------
def _bad_runs():
    good = feeds()
    return {
        "unknown input": (None, {**good, "q": np.zeros(1, np.float32)}, "q"),
        "missing input": (None, {"x": good["x"]}, "k"),
        "wrong dtype": (None, {**good, "x": good["x"].astype(np.float64)}, "x"),
        "wrong rank": (None, {**good, "x": good["x"][0]}, "x"),
        "wrong fixed dimension": (None, {**good, "x": np.zeros((2, 5, 5), np.float32)}, "x"),
        "wrong int dtype": (None, {**good, "k": good["k"].astype(np.int32)}, "k"),
        "unknown output": (["y", "nope"], good, "nope"),
    }


@pytest.mark.parametrize("case", list(_bad_runs()))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_bad_input_is_refused_naming_it(runtime, case):
    output_names, feed, name = _bad_runs()[case]
    sess = runtime.InferenceSession(symbolic_model().SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as info:
        sess.run(output_names, feed)
    if runtime is dlort:
        assert isinstance(info.value, dl.InvalidArgument)
        assert repr(name) in str(info.value) or f"['{name}']" in str(info.value)
    np.testing.assert_array_equal(sess.run(["k1"], feeds())[0], [4, -3])  # the session still works


def _complex_feeds():
    good = feeds()
    return {
        "complex array": ({**good, "x": good["x"].astype(np.complex128) + 1j}, "x", "complex128"),
        "complex64 array": ({**good, "x": good["x"].astype(np.complex64)}, "x", "complex64"),
        "nested lists of complex": ({**good, "x": (good["x"].astype(np.complex128) + 1j).tolist()}, "x",
                                    "complex128"),
        "complex list for an int input": ({**good, "k": [3 + 1j, -4]}, "k", "complex128"),
        "ints beyond the input's dtype": ({**good, "x": good["x"], "k": [2 ** 70, 0]}, "k", "int64"),
    }


@pytest.mark.parametrize("case", list(_complex_feeds()))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_values_a_conversion_would_change_are_refused(runtime, case):
    """Complex numbers lose their imaginary part as float32 (NumPy only warns): refused naming the input and the
    dtype, as onnxruntime refuses them; so are integers beyond the input's dtype."""
    feed, name, dtype = _complex_feeds()[case]
    sess = runtime.InferenceSession(symbolic_model().SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as info:
        sess.run(None, feed)
    if runtime is dlort:
        assert type(info.value) is dl.InvalidArgument
        assert f"input {name!r}" in str(info.value) and (dtype in str(info.value) or "too large" in str(info.value))


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_what_onnxruntime_converts_from_lists_is_converted(runtime):
    """Lists of Python numbers take the input's dtype as onnxruntime takes them: floats truncated into integers,
    ints into floats."""
    sess = runtime.InferenceSession(symbolic_model().SerializeToString(), providers=["CPUExecutionProvider"])
    x = [[[1, 2, 3, 4]]]
    y, k1 = sess.run(None, {"x": x, "k": [3.7, -4.2]})
    assert k1.tolist() == [4, -3]
    np.testing.assert_allclose(y, sess.run(["y"], {"x": np.array(x, np.float32), "k": feeds()["k"]})[0])


def test_calling_mistakes_are_invalid_arguments():
    sess = dlort.InferenceSession(symbolic_model().SerializeToString())
    with pytest.raises(dl.InvalidArgument, match="output_names"):
        sess.run("y", feeds())
    with pytest.raises(dl.InvalidArgument, match="input_feed"):
        sess.run(None, [feeds()["x"], feeds()["k"]])
    with pytest.raises(dl.InvalidArgument, match="unexpected"):
        dlort.InferenceSession(symbolic_model().SerializeToString(), sesion_options=None)
    with pytest.raises(dl.GraphError):
        dlort.InferenceSession(b"not a model")
    with pytest.raises(dl.GraphError, match="no ONNX model file"):
        dlort.InferenceSession("/nonexistent/model.onnx")
    assert sess.run([], feeds())[1].tolist() == [4, -3]  # [] means every output, as in onnxruntime


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_nested_lists_are_taken_as_arrays(runtime):
    sess = runtime.InferenceSession(symbolic_model().SerializeToString(), providers=["CPUExecutionProvider"])
    feed = feeds()
    got = sess.run(None, {"x": feed["x"].tolist(), "k": [3, -4]})
    want = sess.run(None, feed)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_symbolic_dimensions_must_agree_across_inputs():
    nodes = [helper.make_node("Add", ["a", "b"], ["c"])]
    model = make_model(nodes, {"a": np.zeros((2, 3), np.float32), "b": np.zeros((2, 3), np.float32)}, ["c"],
                       dynamic={"a": ["n", 3], "b": ["n", 3]})
    sess = dlort.InferenceSession(model.SerializeToString())
    with pytest.raises(dl.InvalidArgument, match="'b' has n = 4"):
        sess.run(None, {"a": np.zeros((2, 3), np.float32), "b": np.zeros((4, 3), np.float32)})
    out = sess.run(None, {"a": np.ones((5, 3), np.float32), "b": np.ones((5, 3), np.float32)})[0]
    assert out.shape == (5, 3) and (out == 2).all()


# -- providers -----------------------------------------------------------------------------------------------------
def _has(kind):
    return any(tuple(d.pool.dlpack_device()) == (kind, 0) for d in dl.devices())


def test_providers_by_device_id_auto_and_onnxruntime_name():
    data = symbolic_model().SerializeToString()
    ids = [d.id for d in dl.devices()]
    assert dlort.InferenceSession(data).get_providers() == ids
    assert dlort.InferenceSession(data, providers="auto").get_providers() == ids
    assert dlort.InferenceSession(data, providers=["auto"]).get_providers() == ids
    sess = dlort.InferenceSession(data, providers=["host"])
    assert sess.get_providers() == ["host"] and [d.id for d in sess.plan.devices] == ["host"]
    sess = dlort.InferenceSession(data, providers=[("CPUExecutionProvider", {"device_id": 0, "arena": "off"})])
    assert [d.id for d in sess.plan.devices] == ["host"]
    assert sess.get_provider_options() == {"CPUExecutionProvider": {"device_id": "0", "arena": "off"}}
    sess = dlort.InferenceSession(data, providers=["CPUExecutionProvider"], provider_options=[{"x": 1}])
    assert sess.get_provider_options() == {"CPUExecutionProvider": {"x": "1"}}
    sess.set_providers([ids[0]])
    assert sess.get_providers() == [ids[0]]
    np.testing.assert_array_equal(sess.run(["k1"], feeds())[0], [4, -3])


def test_cuda_provider_maps_to_the_first_cuda_device_or_is_skipped_as_onnxruntime_does():
    data = symbolic_model().SerializeToString()
    providers = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    if _has(dl.DLDeviceType.kDLCUDA):
        sess = dlort.InferenceSession(data, providers=providers)
        assert sess.get_providers() == providers
        assert sess.plan.devices[0].id == next(
            d.id for d in dl.devices() if tuple(d.pool.dlpack_device()) == (dl.DLDeviceType.kDLCUDA, 0))
    else:
        with pytest.warns(UserWarning, match="CUDAExecutionProvider"):
            sess = dlort.InferenceSession(data, providers=providers)
        assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.warns(UserWarning, match="device_id 7"):
        sess = dlort.InferenceSession(data, providers=[("CUDAExecutionProvider", {"device_id": 7}), "host"])
    assert sess.get_providers() == ["host"]


def test_unknown_providers_are_errors_listing_what_exists():
    data = symbolic_model().SerializeToString()
    with pytest.raises(dl.InvalidArgument, match="FooExecutionProvider") as info:
        dlort.InferenceSession(data, providers=["FooExecutionProvider"])
    assert "CPUExecutionProvider" in str(info.value) and "'host'" in str(info.value)
    with pytest.raises(dl.InvalidArgument, match="nosuch:3"):
        dlort.InferenceSession(data, providers=["nosuch:3"])
    with pytest.warns(UserWarning, match="OpenVINOExecutionProvider"), \
            pytest.raises(dl.InvalidArgument, match="none of the providers"):
        dlort.InferenceSession(data, providers=["OpenVINOExecutionProvider"])
    with pytest.raises(dl.InvalidArgument, match="provider_options"):
        dlort.InferenceSession(data, providers=["host", "CPUExecutionProvider"], provider_options=[{}])
    with pytest.raises(dl.InvalidArgument, match="device_id"):
        dlort.InferenceSession(data, providers=[("CPUExecutionProvider", {"device_id": "first"})])
    with pytest.raises(dl.InvalidArgument, match="providers"):
        dlort.InferenceSession(data, providers=42)


def test_module_level_provider_queries():
    available = dlort.get_available_providers()
    assert "CPUExecutionProvider" in available and "host" in available
    assert ("CUDAExecutionProvider" in available) == _has(dl.DLDeviceType.kDLCUDA)
    assert dlort.get_device() in ("CPU", "GPU")
    assert set(available) <= set(dlort.get_all_providers())


def test_onnxruntime_session_options_are_read():
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    with open(dlort.bundled("tiny_cnn"), "rb") as f:
        data = f.read()
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    plain = dlort.InferenceSession(data, opts, providers=["host"])
    folded = dlort.InferenceSession(data, providers=["host"])
    assert plain.get_session_options() is opts
    assert scaled_error(plain.run(None, {"x": x})[0], folded.run(None, {"x": x})[0]) < 1e-5
    assert len(plain.plan.placement_table()) > len(folded.plan.placement_table())  # nothing folded


# -- every device --------------------------------------------------------------------------------------------------
def test_session_on_every_device_matches_onnxruntime(device):
    data = symbolic_model().SerializeToString()
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    sess = dlort.InferenceSession(data, providers=[device.id])
    for n, m in ((2, 5), (3, 1), (2, 5)):  # a second shape specialises; the first comes from the cache
        feed = feeds(n, m, seed=n * 10 + m)
        for got, want in zip(sess.run(None, feed), ref.run(None, feed)):
            assert got.shape == want.shape and scaled_error(got, want) < 1e-5
    assert sess.plan.cache_info()["misses"] == 2
    t = dl.tensor(feeds()["x"], device)  # a Tensor in input_feed is taken as it is
    got = sess.run(["y"], {"x": t, "k": feeds()["k"]})[0]
    assert scaled_error(got, ref.run(["y"], feeds())[0]) < 1e-5
    t.free()


def test_iobinding_keeps_data_on_the_device(device):
    data = symbolic_model().SerializeToString()
    ref = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    sess = dlort.InferenceSession(data, providers=[device.id])
    feed = feeds()
    want = dict(zip(["y", "k1"], ref.run(None, feed)))
    x, k = dl.tensor(feed["x"], device), dl.tensor(feed["k"], device)
    binding = sess.io_binding()
    binding.bind_input("x", x)
    binding.bind_ortvalue_input("k", k)
    binding.bind_output("y", device.id)
    binding.bind_output("k1", device)
    live = None
    for _ in range(4):
        sess.run_with_iobinding(binding)
        y, k1 = binding.get_outputs()
        assert y.device is device and k1.device is device
        assert sess.plan.transfers == 0
        assert scaled_error(y.numpy(), want["y"]) < 1e-5 and k1.numpy().tolist() == want["k1"].tolist()
        assert settle()  # buffers earlier tests dropped are released first, so the count is this session's
        if live is None:
            live = device.pool.live_buffers
        assert device.pool.live_buffers == live  # the previous run's outputs were freed: nothing piles up
    cpu = binding.copy_outputs_to_cpu()
    assert scaled_error(cpu[0], want["y"]) < 1e-5
    binding.synchronize_inputs()
    binding.synchronize_outputs()

    # outputs written into memory the caller owns: a Tensor on the device, and a NumPy array through DLPack
    into = dl.empty(want["y"].shape, np.float32, device)
    k_out = np.zeros(2, np.int64)
    binding.bind_output("y", into)
    binding.bind_output("k1", k_out)
    sess.run_with_iobinding(binding)
    outs = binding.get_outputs()
    assert outs[0] is into and outs[1] is k_out
    assert scaled_error(into.numpy(), want["y"]) < 1e-5 and k_out.tolist() == want["k1"].tolist()
    binding.clear_binding_outputs()
    binding.clear_binding_inputs()
    for t in (x, k, into):
        t.free()


def test_iobinding_moves_outputs_where_bound(device_pair):
    a, b = (dl.device(d) for d in device_pair)
    data = symbolic_model().SerializeToString()
    sess = dlort.InferenceSession(data, providers=[a.id])
    binding = sess.io_binding()
    feed = feeds()
    binding.bind_cpu_input("x", feed["x"])
    binding.bind_input("k", feed["k"])  # a NumPy array is a DLPack array too
    binding.bind_output("y", b.id)
    sess.run_with_iobinding(binding)
    (y,) = binding.get_outputs()
    assert y.device is b
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(["y"], feed)[0]
    assert scaled_error(y.numpy(), want) < 1e-5
    binding.clear_binding_outputs()


def test_iobinding_with_onnxruntime_style_raw_memory():
    data = symbolic_model().SerializeToString()
    sess = dlort.InferenceSession(data, providers=["host"])
    feed = feeds()
    y = np.empty((2, 5, 3), np.float32)
    binding = sess.io_binding()
    binding.bind_input(name="x", device_type="cpu", device_id=0, element_type=np.float32, shape=feed["x"].shape,
                       buffer_ptr=feed["x"].ctypes.data)
    binding.bind_input("k", "cpu", 0, TensorProto.INT64, (2,), feed["k"].ctypes.data)  # an ONNX element type
    binding.bind_output(name="y", device_type="cpu", device_id=0, element_type=np.float32, shape=y.shape,
                        buffer_ptr=y.ctypes.data)
    sess.run_with_iobinding(binding)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(["y"], feed)[0]
    assert scaled_error(y, want) < 1e-5
    binding.clear_binding_inputs()
    binding.clear_binding_outputs()


def test_iobinding_misuse():
    data = symbolic_model().SerializeToString()
    sess = dlort.InferenceSession(data, providers=["host"])
    binding = sess.io_binding()
    feed = feeds()
    with pytest.raises(dl.InvalidArgument, match="'q'"):
        binding.bind_cpu_input("q", feed["x"])
    with pytest.raises(dl.InvalidArgument, match="'nope'"):
        binding.bind_output("nope")
    with pytest.raises(dl.InvalidArgument, match="NumPy"):
        binding.bind_cpu_input("x", [1, 2])
    with pytest.raises(dl.InvalidArgument, match="expected a Tensor"):
        binding.bind_input("x", [1.0, 2.0])
    with pytest.raises(dl.InvalidArgument, match="element_type and shape"):
        binding.bind_input("x", "cpu", 0, np.float32, None, feed["x"].ctypes.data)
    with pytest.raises(dl.InvalidArgument, match="buffer_ptr"):
        binding.bind_input("x", "cpu", 0, np.float32, (2, 5, 4), -8)
    with pytest.raises(dl.InvalidArgument, match="go with buffer_ptr"):
        binding.bind_output("y", "cpu", 0, np.float32, (2, 5, 3))
    with pytest.raises(dl.InvalidArgument, match="unknown device"):
        binding.bind_output("y", "tpu")
    binding.bind_cpu_input("x", feed["x"])
    with pytest.raises(dl.InvalidArgument, match=r"\['k'\]"):
        sess.run_with_iobinding(binding)  # k is not bound
    binding.bind_cpu_input("k", feed["k"])
    binding.bind_output("y", np.zeros((2, 5, 2), np.float32))
    with pytest.raises(dl.InvalidArgument, match="'y'"):
        sess.run_with_iobinding(binding)  # the memory bound to y has the wrong shape
    read_only = np.zeros((2, 5, 3), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(dl.InvalidArgument, match="read-only"):
        binding.bind_output("y", read_only)
    other = dlort.InferenceSession(data, providers=["host"])
    with pytest.raises(dl.InvalidArgument, match="IOBinding"):
        other.run_with_iobinding(binding)
    binding.bind_output("y")
    sess.run_with_iobinding(binding)  # still usable
    assert binding.get_outputs()[0].shape == (2, 5, 3)
    binding.clear_binding_outputs()


def test_iobinding_with_torch_tensors():
    torch = pytest.importorskip("torch")
    data = symbolic_model().SerializeToString()
    sess = dlort.InferenceSession(data, providers=["host"])
    feed = feeds()
    x, k = torch.from_numpy(feed["x"].copy()), torch.from_numpy(feed["k"].copy())
    y = torch.zeros(2, 5, 3)
    binding = sess.io_binding()
    binding.bind_input("x", x)
    binding.bind_input("k", k)
    binding.bind_output("y", y)
    sess.run_with_iobinding(binding)
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(["y"], feed)[0]
    assert scaled_error(y.numpy(), want) < 1e-5
    x.mul_(2)  # bound arrays are read again at every run
    sess.run_with_iobinding(binding)
    feed["x"] *= 2
    want = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(["y"], feed)[0]
    assert scaled_error(y.numpy(), want) < 1e-5
    got = torch.from_dlpack(sess.run(["y"], {"x": x, "k": k})[0])  # torch tensors in run()'s input_feed too
    assert scaled_error(got.numpy(), want) < 1e-5


# -- what onnxruntime does not offer -------------------------------------------------------------------------
def test_reports_and_profiling(tmp_path):
    opts = dlort.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof_")
    with open(dlort.bundled("tiny_cnn"), "rb") as f:
        sess = dlort.InferenceSession(f.read(), opts, providers=["host"])
    assert sess.end_profiling() == ""  # nothing run yet
    sess.run(None, {"x": np.zeros((1, 3, 32, 32), np.float32)})
    report = sess.placement_report()
    assert "conv1" in report and "host" in report
    memory = sess.memory_report()
    assert memory["host"]["peak"] >= memory["host"]["lower_bound"] > 0
    assert sess.last_profile and all("device" in r for r in sess.last_profile)
    path = sess.end_profiling()
    assert path.startswith(str(tmp_path))
    with open(path) as f:
        assert json.load(f)
    sess.profiling = False
    sess.run(None, {"x": np.zeros((1, 3, 32, 32), np.float32)})
    assert "InferenceSession" in repr(sess)
