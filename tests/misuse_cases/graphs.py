"""Misuse of the graph API: building, compiling (placement), and running plans."""

from __future__ import annotations

import time

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import DeviceNotFound, GraphError, InvalidArgument, UnsupportedOp
from devicelayer.kernels.op import TensorType, get

from .catalogue import Doomed, caused_by, misuse, misuses


class _Built:
    """A graph with inputs x (4, 4) float32, i (4, 4) int32, v (3,) and m (3, 2), and output y = relu(x)."""

    def __init__(self, s) -> None:
        g = self.g = dl.Graph("misuse")
        self.x, self.i = g.input("x", (4, 4)), g.input("i", (4, 4), np.int32)
        self.v, self.m = g.input("v", (3,)), g.input("m", (3, 2))
        g.output("y", g.relu(self.x, name="r"))
        self.stranger = dl.Graph("another").input("z", (4, 4))


misuses("graph", _Built, [
    ("graph-input-negative-dim", "declare an input of shape (-1,)", InvalidArgument, "negative dimension",
     lambda s, b: b.g.input("n", (-1,))),
    ("graph-input-bad-dtype", "declare an input of a dtype NumPy does not know", InvalidArgument, "is not a dtype",
     lambda s, b: b.g.input("n", (1,), "no_such_dtype")),
    ("graph-input-text-dtype", "declare an input of strings", InvalidArgument, "cannot live on a device",
     lambda s, b: b.g.input("n", (1,), "U3")),
    ("graph-input-no-name", "declare an input without a name", InvalidArgument, "a name is required",
     lambda s, b: b.g.input("", (1,))),
    ("graph-duplicate-value-name", "declare a second input named x", GraphError, "'x' already exists",
     lambda s, b: b.g.input("x", (2,))),
    ("graph-duplicate-node-name", "name a second node r", GraphError, "a node named 'r' already exists",
     lambda s, b: b.g.relu(b.x, name="r")),
    ("graph-unknown-op", "apply op 'frobnicate'", UnsupportedOp, "no op named 'frobnicate'",
     lambda s, b: b.g.apply("frobnicate", [b.x])),
    ("graph-unknown-attribute", "give relu an attribute alpha", InvalidArgument, "unknown attribute(s) ['alpha']",
     lambda s, b: b.g.relu(b.x, alpha=3)),
    ("graph-bad-attribute-value", "transpose with perm=[0, 0]", InvalidArgument, "is not a permutation",
     lambda s, b: b.g.transpose(b.x, perm=[0, 0])),
    ("graph-attribute-wrong-type", "transpose with perm='ab'", InvalidArgument, "must be a list of ints",
     lambda s, b: b.g.transpose(b.x, perm="ab")),
    ("graph-conv-unknown-activation", "conv with activation='softsign' (not one a conv takes)", InvalidArgument,
     "attribute 'activation' must be one of",
     lambda s, b: b.g.conv(b.g.reshape(b.x, shape=[1, 1, 4, 4]), b.g.constant(np.ones((2, 1, 3, 3), np.float32)),
                           activation="softsign")),
    ("graph-batch-norm-unknown-activation", "batch_normalization with activation='sigmoid' (only a fused ReLU "
     "exists)", InvalidArgument, "attribute 'activation' must be 'relu'",
     lambda s, b: b.g.batch_normalization(b.x, *[b.g.constant(np.ones(4, np.float32)) for _ in range(4)],
                                          activation="sigmoid")),
    ("graph-conv-summand-shape", "conv with a summand Z of another shape than its output", InvalidArgument,
     "Z (the summand) must have the output's shape",
     lambda s, b: b.g.conv(b.g.reshape(b.x, shape=[1, 1, 4, 4]), b.g.constant(np.ones((2, 1, 3, 3), np.float32)),
                           b.g.constant(np.zeros(2, np.float32)), b.x)),
    ("graph-wrong-input-count", "add one value", InvalidArgument, "takes 2 inputs, got 1",
     lambda s, b: b.g.add(b.x)),
    ("graph-shapes-do-not-broadcast", "add shapes (4, 4) and (3,)", InvalidArgument, "do not broadcast",
     lambda s, b: b.g.add(b.x, b.v)),
    ("graph-matmul-shapes", "matmul (4, 4) by (3, 2)", InvalidArgument, "do not line up",
     lambda s, b: b.g.matmul(b.x, b.m)),
    ("graph-mixed-dtypes", "add float32 and int32", InvalidArgument, "must have the same dtype",
     lambda s, b: b.g.add(b.x, b.i)),
    ("graph-reshape-wrong-size", "reshape 16 elements to 5", InvalidArgument, "cannot reshape",
     lambda s, b: b.g.reshape(b.x, shape=[5])),
    ("graph-value-of-another-graph", "use a value of another graph", GraphError, "belongs to another graph",
     lambda s, b: b.g.relu(b.stranger)),
    ("graph-not-a-value", "apply relu to the string 'x'", InvalidArgument, "expected a graph Value",
     lambda s, b: b.g.relu("x")),
    ("graph-constant-objects", "add a constant of Python objects", InvalidArgument, "cannot live on a device",
     lambda s, b: b.g.constant(np.array([object()]))),
    ("graph-output-not-a-value", "mark the number 3 as an output", GraphError, "not a value of this graph",
     lambda s, b: b.g.output("z", 3)),
    ("graph-output-name-not-a-string", "name an output 3", InvalidArgument, "must be a non-empty string",
     lambda s, b: b.g.output(3, b.x)),
    ("graph-output-twice", "define output y twice", GraphError, "output 'y' is already defined",
     lambda s, b: b.g.output("y", b.x)),
])

