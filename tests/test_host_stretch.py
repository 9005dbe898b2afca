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


def test_a_short_plan_copies_on_the_calling_thread_and_keeps_team_calls_on_the_worker(rng, monkeypatch):
    """A plan of one host stretch, measured short, copies its inputs in and outputs out on the caller's thread;
    the stretch runs there too unless a call wakes oneDNN's team (that stays on the worker, whose team is bound
    one thread a CPU, where the stretch is not tried alone); the results stay right run after run."""
    g = _conv_plan(rng)
    plan = g.compile(["host"])
    from devicelayer.backends.host import stretch as host_stretch
    from devicelayer.graph.replay import Segment

    monkeypatch.setattr(host_stretch, "TRY_ALONE_SECONDS", 0.0)  # (the alone trial: the tests below)

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


# -- a short stretch that wakes the team, tried alone ------------------------------------------------------------------
def _sleeper(seconds, log=None, name=""):
    def call():
        if log is not None:
            log.append(name)
        time.sleep(seconds)
    return call


def _team_item(team_s, alone_s, log, by_itself=True):
    from devicelayer.backends.host.stretch import team_call

    alone = _sleeper(alone_s, log, "alone")
    made = (lambda: alone) if by_itself is True else by_itself
    return ("team call", team_call(_sleeper(team_s, log, "team"), True, made), False, True)


def _settle(stretch, round_trip):
    """Runs and decisions until the stretch has settled on a form (at most 2000 runs: the alone form's trial
    lasts ``TRIAL_SECONDS`` at least)."""
    for _ in range(2000):
        if not stretch.deciding:
            return
        stretch.decide(lambda: round_trip)
        stretch()
    raise AssertionError("the stretch never settled")


@pytest.mark.parametrize("team_s, alone_s, round_trip, kept", [
    (0.0010, 0.00005, 0.0, "alone"),  # alone faster: kept
    (0.0001, 0.0012, 0.0, "team"),  # alone slower, nothing to save: back to the team
    (0.0003, 0.0006, 0.0015, "alone"),  # alone slower, but not by the round trip it saves
])
def test_a_short_team_stretch_is_tried_alone_and_keeps_the_faster_form(team_s, alone_s, round_trip, kept):
    from devicelayer.backends.host.stretch import ALONE_RUNS, TEAM_RUNS, TRIAL_SECONDS, Stretch

    log: list[str] = []
    plain = ("plain call", _sleeper(0.0, log, "plain"), False, False)
    stretch = Stretch([plain, _team_item(team_s, alone_s, log)])
    assert stretch.team and stretch.deciding and not stretch.short
    t0 = time.perf_counter()
    _settle(stretch, round_trip)
    forms = log[1::2]
    tried = len(forms) - TEAM_RUNS - (forms[::-1].index("alone") if kept == "team" else 0)
    assert forms[:TEAM_RUNS] == ["team"] * TEAM_RUNS and forms[TEAM_RUNS:TEAM_RUNS + tried] == ["alone"] * tried
    # the trial: ALONE_RUNS runs at least, over TRIAL_SECONDS at least
    assert tried >= ALONE_RUNS and time.perf_counter() - t0 >= TRIAL_SECONDS
    assert log[::2] == ["plain"] * (len(log) // 2)
    log.clear()
    stretch()
    assert log == ["plain", kept]
    assert stretch.team == (kept == "team") and stretch.short == (kept == "alone") and not stretch.deciding


def test_a_team_stretch_stays_on_the_team_where_it_cannot_run_alone_or_is_long():
    from devicelayer.backends.host.stretch import TRY_ALONE_SECONDS, Stretch

    def refuses():
        raise RuntimeError("no layer alone")

    for item in (_team_item(0.0001, 0.0, None, by_itself=None),  # no alone form
                 _team_item(0.0001, 0.0, None, by_itself=lambda: None),  # none for this call
                 _team_item(0.0001, 0.0, None, by_itself=refuses),  # building it failed
                 _team_item(TRY_ALONE_SECONDS * 1.5, 0.0, None)):  # too long to gain from it
        stretch = Stretch([item])
        calls = stretch.calls
        _settle(stretch, 1.0)
        assert stretch.team and stretch.calls is calls and not stretch.short


def test_the_host_measures_its_round_trip_once():
    host = dl.device("host")
    first = host.round_trip()
    assert 0.0 < first < 1.0 and host.round_trip() == first


@pytest.mark.parametrize("case", ["conv", "matmul"])
def test_a_plan_whose_short_stretch_wakes_the_team_stays_right_through_the_trial(rng, case):
    """A host plan whose layer is large enough to wake oneDNN's team (a convolution, a matrix product): every
    run right against float64, before, during and after the stretch tried alone, which ends settled on a
    form, on the calling thread where it kept the alone one."""
    from devicelayer.backends.host import dnnl as host_dnnl
    from devicelayer.graph.replay import Segment

    if case == "conv":
        g, shape = _conv_plan(rng), _SHAPE
    else:
        shape = (96, 160)
        g = dl.Graph()
        x = g.input("x", shape)
        w = g.constant((rng.standard_normal((160, 192)) / 12).astype(np.float32))
        g.output("y", g.relu(g.matmul(x, w)))
    plan = g.compile(["host"])
    try:
        deadline = time.perf_counter() + 5.0  # (the trial lasts ``TRIAL_SECONDS`` at least)
        for k in range(5000):
            x = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(plan.run_numpy({"x": x})["y"], _reference(g, x), rtol=1e-4, atol=1e-4)
            if k == 0:
                native = next(w for w in plan._prepared.replay.work if isinstance(w, Segment)).recording.native
                assert native.team == (host_dnnl.library() is not None), native.labels  # (NumPy wakes no team)
            if k >= 12 and (not native.deciding or time.perf_counter() > deadline):
                break
        if host_dnnl.library() is None:
            assert native.short
            return
        assert not native.deciding, native.labels
        if not native.team:
            assert native.short
            assert _threads_of_runs(g, plan, native, shape, rng, 1e-4) == [threading.current_thread().name] * 3
    finally:
        plan.release()


def test_a_product_of_few_rows_by_a_large_matrix_wakes_the_team(rng):
    """A classifier's last layer (one row times a 4 MB matrix) is small work but bound by memory: it runs on
    oneDNN's team, which reads the matrix with every core; a product by a small matrix stays alone."""
    from devicelayer.backends.host import dnnl as host_dnnl
    from devicelayer.graph.replay import Segment

    for k, n, team in ((1024, 1000, True), (128, 64, False)):
        g = dl.Graph()
        x = g.input("x", (1, k))
        w = (rng.standard_normal((k, n)) / 30).astype(np.float32)
        g.output("y", g.gemm(x, g.constant(w)))
        plan = g.compile(["host"])
        try:
            xs = rng.standard_normal((1, k)).astype(np.float32)
            np.testing.assert_allclose(plan.run_numpy({"x": xs})["y"], xs.astype(np.float64) @ w, rtol=1e-4,
                                       atol=1e-4)
            native = next(s for s in plan._prepared.replay.work if isinstance(s, Segment)).recording.native
            assert native.team == (team and host_dnnl.library() is not None), native.labels
        finally:
            plan.release()
