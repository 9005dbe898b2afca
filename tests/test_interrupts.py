"""Ctrl-C: a KeyboardInterrupt during a run reaches the caller unchanged, leaves the work alone, and the device,
the plan and the pool stay as they were (devicelayer/interrupts.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import interrupts
from devicelayer.memory import settle
from devicelayer.interrupts import protected

HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True)
def devicelayer_handles_sigint():
    """devicelayer's SIGINT handler in place, as in a program that left Python's default (an earlier test of the
    session may have installed a handler of its own, which devicelayer leaves alone)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupts.install()
    yield
    signal.signal(signal.SIGINT, previous)


def interrupt_when_waiting() -> threading.Thread:
    """Send SIGINT to the main thread once it is blocked in an ``Event.wait`` (not before)."""
    main = threading.main_thread().ident
    events_py = str(Path(sys.modules["devicelayer.events"].__file__).resolve())

    def waiting() -> bool:
        frame = sys._current_frames().get(main)
        while frame is not None:
            if frame.f_code.co_name == "wait" and str(Path(frame.f_code.co_filename).resolve()) == events_py:
                return True
            frame = frame.f_back
        return False

    def send() -> None:
        deadline = time.monotonic() + 60
        while not waiting() and time.monotonic() < deadline:
            time.sleep(0.005)
        signal.pthread_kill(main, signal.SIGINT)

    t = threading.Thread(target=send, daemon=True)
    t.start()
    return t


def gated_input(device: dl.Device, x: np.ndarray) -> tuple[dl.Tensor, dl.UserEvent]:
    """A Tensor holding ``x`` once the returned user event is set."""
    gate = dl.UserEvent("input gate")
    buf = device.pool.allocate(x.nbytes, x.dtype)
    return dl.Tensor(buf, x.shape, x.dtype, device.pool.upload(buf, x, wait=[gate])), gate


def graph() -> dl.Graph:
    g = dl.Graph("ctrl-c")
    x = g.input("x", (4, 8))
    g.output("y", g.relu(g.mul(g.add(x, x), x)))
    return g


def reference(x: np.ndarray) -> np.ndarray:
    return np.maximum((x + x) * x, 0)


