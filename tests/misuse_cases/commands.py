"""Misuse of the ``devicelayer`` command: each answered by one line on stderr and exit status 2."""

from __future__ import annotations

import os
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

    def run(self, *args: object) -> None:
        """``devicelayer run --device DEVICE ARGS`` (a later --device in ARGS wins)."""
        cli("run", "--device", self.device, *map(str, args))

    def bench_cached_in(self, folder: object) -> None:
        """``devicelayer bench --quick --device DEVICE`` with ``DEVICELAYER_CACHE=folder``."""
        before = os.environ.get("DEVICELAYER_CACHE")
        os.environ["DEVICELAYER_CACHE"] = str(folder)
        try:
            cli("bench", "--quick", "--device", self.device)
        finally:
            if before is None:
                del os.environ["DEVICELAYER_CACHE"]
            else:
                os.environ["DEVICELAYER_CACHE"] = before

    def tiny(self, *args: object) -> None:
        """``devicelayer run --bundled tiny_cnn --device DEVICE ARGS``."""
        self.run("--bundled", "tiny_cnn", *args)


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
    ("cli-bench-cache-is-a-file", "devicelayer bench with DEVICELAYER_CACHE naming a file", E,
     "(DEVICELAYER_CACHE) is not a folder", lambda s, f: f.bench_cached_in(f.vector)),
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
