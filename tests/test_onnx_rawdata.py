"""Initializers' raw bytes found in a serialized model by scanning its wire format: the same bytes the parsed
message holds, under protobuf's rules for repeated and merged fields; None for bytes the scan cannot follow; the
copies 64-byte aligned and read-only."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from devicelayer.onnx import rawdata  # noqa: E402

R = np.random.default_rng(11)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _delimited(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def _model() -> onnx.ModelProto:
    w = numpy_helper.from_array(R.standard_normal((3, 5)).astype(np.float32), "w")
    b = helper.make_tensor("b", TensorProto.FLOAT, [5], R.standard_normal(5).astype(np.float32).tolist())  # float_data
    i = numpy_helper.from_array(np.arange(7, dtype=np.int64), "ids")
    e = numpy_helper.from_array(np.zeros((0, 4), np.float32), "empty")
    u = numpy_helper.from_array(R.standard_normal(9).astype(np.float16), "ünïcode")
    node = helper.make_node("MatMul", ["x", "w"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])], [w, b, i, e, u])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check_matches(data: bytes) -> onnx.ModelProto:
    parsed = onnx.ModelProto()
    parsed.ParseFromString(data)
    found = rawdata.spans(memoryview(data))
    assert found is not None and len(found) == len(parsed.graph.initializer)
    for init, (name, start, end) in zip(parsed.graph.initializer, found):
        assert name == init.name
        if init.HasField("raw_data"):
            assert data[start:end] == init.raw_data
        else:
            assert start == -1
    read = rawdata.read(memoryview(data), parsed.graph.initializer)
    assert read is not None
    for init in parsed.graph.initializer:
        if not init.HasField("raw_data"):
            assert init.name not in read
            continue
        got = read[init.name]
        assert got.tobytes() == init.raw_data and got.ctypes.data % rawdata.ALIGNMENT == 0
        assert not got.flags.writeable
        with pytest.raises(ValueError):
            got.flags.writeable = True
    return parsed


def test_every_initializer_of_a_model_is_found_where_its_bytes_are():
    _check_matches(_model().SerializeToString())


def test_a_graph_field_given_twice_merges_and_a_raw_data_given_twice_takes_the_last():
    model = _model()
    data = model.SerializeToString()
    first = numpy_helper.from_array(np.arange(4, dtype=np.float32), "again")
    second = TensorProto(raw_data=np.arange(10, 14, dtype=np.float32).tobytes())  # merged into the first
    tensor = first.SerializeToString() + second.SerializeToString()
    extra_graph = _delimited(5, tensor)  # GraphProto.initializer, one message in two parts
    data += _delimited(7, extra_graph)  # ModelProto.graph again: merged with the first
    parsed = _check_matches(data)
    assert [t.name for t in parsed.graph.initializer][-1] == "again"
    assert numpy_helper.to_array(parsed.graph.initializer[-1]).tolist() == [10.0, 11.0, 12.0, 13.0]


@pytest.mark.parametrize("spoil", ["truncated", "group", "overrun"])
def test_bytes_the_scan_cannot_follow_give_none(spoil):
    data = _model().SerializeToString()
    if spoil == "truncated":
        data = data[:-3]
    elif spoil == "group":
        data = _key(12, 3) + data  # a group start: no ONNX message has one
    else:
        data = data + _key(20, 2) + _varint(1000) + b"xy"
    assert rawdata.spans(memoryview(data)) is None


def test_a_scan_that_disagrees_with_the_parsed_message_reads_nothing():
    model = _model()
    data = model.SerializeToString()
    other = _model()
    other.graph.initializer[0].name = "renamed"
    assert rawdata.read(memoryview(data), other.graph.initializer) is None
    assert rawdata.read(memoryview(data), list(other.graph.initializer)[:-1]) is None


def _big_model() -> onnx.ModelProto:
    """_model with large tensors too: one of float32, one of bfloat16 (a type NumPy reads through ml_dtypes)."""
    model = _model()
    big = numpy_helper.from_array(R.standard_normal((64, 33)).astype(np.float32), "big")
    bits = (R.standard_normal((40, 70)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    halves = helper.make_tensor("big_bf16", TensorProto.BFLOAT16, [40, 70], bits.tobytes(), raw=True)
    model.graph.initializer.extend([big, halves])
    return model


@pytest.mark.parametrize("merged", [False, True])
def test_the_stripped_model_parses_to_the_message_without_its_large_raw_data(merged):
    model = _big_model()
    data = model.SerializeToString()
    if merged:  # a second graph field, merged by the parser: stripped the same way
        data += _delimited(7, _delimited(5, numpy_helper.from_array(np.ones(2000, np.float32), "more")
                                         .SerializeToString()))
    whole = onnx.ModelProto()
    whole.ParseFromString(data)
    light = rawdata.stripped(memoryview(data), least=4096)
    assert light is not None and len(light) < len(data) - 4 * 64 * 33
    parsed = onnx.ModelProto()
    parsed.ParseFromString(light)
    for got, want in zip(parsed.graph.initializer, whole.graph.initializer, strict=True):
        large = len(want.raw_data) >= 4096
        assert got.HasField("raw_data") == (want.HasField("raw_data") and not large)
        if want.HasField("raw_data"):
            got.raw_data = want.raw_data
        assert got == want
    assert parsed.graph.node == whole.graph.node and parsed.graph.input == whole.graph.input
    read = rawdata.read(memoryview(data), parsed.graph.initializer, rawdata.spans(memoryview(data)))
    assert read is not None
    assert {n: a.tobytes() for n, a in read.items()} == {
        t.name: t.raw_data for t in whole.graph.initializer if t.HasField("raw_data")}


def test_bytes_the_scan_cannot_follow_are_not_stripped():
    data = _big_model().SerializeToString()
    assert rawdata.stripped(memoryview(data[:-3])) is None
    assert rawdata.stripped(memoryview(_key(12, 3) + data)) is None


def _checked_file(tmp_path, monkeypatch):
    """_big_model written to a file and loaded once (checked, then stamped: later loads parse it stripped)."""
    from devicelayer.onnx import load

    monkeypatch.setenv("DEVICELAYER_CACHE", str(tmp_path / "cache"))
    model = _big_model()
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    load(path)
    return model, path


def test_a_model_file_loaded_again_through_the_stripped_parse_has_the_same_constants(tmp_path, monkeypatch):
    """The second load of a checked file is parsed stripped: every constant (bfloat16 ones included) the same as
    a load of the same bytes."""
    from devicelayer.onnx import load
    from devicelayer.onnx.loader import _read

    model, path = _checked_file(tmp_path, monkeypatch)
    proto, raw = _read(path)
    assert raw is not None and not next(t for t in proto.graph.initializer if t.name == "big").HasField("raw_data")
    again, reference = load(path).constants, load(model.SerializeToString()).constants
    assert again.keys() == reference.keys()
    for name in reference:
        assert again[name].dtype == reference[name].dtype and again[name].shape == reference[name].shape
        assert again[name].tobytes() == reference[name].tobytes(), name
    assert again["big_bf16"].dtype.name == "bfloat16"


def test_read_model_gives_the_whole_message_of_a_file_parsed_stripped(tmp_path, monkeypatch):
    """``read_model`` of a checked file (parsed stripped inside) returns every initializer with its raw_data, equal
    to the message the file holds."""
    from devicelayer.onnx import read_model

    model, path = _checked_file(tmp_path, monkeypatch)
    assert read_model(path) == model