P = "placement"
misuses(P, _Built, [
    ("compile-unknown-device", "compile for device 'nope:0'", DeviceNotFound, "no backend named 'nope'",
     lambda s, b: b.g.compile(["nope:0"])),
    ("compile-no-devices", "compile for no devices", GraphError, "no devices", lambda s, b: b.g.compile([])),
    ("compile-device-not-an-id", "compile for device 42", InvalidArgument, "expected an id",
     lambda s, b: b.g.compile(42)),
    ("compile-placement-unknown-node", "place a node the graph lacks", GraphError, "names no node or op",
     lambda s, b: b.g.compile([s.device.id], placement={"no_such_node": s.device.id})),
    ("compile-placement-unknown-device", "place node r on 'nope:0'", DeviceNotFound, "placement for 'r'",
     lambda s, b: b.g.compile([s.device.id], placement={"r": "nope:0"})),
    ("compile-placement-not-a-mapping", "give placement as a list", InvalidArgument, "placement must map",
     lambda s, b: b.g.compile([s.device.id], placement=["r"])),
    ("compile-bad-policy", "compile with policy 'random'", GraphError, "policy must be 'fill', 'spread' or 'pipeline'",
     lambda s, b: b.g.compile([s.device.id], policy="random")),
    ("compile-strict-not-bool", "compile with strict='yes'", InvalidArgument, "strict must be True or False",
     lambda s, b: b.g.compile([s.device.id], strict="yes")),
])


@misuse("graph-no-outputs", "graph", "compile a graph without outputs", GraphError, "has no outputs")
def _(s):
    g = dl.Graph("empty")
    g.relu(g.input("x", (4,)))
    return lambda: g.compile([s.device.id])


@misuse("graph-cycle", "graph", "compile after editing a node to read its own output", GraphError, "has a cycle")
def _(s):
    g = dl.Graph("loop")
    first = g.relu(g.input("x", (4,)), name="first")
    g.output("y", g.neg(first, name="second"))
    g.nodes[0].inputs[0] = g.values["second"]
    return lambda: g.compile([s.device.id])


@misuse("compile-placement-outside-devices", P, "place node r on a device the graph is not compiled for", GraphError,
        "not one of the devices")
def _(s):
    b, other = _Built(s), s.other()
    return lambda: b.g.compile([s.device.id], placement={"r": other.id})


# -- placement and dtypes ----------------------------------------------------------------------------------------------
class _Unsupported:
    """A graph casting a dtype that ``lacking`` cannot hold (preferably the device under test) to float32,
    and a ``fallback`` device that can run it."""

    def __init__(self, s) -> None:
        every = [s.device] + [d for d in dl.devices() if d is not s.device]
        found = [(d, t) for d in every for t in ("float16", "bool", "float64", "int64") if t not in d.info.dtypes]
        if not found:
            pytest.skip("every device holds every dtype")
        self.lacking, dtype = found[0]
        cast = (get("cast"), [TensorType((4,), np.dtype(dtype))], {"to": np.dtype(np.float32)})
        fallbacks = [d for d in every if cast[0].unsupported(cast[1], cast[2], d.info) is None]
        if not fallbacks:
            pytest.skip(f"no device casts {dtype}")
        self.fallback = fallbacks[0]
        self.g = dl.Graph("dtypes")
        self.g.output("y", self.g.cast(self.g.input("x", (4,), dtype), to=np.float32, name="c"))


misuses(P, _Unsupported, [
    ("compile-dtype-the-device-lacks", "compile a cast of a dtype the only device lacks", GraphError,
     "runs on none of the devices", lambda s, u: u.g.compile([u.lacking.id])),
    ("compile-strict-refuses-asked-device", "place a node on a device lacking its dtype, strict=True", GraphError,
     "cannot run on", lambda s, u: u.g.compile([u.lacking.id, u.fallback.id], placement={"c": u.lacking.id},
                                               strict=True)),
    ("compile-strict-refuses-fallback", "compile with strict=True where the first device lacks a dtype",
     GraphError, "refuses to fall back", lambda s, u: u.g.compile([u.lacking.id, u.fallback.id], strict=True)),
])


