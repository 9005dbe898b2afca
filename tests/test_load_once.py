"""What a second load of the same model does not do again: weights read once from the file's bytes, the onnx
checker's verdict kept per file in the disk cache, the load's trial walk reused by the first compile, and a
device's slow extras (a management library's clocks and power) read only when asked for."""

from __future__ import annotations

import copy
import pickle
import threading

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.info import LazyExtras

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import devicelayer.onnx as dlo  # noqa: E402
import devicelayer.onnx.model as onnx_model  # noqa: E402
from devicelayer.onnx.testing import onnxruntime_run  # noqa: E402

R = np.random.default_rng(77)


def _conv_model(batch: int | str = 2, half: bool = True) -> onnx.ModelProto:
    """Conv -> Relu -> mean -> MatMul over weights of several storage types (raw float32, float16 (float32
    without ``half``) and int64, typed float_data)."""
    low = TensorProto.FLOAT16 if half else TensorProto.FLOAT
    w = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = helper.make_tensor("b", TensorProto.FLOAT, [4], R.standard_normal(4).astype(np.float32).tolist())
    m = R.standard_normal((4, 5)).astype(np.float16 if half else np.float32)
    shape = np.array([-1, 4], np.int64)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("ReduceMean", ["r"], ["p"], axes=[2, 3], keepdims=0, name="pool"),
             helper.make_node("Reshape", ["p", "shape"], ["q"], name="flat"),
             helper.make_node("Cast", ["q"], ["h"], to=low, name="half"),
             helper.make_node("MatMul", ["h", "m"], ["y"], name="mm")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 6, 6])],
        [helper.make_tensor_value_info("y", low, [batch, 5])],
        [numpy_helper.from_array(w, "w"), b, numpy_helper.from_array(m, "m"), numpy_helper.from_array(shape, "shape")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _x(batch: int = 2) -> np.ndarray:
    return R.standard_normal((batch, 3, 6, 6)).astype(np.float32)


# -- weights ---------------------------------------------------------------------------------------------------------
def test_weights_are_the_initializers_read_only_and_raw_ones_not_copied_twice(tmp_path):
    model = _conv_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    for source in (model, model.SerializeToString(), path):
        loaded = dlo.load(source)
        for init in model.graph.initializer:
            got, want = loaded.constants[init.name], numpy_helper.to_array(init)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_array_equal(got, want)
        w = loaded.constants["w"]
        assert not w.flags.writeable  # a view over the tensor's bytes: nothing may write the model's weights
        with pytest.raises(ValueError):
            w[0, 0, 0, 0] = 1.0


def test_raw_data_of_the_wrong_length_is_a_graph_error_naming_the_initializer():
    from devicelayer.onnx.model import _raw_array

    t = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    t.raw_data = t.raw_data[:-4]
    with pytest.raises(dl.GraphError, match="initializer 'w' cannot be read: 20 bytes"):
        _raw_array(t, np.dtype(np.float32))


def test_external_weights_are_read_once_and_run(tmp_path):
    from onnx.external_data_helper import convert_model_to_external_data

    model = _conv_model()
    inline = copy.deepcopy(model)
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    onnx.save(model, str(tmp_path / "m.onnx"))
    loaded = dlo.load(tmp_path / "m.onnx")
    assert all(t.data_location == TensorProto.DEFAULT for t in loaded.proto.graph.initializer)
    x = _x()
    want = onnxruntime_run(inline, {"x": x})["y"]
    np.testing.assert_allclose(loaded.compile(["host"])(x=x)["y"].astype(np.float32), want.astype(np.float32),
                               rtol=2e-3, atol=2e-3)


# -- the checker's verdict -------------------------------------------------------------------------------------------
@pytest.fixture
def checks(monkeypatch, tmp_path):
    """The number of times onnx's checker runs, over a disk cache of the test's own."""
    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "cache"))
    calls = []
    real = onnx.checker.check_model

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(onnx.checker, "check_model", counted)
    return calls


