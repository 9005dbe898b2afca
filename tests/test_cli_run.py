"""``devicelayer run``: the bundled model on every device, inputs from files, outputs saved, --check
against onnxruntime (and a failing check's exit status), --json, --trace, and bad usage."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

import devicelayer as dl

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


import devicelayer.onnx as dlo  # noqa: E402
from devicelayer import cli_run  # noqa: E402
from devicelayer.onnx import load  # noqa: E402
from devicelayer.onnx.models import bundled_path  # noqa: E402


def run(capsys, *argv):
    rc = cli_run.standalone(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_bundled_on_every_device_with_check_json(capsys):
    rc, out, err = run(capsys, "--bundled", "tiny_cnn", "--device", "all", "--check", "--repeat", "3", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == cli_run.JSON_SCHEMA and doc["ok"] is True
    assert [e["device"] for e in doc["devices"]] == [d.id for d in dl.devices()]
    nodes = len(load(bundled_path("tiny_cnn")).graph().needed())  # after folding (conv + relu are one node)
    assert 0 < nodes < 9
    for i, e in enumerate(doc["devices"]):
        assert e["latency_ms"]["min"] <= e["latency_ms"]["median"]
        assert e["placement"] == {e["device"]: nodes}
        assert e["transfers"] == 0
        assert e["memory"][e["device"]]["peak"] >= e["memory"][e["device"]]["lower_bound"]
        assert e["check"]["ok"] and e["check"]["reference"] == "onnxruntime"
        assert ("agreement" in e) == (i > 0)
        assert e["outputs"] == {"probs": {"shape": [1, 10], "dtype": "float32"}}


def test_several_shapes_in_one_call_each_reported_and_checked(capsys):
    rc, out, err = run(capsys, "--bundled", "tiny_cnn", "--device", "host", "--check", "--shape", "x=1,3,32,32",
                       "--shape", "x=5,3,32,32", "--repeat", "2", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["shape_sets"] == [{"x": [1, 3, 32, 32]}, {"x": [5, 3, 32, 32]}]
    assert [e["shapes"] for e in doc["devices"]] == doc["shape_sets"]
    assert [e["outputs"]["probs"]["shape"] for e in doc["devices"]] == [[1, 10], [5, 10]]
    assert all(e["check"]["ok"] for e in doc["devices"])
    assert doc["devices"][-1]["specialisations"]["misses"] == 2  # one plan, specialised per signature
    rc, out, err = run(capsys, "--bundled", "tiny_cnn", "--shape", "x=1,3,32,32", "--shape", "x=2,3,32,32",
                       "--shape", "x=3,3,32,32", "--device", "host")
    assert rc == 0, err
    assert out.count("host") >= 3


def test_inputs_from_files_and_saved_outputs(capsys, tmp_path):
    x = np.random.default_rng(5).standard_normal((2, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rc, out, err = run(capsys, "--bundled", "tiny_cnn", "--device", "host", "--input", f"x={tmp_path / 'x.npy'}",
                       "--save-outputs", str(tmp_path / "out.npz"))
    assert rc == 0, err
    saved = np.load(tmp_path / "out.npz")
    want = dlo.load(dlo.bundled("tiny_cnn"), input_shapes={"x": x.shape}).compile(["host"])(x=x)["probs"]
    np.testing.assert_allclose(saved["probs"], want, rtol=1e-6)
    assert "host" in out  # the table


def test_auto_placement_trace_and_shape(capsys, tmp_path):
    trace = tmp_path / "trace.json"
    rc, out, err = run(capsys, "--bundled", "tiny_cnn", "--shape", "x=3,3,32,32", "--trace", str(trace), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["inputs"] == {"x": [3, 3, 32, 32]}
    assert doc["devices"][0]["device"] == "auto"
    assert json.loads(trace.read_text())  # a Chrome trace


def test_failing_check_exits_1(capsys, monkeypatch):
    import devicelayer.onnx.testing as testing

    real = testing.onnxruntime_run
    monkeypatch.setattr(testing, "onnxruntime_run", lambda m, f: {k: v + 1 for k, v in real(m, f).items()})
    rc, out, err = run(capsys, "--bundled", "tiny_cnn", "--device", "host", "--check", "--json")
    assert rc == 1
    assert json.loads(out)["devices"][0]["check"]["ok"] is False


def test_bad_usage_exits_2(capsys, tmp_path):
    assert run(capsys, "--device", "host")[0] == 2  # no model
    rc, _, err = run(capsys, str(tmp_path / "missing.onnx"))
    assert rc == 2 and "no ONNX model file" in err
    rc, _, err = run(capsys, "--bundled", "tiny_cnn", "--input", "nope=x.npy")
    assert rc == 2 and "no input 'nope'" in err
    rc, _, err = run(capsys, "--bundled", "tiny_cnn", "--input", f"x={tmp_path / 'absent.npy'}")
    assert rc == 2 and "cannot read" in err
    rc, _, err = run(capsys, "--bundled", "tiny_cnn", "--device", "nosuch:9")
    assert rc == 2
    rc, _, err = run(capsys, "--bundled", "tiny_cnn", "--input", "x")
    assert rc == 2 and "NAME=VALUE" in err


def test_unsupported_model_exits_2_naming_the_op(capsys, tmp_path):
    from misuse_cases.onnx_models import lacking_op_model

    path = tmp_path / "m.onnx"
    onnx.save(lacking_op_model("dec"), str(path))
    rc, _, err = run(capsys, str(path), "--device", "host")
    assert rc == 2 and "ImageDecoder" in err and "dec" in err


def test_add_parser_wires_into_a_parent_parser(capsys):
    parser = argparse.ArgumentParser(prog="devicelayer")
    sub = parser.add_subparsers(dest="command", required=True)
    cli_run.add_parser(sub)
    args = parser.parse_args(["run", "--bundled", "tiny_cnn", "--device", "host", "--repeat", "0", "--json"])
    assert cli_run.main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["devices"][0]["latency_ms"] is None
