"""Misuse of the onnxruntime-compatible InferenceSession and its IOBinding."""

from __future__ import annotations

import numpy as np
import pytest

from devicelayer import InvalidArgument

from .catalogue import misuses
from .onnx_models import X, relu_model

A = "session"


class _Session:
    """A session of the one-Relu model (x (2, 3) -> y) on the device under test, and an IOBinding of it."""

    def __init__(self, s) -> None:
        pytest.importorskip("onnx")
        import devicelayer.onnx as dlo

        self.module = dlo
        self.bytes = relu_model().SerializeToString()
        self.sess = dlo.InferenceSession(self.bytes, providers=[s.device.id])
        s._plans.append(self.sess.plan)
        self.binding = self.sess.io_binding()


misuses(A, _Session, [
    ("session-unknown-input", "run with an input the model lacks", InvalidArgument, "unknown input(s) ['q']",
     lambda s, o: o.sess.run(None, {"x": X, "q": X})),
    ("session-missing-input", "run without input x", InvalidArgument, "missing input(s) ['x']",
     lambda s, o: o.sess.run(None, {})),
    ("session-wrong-dtype", "run with x as float64", InvalidArgument, "input 'x' must be float32, got float64",
     lambda s, o: o.sess.run(None, {"x": X.astype(np.float64)})),
    ("session-wrong-shape", "run with x of shape (3, 2)", InvalidArgument, "input 'x' must have shape (2, 3)",
     lambda s, o: o.sess.run(None, {"x": X.reshape(3, 2)})),
    ("session-complex-input", "run with x as complex64", InvalidArgument,
     "input 'x': complex64 values are not supported", lambda s, o: o.sess.run(None, {"x": X.astype(np.complex64)})),
    ("session-complex-list-input", "run with x as nested lists of complex numbers", InvalidArgument,
     "input 'x': complex128 values cannot become float32", lambda s, o: o.sess.run(None, {"x": (X + 1j).tolist()})),
    ("session-unknown-output", "run asking for output 'nope'", InvalidArgument, "invalid output name(s) ['nope']",
     lambda s, o: o.sess.run(["nope"], {"x": X})),
    ("session-output-names-string", "run with output_names 'y' (not a list)", InvalidArgument,
     "output_names must be a list", lambda s, o: o.sess.run("y", {"x": X})),
    ("session-unknown-provider", "make a session with provider 'FooExecutionProvider'", InvalidArgument,
     "unknown provider 'FooExecutionProvider'",
     lambda s, o: o.module.InferenceSession(o.bytes, providers=["FooExecutionProvider"])),
    ("iobinding-unknown-input", "bind input 'q', which the model lacks", InvalidArgument, "invalid input name 'q'",
     lambda s, o: o.binding.bind_cpu_input("q", X)),
    ("iobinding-unknown-output", "bind output 'q', which the model lacks", InvalidArgument,
     "invalid output name 'q'", lambda s, o: o.binding.bind_output("q", s.device.id)),
    ("iobinding-unbound-input", "run a binding whose input x is not bound", InvalidArgument,
     "input(s) ['x'] are not bound", lambda s, o: o.sess.run_with_iobinding(o.binding)),
    ("iobinding-output-wrong-shape", "write output y into memory of another shape", InvalidArgument,
     "output 'y' is (2, 3) float32; the memory bound to it is (6,) float32",
     lambda s, o: (o.binding.bind_cpu_input("x", X), o.binding.bind_output("y", s.tensor(X.ravel())),
                   o.sess.run_with_iobinding(o.binding))),
])