# -- running plans -----------------------------------------------------------------------------------------------------
class _Plan:
    """y = x @ w for x (4, 3) float32, compiled for the device under test; a float64 and a freed tensor."""

    W = np.arange(6, dtype=np.float32).reshape(3, 2)

    def __init__(self, s) -> None:
        g = self.g = dl.Graph("plan")
        self.x = g.input("x", (4, 3))
        g.output("y", g.matmul(self.x, g.constant(self.W)))
        self.plan = s.plan(g)
        self.ok = np.ones((4, 3), np.float32)
        self.f64 = s.tensor(self.ok.astype(np.float64))
        self.freed = s.tensor(self.ok)
        s.pool.free(self.freed.buffer).wait(30)


R = "plan"
misuses(R, _Plan, [
    ("run-missing-input", "run without input x", InvalidArgument, "missing input(s) ['x']",
     lambda s, p: p.plan()),
    ("run-unknown-input", "run with an extra input z", InvalidArgument, "unknown input(s) ['z']",
     lambda s, p: p.plan(x=p.ok, z=p.ok)),
    ("run-wrong-rank", "run with x of rank 1", InvalidArgument, "must have rank 2",
     lambda s, p: p.plan(x=np.ones(12, np.float32))),
    ("run-not-convertible", "run with x='abc'", InvalidArgument, "cannot convert to float32",
     lambda s, p: p.plan(x="abc")),
    ("run-complex-input", "run with x of complex numbers for a float32 input", InvalidArgument,
     "input 'x': complex64 values cannot become float32 (the imaginary part would be lost)",
     lambda s, p: p.plan(x=p.ok + 1j)),
    ("run-complex-list-input", "run with x as nested lists of complex numbers", InvalidArgument,
     "the imaginary part would be lost", lambda s, p: p.plan.run({"x": (p.ok + 1j).tolist()})),
    ("run-tensor-wrong-dtype", "run with a float64 Tensor for a float32 input", InvalidArgument,
     "must be float32, got float64", lambda s, p: p.plan.run({"x": p.f64})),
    ("run-shapes-do-not-fit", "run with x of shape (4, 5) against w of (3, 2)", GraphError,
     "with these input shapes", lambda s, p: p.plan(x=np.ones((4, 5), np.float32))),
    ("trace-before-profile", "write a trace before any profiled run", GraphError, "no profile yet",
     lambda s, p: p.plan.trace(s.path("trace.json"))),
    ("gantt-before-profile", "draw a Gantt chart before any profiled run", GraphError, "no profile yet",
     lambda s, p: p.plan.gantt(s.path("gantt.png"))),
])


@misuse("run-inputs-not-a-mapping", R, "run with a list of inputs", InvalidArgument, "inputs must be a mapping")
def _(s):
    p = _Plan(s)
    return lambda: p.plan.run([p.ok])


@misuse("run-freed-tensor", R, "run with a Tensor whose buffer was freed", InvalidArgument,
        "input 'x': buffer was freed")
def _(s):
    p = _Plan(s)
    return lambda: p.plan.run({"x": p.freed})


def _doomed_input(s) -> tuple[_Plan, dl.Tensor]:
    """The plan, and an x whose producing work failed."""
    p = _Plan(s)
    return p, dl.Tensor(p.f64.buffer.view(0, 48, np.float32), (4, 3), np.float32, s.failed_gate())


@misuse("run-input-tensor-failed", R, "run with a Tensor input whose producing work failed", GraphError,
        "dependency 'doomed' failed", verify=caused_by(Doomed))
def _(s):
    p, doomed = _doomed_input(s)
    return lambda: p.plan.run({"x": doomed})


@misuse("run-profiled-input-tensor-failed", R, "run with profile=True and a Tensor input whose producing work failed",
        GraphError, "dependency 'doomed' failed", verify=caused_by(Doomed))
def _(s):
    p, doomed = _doomed_input(s)
    return lambda: p.plan.run({"x": doomed}, profile=True)


@misuse("run-after-graph-changed", R, "run a plan after adding a node to its graph", GraphError,
        "changed after it was compiled")
def _(s):
    p = _Plan(s)
    p.g.relu(p.x)
    return lambda: p.plan(x=p.ok)


@misuse("run-concurrently", R, "run one plan from two threads at once", GraphError, "already running")
def _(s):
    p = _Plan(s)
    gate = s.gate("input ready")
    held = dl.Tensor(s.tensor(p.ok).buffer, p.ok.shape, p.ok.dtype, gate)  # its data is ready only when the gate is

    def first() -> None:
        for t in p.plan.run({"x": held}).values():
            s.keep(t.buffer)
    s.thread(first)
    _until(lambda: p.plan._busy.locked())
    return lambda: p.plan(x=p.ok)


def _until(condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)
