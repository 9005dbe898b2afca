"""Misuse of the ``devicelayer`` command: each answered by one line on stderr and exit status 2."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from .catalogue import UsageExit, cli, misuses
from .onnx_models import lacking_op_model


class _Files:
    """Input files for ``devicelayer run``, and the device under test as its ``--device``."""

    def __init__(self, s) -> None:
        onnx = pytest.importorskip("onnx")
        self.device = s.device.id
        self.text = s.path("text.npy")
        np.save(self.text, np.array(["a", "b"]))
        self.vector = s.path("vector.npy")
        np.save(self.vector, np.ones(2, np.float32))
        self.garbage = s.path("garbage.onnx")
        self.garbage.write_bytes(b"these bytes are no model")
        self.lacking = s.path("lacking.onnx")
        onnx.save(lacking_op_model(), str(self.lacking))
        self.missing = s.path("missing")
        self.folder = s.path("folder")
        self.folder.mkdir()
        x = np.ones((1, 3, 32, 32), np.float32)
        self.two = s.path("two.npz")
        np.savez(self.two, a=x, b=x)
        self.cut = s.path("cut.npz")
        self.cut.write_bytes(self.two.read_bytes()[:100])
        self.empty = s.path("empty.npy")
        self.empty.write_bytes(b"")
        self.objects = s.path("objects.npy")
        np.save(self.objects, np.array([{"a": 1}], dtype=object), allow_pickle=True)
        self.pickled = s.path("pickled.npy")
        self.pickled.write_bytes(pickle.dumps(x))
        self.complex = s.path("complex.npy")
        np.save(self.complex, x + 1j)

    def run(self, *args: object) -> None:
        """``devicelayer run --device DEVICE ARGS`` (a later --device in ARGS wins)."""
        cli("run", "--device", self.device, *map(str, args))

    def tiny(self, *args: object) -> None:
        """``devicelayer run --bundled tiny_cnn --device DEVICE ARGS``."""
        self.run("--bundled", "tiny_cnn", *args)


def _with_backends(value: str, *argv: object) -> None:
    """``DEVICELAYER_BACKENDS=value devicelayer ARGV`` (the variable restored afterwards)."""
    old = os.environ.get("DEVICELAYER_BACKENDS")
    os.environ["DEVICELAYER_BACKENDS"] = value
    try:
        cli(*map(str, argv))
    finally:
        if old is None:
            del os.environ["DEVICELAYER_BACKENDS"]
        else:
            os.environ["DEVICELAYER_BACKENDS"] = old


def _unwritable_folder() -> Path:
    """A folder nobody can create files in, root included (procfs)."""
    if not Path("/proc/self").is_dir():
        pytest.skip("needs /proc")
    return Path("/proc")


E = UsageExit
misuses("cli", _Files, [
    ("cli-run-no-model", "devicelayer run without a model", E, "give a MODEL path or --bundled NAME",
     lambda s, f: f.run()),
    ("cli-run-model-and-bundled", "devicelayer run with a model and --bundled", E, "(one of them)",
     lambda s, f: f.run(f.lacking, "--bundled", "tiny_cnn")),
    ("cli-run-missing-model-file", "devicelayer run on a file that does not exist", E, "no ONNX model file",
     lambda s, f: f.run(f.missing / "model.onnx")),
    ("cli-run-not-a-model", "devicelayer run on a file that is not a model", E, "not an ONNX model",
     lambda s, f: f.run(f.garbage)),
    ("cli-run-unsupported-op", "devicelayer run on a model with an op devicelayer lacks", E,
     "node 'my_decoder' (ImageDecoder)", lambda s, f: f.run(f.lacking)),
    ("cli-run-unknown-bundled", "devicelayer run --bundled nosuch", E, "no bundled model 'nosuch'",
     lambda s, f: f.run("--bundled", "nosuch")),
    ("cli-run-input-unknown-name", "devicelayer run --input nope=FILE", E, "the model has no input 'nope'",
     lambda s, f: f.tiny("--input", f"nope={f.vector}")),
    ("cli-run-input-unreadable", "devicelayer run --input x=FILE that does not exist", E, "cannot read",
     lambda s, f: f.tiny("--input", f"x={f.missing / 'x.npy'}")),
    ("cli-run-input-text-array", "devicelayer run --input x=FILE holding strings", E, "does not convert",
     lambda s, f: f.tiny("--input", f"x={f.text}")),
    ("cli-run-input-wrong-rank", "devicelayer run --input x=FILE of rank 1 for a rank-4 input", E,
     "input 'x' must have shape ('N', 3, 32, 32) (rank 4), got (2,)", lambda s, f: f.tiny("--input", f"x={f.vector}")),
    ("cli-run-save-outputs-missing-dir", "devicelayer run --save-outputs into a directory that does not exist",
     E, "does not exist", lambda s, f: f.tiny("--save-outputs", f.missing / "o.npz")),
    ("cli-run-trace-missing-dir", "devicelayer run --trace into a directory that does not exist", E,
     "does not exist", lambda s, f: f.tiny("--trace", f.missing / "t.json")),
    ("cli-run-save-outputs-directory", "devicelayer run --save-outputs DIR (a directory)", E, "is a directory",
     lambda s, f: f.tiny("--save-outputs", f.folder)),
    ("cli-run-save-outputs-parent-is-a-file", "devicelayer run --save-outputs FILE/o.npz", E, "is not a directory",
     lambda s, f: f.tiny("--save-outputs", f.vector / "o.npz")),
    ("cli-run-save-outputs-unwritable-dir", "devicelayer run --save-outputs into a directory that takes no files",
     E, "cannot create files in", lambda s, f: f.tiny("--save-outputs", _unwritable_folder() / "o.npz")),
    ("cli-run-save-outputs-disk-full", "devicelayer run --save-outputs /dev/full", E, "No space left on device",
     lambda s, f: f.tiny("--save-outputs", "/dev/full") if Path("/dev/full").exists() else pytest.skip("no /dev/full")),
    ("cli-run-trace-directory", "devicelayer run --trace DIR (a directory)", E, "is a directory",
     lambda s, f: f.tiny("--trace", f.folder)),
    ("cli-run-trace-unwritable-dir", "devicelayer run --trace into a directory that takes no files", E,
     "cannot create files in", lambda s, f: f.tiny("--trace", _unwritable_folder() / "t.json")),
    ("cli-run-input-npz-without-the-array", "devicelayer run --input x=FILE.npz holding a and b", E,
     "none named 'x'", lambda s, f: f.tiny("--input", f"x={f.two}")),
    ("cli-run-input-truncated-npz", "devicelayer run --input x=FILE.npz cut short", E, "cannot read it",
     lambda s, f: f.tiny("--input", f"x={f.cut}")),
    ("cli-run-input-empty-file", "devicelayer run --input x=FILE of 0 bytes", E, "the file is empty",
     lambda s, f: f.tiny("--input", f"x={f.empty}")),
    ("cli-run-input-object-array", "devicelayer run --input x=FILE.npy of Python objects", E,
     "holds pickled Python objects", lambda s, f: f.tiny("--input", f"x={f.objects}")),
    ("cli-run-input-pickle", "devicelayer run --input x=FILE holding a pickle", E, "not an .npy or .npz file",
     lambda s, f: f.tiny("--input", f"x={f.pickled}")),
    ("cli-run-input-complex", "devicelayer run --input x=FILE.npy of complex numbers", E,
     "the imaginary part would be lost", lambda s, f: f.tiny("--input", f"x={f.complex}")),
    ("cli-generate-prompt-file-empty", "devicelayer generate --prompt-file FILE of 0 bytes", E, "the file is empty",
     lambda s, f: cli("generate", "--bundled", "tiny_gpt", "--device", f.device, "--prompt-file", str(f.empty))),
    ("cli-info-backends-env-unknown", "DEVICELAYER_BACKENDS=warpdrive devicelayer info", E,
     "no backend named 'warpdrive' is installed; the backends are", lambda s, f: _with_backends("warpdrive", "info")),
    ("cli-run-backends-env-empty", "DEVICELAYER_BACKENDS=,,, devicelayer run", E, "names no backend",
     lambda s, f: _with_backends(",,,", "run", "--bundled", "tiny_cnn", "--device", f.device)),
    ("cli-bench-backends-env-unknown", "DEVICELAYER_BACKENDS=host,warpdrive devicelayer bench", E,
     "no backend named 'warpdrive'", lambda s, f: _with_backends("host,warpdrive", "bench", "--quick")),
    ("cli-generate-backends-env-unknown", "DEVICELAYER_BACKENDS=warpdrive devicelayer generate", E,
     "no backend named 'warpdrive'",
     lambda s, f: _with_backends("warpdrive", "generate", "--bundled", "tiny_gpt", "--prompt", "1,2")),
    ("cli-info-unknown-flag", "devicelayer info --bogus", E, "unrecognized arguments: --bogus",
     lambda s, f: cli("info", "--bogus")),
    ("cli-info-unknown-backend", "devicelayer info --backend warpdrive", E, "unknown backend(s) ['warpdrive']",
     lambda s, f: cli("info", "--backend", "warpdrive")),
    ("cli-info-backend-without-value", "devicelayer info --backend", E, "expected one argument",
     lambda s, f: cli("info", "--backend")),
    ("cli-no-command", "devicelayer without a command", E, "required: command", lambda s, f: cli()),
    ("cli-unknown-command", "devicelayer frob", E, "invalid choice: 'frob'", lambda s, f: cli("frob")),
])


def _flags(flags: tuple[str, ...]) -> Callable:
    return lambda s, f: f.tiny(*flags)


#: (id, flags of ``devicelayer run --bundled tiny_cnn``, message fragment)
FLAGS = [
    ("cli-run-unknown-device", ("--device", "nosuch:0"), "no device 'nosuch:0'"),
    ("cli-run-negative-repeat", ("--repeat", "-1"), "--repeat must be >= 0"),
    ("cli-run-repeat-not-int", ("--repeat", "abc"), "invalid int value: 'abc'"),
    ("cli-run-bad-shape", ("--shape", "x=a,b"), "dimensions must be integers"),
    ("cli-run-negative-shape", ("--shape", "x=-1,3,32,32"), "dimensions must be >= 0"),
    ("cli-run-negative-tolerance", ("--tolerance", "-1"), "--tolerance must be a finite number"),
    ("cli-run-input-without-equals", ("--input", "x"), "must look like NAME=VALUE"),
]
misuses("cli", _Files, [(id, "devicelayer run " + " ".join(flags), E, fragment, _flags(flags))
                        for id, flags, fragment in FLAGS])
