"""``devicelayer run``: the bundled model on every device, inputs from files, outputs saved, --check
against onnxruntime (and a failing check's exit status), --json, --trace, and bad usage."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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


def _one_line_usage_error(rc, out, err, *fragments):
    assert rc == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith("devicelayer run: ") and "Traceback" not in err
    for fragment in fragments:
        assert fragment in line, line
    return line


def test_saved_outputs_are_written_at_exactly_the_path_given(capsys, tmp_path):
    for name in ("outputs", "outputs.bin", "outputs.npz"):
        rc, _, err = run(capsys, "--bundled", "tiny_cnn", "--device", "host", "--save-outputs", str(tmp_path / name))
        assert rc == 0, err
        with np.load(tmp_path / name) as saved:
            assert saved["probs"].shape == (1, 10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs", "outputs.bin", "outputs.npz"]


@pytest.mark.parametrize("where", ["a directory", "under a file", "a folder taking no files", "a full disk"])
@pytest.mark.parametrize("flag", ["--save-outputs", "--trace"])
def test_an_output_path_that_cannot_be_written_is_a_usage_error(capsys, tmp_path, where, flag):
    (tmp_path / "file").write_text("x")
    path = {"a directory": tmp_path, "under a file": tmp_path / "file" / "out",
            "a folder taking no files": Path("/proc/out"), "a full disk": Path("/dev/full")}[where]
    if not path.parent.exists():
        pytest.skip(f"no {path.parent} here")
    rc, out, err = run(capsys, "--bundled", "tiny_cnn", "--device", "host", "--json", flag, str(path))
    line = _one_line_usage_error(rc, out, err, f"{flag} {path}:")
    if where != "a full disk":  # refused before anything ran (a full disk shows only when written)
        assert out == "", line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing, not even a partial file, left
    assert not Path(f"{path}.npz").exists()


def test_an_unwritable_trace_is_refused_before_any_run(capsys, monkeypatch):
    from devicelayer.onnx.model import OnnxModel

    compiled = []
    real = OnnxModel.compile
    monkeypatch.setattr(OnnxModel, "compile", lambda self, *a, **k: compiled.append(1) or real(self, *a, **k))
    rc, out, err = run(capsys, "--bundled", "tiny_cnn", "--device", "all", "--trace", "/proc/trace.json")
    _one_line_usage_error(rc, out, err, "--trace /proc/trace.json:", "cannot create files in '/proc'")
    assert compiled == []


def _tiny_input():
    return np.random.default_rng(7).standard_normal((2, 3, 32, 32)).astype(np.float32)


@pytest.mark.parametrize("layout", ["one array", "named x among others"])
def test_inputs_from_npz_files(capsys, tmp_path, layout):
    x = _tiny_input()
    path = tmp_path / "in.npz"
    if layout == "one array":
        np.savez(path, x)
    else:
        np.savez(path, y=x[:1], x=x)
    rc, _, err = run(capsys, "--bundled", "tiny_cnn", "--device", "host", "--input", f"x={path}",
                     "--save-outputs", str(tmp_path / "out.npz"))
    assert rc == 0, err
    want = dlo.load(dlo.bundled("tiny_cnn"), input_shapes={"x": x.shape}).compile(["host"])(x=x)["probs"]
    with np.load(tmp_path / "out.npz") as saved:
        np.testing.assert_allclose(saved["probs"], want, rtol=1e-6)


def _bad_inputs(tmp_path):
    x = _tiny_input()
    np.savez(tmp_path / "two.npz", a=x, b=x)
    np.savez(tmp_path / "none.npz")
    np.save(tmp_path / "good.npy", x)
    good = (tmp_path / "good.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(good[:100])
    (tmp_path / "short.npy").write_bytes(good[:-8])
    (tmp_path / "cut.npz").write_bytes((tmp_path / "two.npz").read_bytes()[:200])
    (tmp_path / "empty.npy").write_bytes(b"")
    (tmp_path / "text.npy").write_text("1 2 3\n")
    (tmp_path / "pickle.npy").write_bytes(__import__("pickle").dumps(x))
    np.save(tmp_path / "objects.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(tmp_path / "objects.npz", x=np.array([{"a": 1}], dtype=object))
    np.save(tmp_path / "complex.npy", x + 1j)
    np.save(tmp_path / "strings.npy", np.array(["a", "b"]))
    (tmp_path / "folder").mkdir()
    return {
        "several arrays, none x": ("two.npz", "holds arrays ['a', 'b'], none named 'x'"),
        "an empty .npz": ("none.npz", "the .npz holds no array"),
        "a truncated header": ("cut.npy", "cannot read it"),
        "truncated data": ("short.npy", "cannot read it"),
        "a truncated .npz": ("cut.npz", "cannot read it"),
        "an empty file": ("empty.npy", "the file is empty"),
        "text": ("text.npy", "not an .npy or .npz file"),
        "a pickle": ("pickle.npy", "not an .npy or .npz file"),
        "Python objects": ("objects.npy", "holds pickled Python objects"),
        "Python objects in an .npz": ("objects.npz", "holds pickled Python objects"),
        "complex numbers": ("complex.npy", "complex64 values cannot become float32"),
        "strings": ("strings.npy", "does not convert to the model's float32"),
        "a folder": ("folder", "cannot read it: Is a directory"),
        "a missing file": ("missing.npy", "cannot read it: No such file or directory"),
    }


BAD_INPUTS = ["several arrays, none x", "an empty .npz", "a truncated header", "truncated data", "a truncated .npz",
              "an empty file", "text", "a pickle", "Python objects", "Python objects in an .npz", "complex numbers",
              "strings", "a folder", "a missing file"]


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_an_input_file_that_cannot_be_used_is_a_one_line_usage_error(capsys, tmp_path, case):
    name, says = _bad_inputs(tmp_path)[case]
    path = tmp_path / name
    rc, out, err = run(capsys, "--bundled", "tiny_cnn", "--device", "host", "--input", f"x={path}")
    _one_line_usage_error(rc, out, err, f"--input x={path}:", says)


@pytest.mark.parametrize("case", ["an empty file", "a truncated .npz", "Python objects", "several arrays, none x"])
def test_a_prompt_file_that_cannot_be_used_is_a_one_line_usage_error(capsys, tmp_path, case):
    from devicelayer.cli import main

    name, says = _bad_inputs(tmp_path)[case]
    path = tmp_path / name
    rc = main(["generate", "--bundled", "tiny_gpt", "--device", "host", "--prompt-file", str(path)])
    out, err = capsys.readouterr()
    assert rc == 2 and "Traceback" not in err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"devicelayer generate: --prompt-file {path}:")
    assert says.replace("'x'", "'input_ids'") in line


def test_a_prompt_from_an_npz(capsys, tmp_path):
    from devicelayer.cli import main

    np.savez(tmp_path / "ids.npz", input_ids=np.array([[1, 5, 7]]), other=np.zeros(2))
    assert main(["generate", "--bundled", "tiny_gpt", "--device", "host", "--prompt-file", str(tmp_path / "ids.npz"),
                 "--tokens", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["prompt"] == [[1, 5, 7]]
