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
