"""Host recordings as stretches: bound once, and a short one run on the submitting thread while the host is idle,
in order with the work queued around it, with Ctrl-C held until it is done (backends/host/stretch.py)."""


import signal
import threading
import time

import numpy as np
import pytest

import devicelayer as dl
from devicelayer import interrupts


@pytest.fixture(autouse=True)
def devicelayer_handles_sigint():
    """devicelayer's SIGINT handler in place (an earlier test may have left a handler of its own)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupts.install()
    yield
    signal.signal(signal.SIGINT, previous)


def _recorded(host, trace, n=64, during=None):
    def bump(x: "float*", n: "int") -> None:  # noqa: F722
        trace.append(threading.current_thread().name)
        if during is not None:
            during()
        for i in range(n):  # (element by element: work a Ctrl-C could land in the middle of)
            x[i] += 1

    buf = host.pool.allocate(n * 4, np.float32)
    host.pool.upload(buf, np.zeros(n, np.float32)).wait()
    rec = host.record()
    rec.launch(host.compile(bump, "bump"), [buf, n], n)
    rec.finish()
    return rec, buf


def _read(host, buf, n=64):
    out = np.empty(n, np.float32)
    host.pool.download(buf, out).wait()
    return out


def test_a_short_stretch_runs_on_the_calling_thread_once_measured():
    host = dl.device("host")
    trace: list[str] = []
    rec, buf = _recorded(host, trace)
    rec.replay().wait()  # the first replay is measured on the worker
    ev = rec.replay()
    assert ev.done and ev.error is None  # ran before replay() returned
    assert trace[0].startswith("devicelayer-") and trace[1] == threading.current_thread().name
    np.testing.assert_array_equal(_read(host, buf), np.full(64, 2, np.float32))
    rec.release()


def test_a_stretch_behind_queued_work_waits_its_turn_on_the_worker():
    host = dl.device("host")
    trace: list[str] = []
    rec, buf = _recorded(host, trace)
    rec.replay().wait()

    def slow(x: "float*") -> None:  # noqa: F722
        time.sleep(0.2)
        trace.append("slow")
        x[0] = 100

    first = host.launch(host.compile(slow, "slow"), [buf], 1)
    ev = rec.replay()
    assert not ev.done  # the host was busy: queued, not run here
    ev.wait(30)
    assert first.done and trace[-2:] == ["slow", trace[-1]] and trace[-1].startswith("devicelayer-")
    assert _read(host, buf)[0] == 101
    rec.release()


def test_ctrl_c_during_a_stretch_on_the_calling_thread_is_raised_once_it_is_done():
    assert interrupts.installed()
    host = dl.device("host")
    trace: list[str] = []
    main = threading.main_thread().ident
    armed = []

    def during() -> None:
        if armed:
            signal.pthread_kill(main, signal.SIGINT)  # arrives now, before the kernel's loop

    rec, buf = _recorded(host, trace, during=during)
    rec.replay().wait()
    armed.append(True)
    with pytest.raises(KeyboardInterrupt):
        rec.replay()
        trace.append("returned")
        time.sleep(5)  # the interrupt comes here, once the stretch is whole
        trace.append("not interrupted")
    armed.clear()
    assert trace[-1] == "returned" and trace[-2] == threading.current_thread().name
    np.testing.assert_array_equal(_read(host, buf), np.full(64, 2, np.float32))
    rec.replay().wait(30)  # the host and the recording go on as before
    np.testing.assert_array_equal(_read(host, buf), np.full(64, 3, np.float32))
    rec.release()


def test_under_a_handler_of_the_programs_own_stretches_stay_on_the_worker():
    host = dl.device("host")
    trace: list[str] = []
    rec, buf = _recorded(host, trace)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        rec.replay().wait()
        rec.replay().wait(30)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert all(t.startswith("devicelayer-") for t in trace)
    rec.release()


def test_a_kernel_binds_once_per_recorded_launch_and_calls_quietly():
    host = dl.device("host")
    binds, calls = [], []

    def kernel(x: "float*") -> None:  # noqa: F722
        raise AssertionError("the recording calls what bind_launch returned")

    def bind_launch(x):
        binds.append(x.shape)

        def call() -> None:
            calls.append(np.geterr()["divide"])
            x[0] = np.float32(1) / np.float32(0)  # no RuntimeWarning: float errors are ignored for it
        return call

    kernel.bind_launch = bind_launch
    kernel.ignores_fp_errors = True
    buf = host.pool.allocate(16, np.float32)
    rec = host.record()
    rec.launch(host.compile(kernel, "kernel"), [buf], 1)
    rec.finish()
    with np.errstate(divide="raise"):
        for _ in range(3):
            rec.replay().wait(30)
    assert binds == [(4,)] and calls == ["ignore"] * 3
    assert _read(host, buf, 4)[0] == np.inf
    rec.release()


_SHAPE = (1, 16, 32, 32)


def _conv_plan(rng):
    """A host plan of convolutions (the first large enough to wake oneDNN's OpenMP team where it is installed)."""
    g = dl.Graph()
    x = g.input("x", _SHAPE)
    w1 = g.constant((rng.standard_normal((32, 16, 3, 3)) / 12).astype(np.float32))
    w2 = g.constant((rng.standard_normal((16, 32, 1, 1)) / 6).astype(np.float32))
    y = g.conv(g.conv(x, w1, pads=[1, 1, 1, 1], activation="relu"), w2)
    g.output("y", g.add(y, x))
    return g


def _reference(g, x):
    from op_cases import graph_reference64

    return graph_reference64(g, {"x": x})["y"]


def _threads_of_runs(g, plan, native, shape, rng, tol):
    """The thread that ran the stretch ``native`` in each of three runs of ``plan`` (each checked against the
    float64 reference)."""
    seen: list[str] = []
    first = native.calls[0]
    native.calls[0] = lambda: (seen.append(threading.current_thread().name), first())
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(plan.run_numpy({"x": x})["y"], _reference(g, x), rtol=tol, atol=tol)
    return seen


def test_a_short_plan_copies_on_the_calling_thread_and_keeps_team_calls_on_the_worker(rng):
    """A plan of one host stretch, measured short, copies its inputs in and outputs out on the caller's thread;
    the stretch runs there too unless a call wakes oneDNN's team (that stays on the worker, whose team is bound
    one thread a CPU); the results stay right run after run."""
    g = _conv_plan(rng)
    plan = g.compile(["host"])
    from devicelayer.backends.host import stretch as host_stretch
    from devicelayer.graph.replay import Segment

    try:
        plan.run_numpy({"x": rng.standard_normal(_SHAPE).astype(np.float32)})  # measured on the worker
        replay = plan._prepared.replay
        assert replay.direct is not None
        native = next(w for w in replay.work if isinstance(w, Segment)).recording.native
        assert isinstance(native, host_stretch.Stretch)
        from devicelayer.backends.host import dnnl as host_dnnl

        team = host_dnnl.library() is not None
        assert native.team == team and native.short == (not team)
        on = "devicelayer-host" if team else threading.current_thread().name
        assert _threads_of_runs(g, plan, native, _SHAPE, rng, 1e-4) == [on] * 3
    finally:
        plan.release()


def test_runs_returning_tensors_and_arrays_alternate_in_order(rng):
    """Runs returning Tensors (through submitted transfers) and NumPy runs (copied on the caller's thread) of one
    plan alternate behind other queued work: each result is its own input's."""
    g = _conv_plan(rng)
    plan = g.compile(["host"])
    host = dl.device("host")
    try:
        xs = [rng.standard_normal(_SHAPE).astype(np.float32) for _ in range(6)]
        plan.run_numpy({"x": xs[0]})

        def slow(x: "float*") -> None:  # noqa: F722
            time.sleep(0.1)

        for k in range(0, 6, 2):
            blocker = host.pool.allocate(4, np.float32)
            host.launch(host.compile(slow, "slow"), [blocker], 1)  # the run below queues behind it
            tensors = plan.run({"x": xs[k]})
            arrays = plan.run_numpy({"x": xs[k + 1]})
            np.testing.assert_allclose(tensors["y"].numpy(), _reference(g, xs[k]), rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(arrays["y"], _reference(g, xs[k + 1]), rtol=1e-4, atol=1e-4)
            host.pool.free(tensors["y"].buffer)
            host.pool.free(blocker)
    finally:
        plan.release()


def test_calls_numpy_runs_for_a_vendor_op_leave_the_stretch_on_the_calling_thread(rng):
    """Small per-channel products, quotients, sums and differences, which the host's oneDNN binary op takes (a
    plan may keep them channels-last) and hands to NumPy, wake no OpenMP team: a plan of them runs on the calling
    thread once measured short, and stays right."""
    shape = (1, 2, 4, 4)
    g = dl.Graph()
    x = g.input("x", shape)
    w = g.constant(rng.standard_normal((1, 2, 1, 1)).astype(np.float32))
    b = g.constant(np.float32(rng.standard_normal() + 3.0).reshape(1))
    y = g.softmax(g.mul(g.transpose(x, perm=[0, 1, 3, 2]), w), axis=-1)
    g.output("y", g.sub(g.transpose(g.div(y, b), perm=[0, 1, 3, 2]), w))
    plan = g.compile(["host"])
    from devicelayer.backends.host import stretch as host_stretch
    from devicelayer.graph.replay import Segment

    try:
        plan.run_numpy({"x": rng.standard_normal(shape).astype(np.float32)})
        native = next(w for w in plan._prepared.replay.work if isinstance(w, Segment)).recording.native
        assert isinstance(native, host_stretch.Stretch)
        assert not native.team and native.short, native.labels
        assert _threads_of_runs(g, plan, native, shape, rng, 1e-5) == [threading.current_thread().name] * 3
    finally:
        plan.release()