def runner(kind: str, device: dl.Device):
    """A callable running the graph as ``kind`` on ``device``: inputs by name, the NumPy output back."""
    if kind in ("plan", "recorded"):
        plan = graph().compile([device], record=kind == "recorded")
        return lambda feeds: plan.run_numpy(feeds)["y"]
    if kind == "plan tensors":
        plan = graph().compile([device], record=False)

        def run(feeds):
            out = plan.run(feeds)["y"]
            try:
                return out.numpy()
            finally:
                out.free()
        return run
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import devicelayer.onnx as ort

    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Mul", ["a", "x"], ["m"]),
             helper.make_node("Relu", ["m"], ["y"])]
    g = helper.make_graph(nodes, "ctrl-c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    if kind == "onnx model":
        plan = ort.load(model.SerializeToString()).compile([device])
        return lambda feeds: plan.run_numpy(feeds)["y"]
    assert kind == "session", kind
    session = ort.InferenceSession(model.SerializeToString(), providers=[device.id])
    return lambda feeds: session.run(None, feeds)[0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["plan", "recorded", "plan tensors", "onnx model", "session"])
def test_ctrl_c_while_a_run_waits_for_its_input(device, kind):
    run = runner(kind, device)
    x = np.arange(32, dtype=np.float32).reshape(4, 8) - 10
    np.testing.assert_array_equal(run({"x": x}), reference(x))  # prepared and compiled before the interrupt
    device.synchronize()
    pool = device.pool
    assert settle()  # memory of what the first run dropped is released first (devicelayer/reclaim.py)
    before = (pool.live_buffers, pool.allocated_bytes)
    fed, gate = gated_input(device, x * 2)
    sender = interrupt_when_waiting()
    with pytest.raises(KeyboardInterrupt):
        run({"x": fed})
    sender.join(60)
    # the caller was interrupted, not the work: nothing failed, and what waits on the gate still waits
    assert not gate.done and not fed.ready.done and fed.ready.error is None
    gate.set()
    np.testing.assert_array_equal(fed.numpy(), x * 2)
    np.testing.assert_array_equal(run({"x": fed}), reference(x * 2))  # the plan is usable
    np.testing.assert_array_equal(run({"x": x}), reference(x))
    fed.free().wait(30)
    device.synchronize()
    deadline = time.monotonic() + 30
    while (pool.live_buffers, pool.allocated_bytes) != before and time.monotonic() < deadline:
        settle()
        time.sleep(0.01)
    assert (pool.live_buffers, pool.allocated_bytes) == before, "the interrupted run left memory behind"


@pytest.mark.timeout(60)
def test_ctrl_c_while_reading_a_tensor_leaves_it_usable(device):
    fed, gate = gated_input(device, np.arange(8, dtype=np.float32))
    sender = interrupt_when_waiting()
    with pytest.raises(KeyboardInterrupt):
        fed.numpy()
    sender.join(60)
    assert not fed.ready.done
    gate.set()
    np.testing.assert_array_equal(fed.numpy(), np.arange(8, dtype=np.float32))
    fed.free().wait(30)


@pytest.mark.timeout(200)
def test_ctrl_c_at_random_moments_of_runs(device):
    """SIGINT every 0.5-10 ms through runs of every kind, in a process of its own (a stray KeyboardInterrupt
    cannot end this test session): each run is right or interrupted, never failed; afterwards runs are right
    and the pool holds what it held before."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(HERE / "sigint_fuzz.py"), device.id, "60"], capture_output=True,
                          text=True, timeout=180, env=env, cwd=HERE.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["wrong"] == [], result
    assert all(a.endswith(": right") for a in result["after"]), result
    assert result["pool_after"] == result["pool_before"], result
    assert result["handler"] is True
    interrupted = sum(c["interrupted"] for c in result["counts"].values())
    finished = sum(c["ok"] for c in result["counts"].values())
    assert interrupted >= 10 and finished >= 10, result["counts"]  # both outcomes were exercised


class Stop(BaseException):
    """Not an Exception: the caller's, like KeyboardInterrupt and SystemExit."""


@pytest.mark.parametrize("Stop", [KeyboardInterrupt, SystemExit, Stop])
def test_a_wait_ended_by_any_base_exception_leaves_the_work_alone(monkeypatch, Stop):
    gate = dl.UserEvent("gate")

    def stopped(timeout):
        raise Stop

    monkeypatch.setattr(gate, "_block", stopped)
    with pytest.raises(Stop):
        gate.wait()
    monkeypatch.undo()
    assert not gate.done and gate.error is None
    gate.set()
    gate.wait(5)
    assert gate.error is None


@protected
def _critical(trace: list) -> None:
    """Work that a Ctrl-C must not cut in two."""
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)  # arrives now, inside
    trace.append("started")
    for i in range(2000):
        trace.append(i)
    time.sleep(0.02)
    trace.append("finished")


def test_ctrl_c_inside_a_protected_function_is_raised_once_it_has_returned():
    assert interrupts.installed(), "devicelayer's SIGINT handler is not in place"
    trace: list = []
    with pytest.raises(KeyboardInterrupt):
        _critical(trace)
        trace.append("returned")
        time.sleep(5)  # the interrupt comes here, a moment after the function returned
        trace.append("not interrupted")
    assert trace[0] == "started" and trace[-2:] == ["finished", "returned"]


def test_a_handler_of_the_programs_own_is_left_in_place():
    own_calls = []

    def own(signum, frame):
        own_calls.append(signum)

    previous = signal.signal(signal.SIGINT, own)
    try:
        interrupts.install()
        assert signal.getsignal(signal.SIGINT) is own
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(0.05)
        assert own_calls == [signal.SIGINT]
    finally:
        signal.signal(signal.SIGINT, previous)