def test_a_file_that_passed_the_checker_is_not_checked_again_until_it_changes(checks, tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(_conv_model(), str(path))
    x = _x()
    first = dlo.load(path).compile(["host"])(x=x)["y"]
    assert len(checks) == 1
    again = dlo.load(str(path)).compile(["host"])(x=x)["y"]
    assert len(checks) == 1  # the verdict came from the disk cache
    np.testing.assert_array_equal(first, again)
    onnx.save(_conv_model(), str(path))  # rewritten: other weights, another change time
    dlo.load(path)
    assert len(checks) == 2
    # the same bytes given as bytes or a ModelProto are checked each time (no file to vouch for them)
    dlo.load(path.read_bytes())
    dlo.load(onnx.load(str(path)))
    assert len(checks) == 4


def test_a_checked_file_is_parsed_from_a_mapping_that_the_model_outlives(checks, tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    model = _conv_model()
    onnx.save(model, str(path))
    dlo.load(path)
    assert len(checks) == 1

    def unread(self):
        raise AssertionError("a checked file is mapped, not read into bytes")

    monkeypatch.setattr(type(path), "read_bytes", unread)
    loaded = dlo.load(path)
    assert len(checks) == 1
    for init in model.graph.initializer:
        np.testing.assert_array_equal(loaded.constants[init.name], numpy_helper.to_array(init))
    assert loaded.constants["w"].ctypes.data % 64 == 0 and not loaded.constants["w"].flags.writeable
    # the mapping is gone: bytes written over the file in place change nothing loaded
    size = path.stat().st_size
    with open(path, "r+b") as fh:
        fh.write(b"\xff" * size)
    for init in model.graph.initializer:
        np.testing.assert_array_equal(loaded.constants[init.name], numpy_helper.to_array(init))
    x = _x()
    want = onnxruntime_run(model, {"x": x})["y"]
    np.testing.assert_allclose(loaded.compile(["host"])(x=x)["y"].astype(np.float32), want.astype(np.float32),
                               rtol=2e-3, atol=2e-3)
    monkeypatch.undo()
    with pytest.raises(dl.GraphError, match="does not parse|checker"):  # changed: read and checked again
        dlo.load(path)


def _dangling(model):
    model.graph.node[1].input[0] = "nowhere"


def _short_weights(model):
    w = next(t for t in model.graph.initializer if t.name == "w")
    w.raw_data = w.raw_data[:-8]  # the onnx checker does not count the bytes; devicelayer does


@pytest.mark.parametrize("spoil, says", [(_dangling, "checker|nowhere"),
                                          (_short_weights, "initializer 'w': raw_data holds 424 bytes; FLOAT")],
                         ids=["onnx checker", "devicelayer validation"])
def test_a_file_refused_is_refused_every_time_and_nothing_is_kept(checks, tmp_path, spoil, says):
    model = _conv_model()
    spoil(model)
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    for k in range(2):
        with pytest.raises(dl.GraphError, match=says):
            dlo.load(path)
        assert len(checks) == k + 1
    stamps = tmp_path / "cache" / "onnx-checked"
    assert not stamps.exists() or not any(stamps.iterdir())


def test_an_unwritable_cache_only_costs_the_check(monkeypatch, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("DEVICELAYER_CACHE", str(blocker))
    path = tmp_path / "m.onnx"
    onnx.save(_conv_model(), str(path))
    x = _x()
    for _ in range(2):
        y = dlo.load(path).compile(["host"])(x=x)["y"]
        assert y.shape == (2, 5)


# -- the trial walk --------------------------------------------------------------------------------------------------
@pytest.fixture
def walks(monkeypatch):
    calls = []
    real = onnx_model.walk

    def counted(*args, **kwargs):
        calls.append(args[2])
        return real(*args, **kwargs)

    monkeypatch.setattr(onnx_model, "walk", counted)
    return calls


def test_the_first_compile_of_a_fixed_model_takes_the_loads_walk(walks, device):
    model = _conv_model(half=device.info.supports("float16"))
    loaded = dlo.load(model)
    assert len(walks) == 1
    x = _x()
    want = onnxruntime_run(model, {"x": x})["y"].astype(np.float32)
    plan = loaded.compile([device.id])
    assert len(walks) == 1
    np.testing.assert_allclose(plan(x=x)["y"].astype(np.float32), want, rtol=2e-3, atol=2e-3)
    other = loaded.compile([device.id])  # a second compile walks on its own
    assert len(walks) == 2
    np.testing.assert_allclose(other(x=x)["y"].astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_a_symbolic_model_reuses_the_walk_only_for_the_shapes_it_walked(walks):
    model = _conv_model("batch")
    loaded = dlo.load(model)
    plan = loaded.compile(["host"])
    assert len(walks) == 1  # nothing prepared ahead: the batch is not known
    for batch in (3, 1, 3):
        x = _x(batch)
        want = onnxruntime_run(model, {"x": x})["y"].astype(np.float32)
        np.testing.assert_allclose(plan(x=x)["y"].astype(np.float32), want, rtol=2e-3, atol=2e-3)
    assert len(walks) == 2  # batch 3 walked; batch 1 is the shape the load walked


# -- extras read when asked for ----------------------------------------------------------------------------------------
def test_lazy_extras_read_the_slow_part_once_and_only_for_keys_beyond_the_known():
    calls = []

    def more():
        calls.append(1)
        return {"clock_mhz": 1980, "known": "not this"}

    e = LazyExtras({"known": "kept", "cc": "9.0"}, more)
    assert e["known"] == "kept" and e.get("cc") == "9.0" and "cc" in e and not calls
    assert e.get("clock_mhz") == 1980 and len(calls) == 1
    assert e["known"] == "kept"  # the known value wins over the slow part's
    assert dict(e) == {"known": "kept", "cc": "9.0", "clock_mhz": 1980} and len(e) == 3 and len(calls) == 1
    with pytest.raises(KeyError):
        e["absent"]
    assert e.get("absent") is None and "absent" not in e


def test_lazy_extras_copy_pickle_and_compare_as_dicts():
    def fresh():
        return LazyExtras({"a": [1, 2]}, lambda: {"b": 2})

    for e in (fresh(), fresh()):
        assert pickle.loads(pickle.dumps(e)) == {"a": [1, 2], "b": 2}
    deep = copy.deepcopy(fresh())
    assert type(deep) is dict and deep == {"a": [1, 2], "b": 2}
    assert fresh() == {"a": [1, 2], "b": 2} and fresh() != {"a": [1, 2]}


def test_lazy_extras_read_once_under_threads():
    calls = []
    gate = threading.Event()

    def more():
        gate.wait(5)
        calls.append(1)
        return {"b": 2}

    e = LazyExtras({"a": 1}, more)
    got = []
    threads = [threading.Thread(target=lambda: got.append(e.get("b"))) for _ in range(8)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join(10)
    assert got == [2] * 8 and calls == [1]


def test_every_device_reports_its_extras_whole(device):
    i = device.info
    whole = i.as_dict()["extras"]
    assert type(whole) is dict and set(whole) == set(i.extras) and len(whole) == len(i.extras)
    assert pickle.loads(pickle.dumps(i)).extras == whole
