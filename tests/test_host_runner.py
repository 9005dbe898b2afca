"""The host runner (``backends/host/runner.c``): consecutive oneDNN calls of a host stretch run as one native call,
a small bidirectional LSTM or GRU runs its two directions at once (on the worker's OpenMP team, or on the runner's
helper threads), and everything stays right: against the op's float64 reference with outputs poisoned first,
with the runner on and off, from a forked child, from two threads at once, through a failing call (typed error,
the device still usable) and without a compiler (the Python calls run, and the reason is given).

Skipped as a whole where oneDNN is not installed (``DEVICELAYER_REQUIRE=onednn`` makes that a failure); the
runner itself must build wherever CI runs (a C compiler is part of ``scripts/setup.sh``).
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.backends.host import dnnl as host_dnnl, omp as host_omp, runner as host_runner
from devicelayer.backends.host.rnn_layer import Geometry, RnnLanes, RnnLayer
from devicelayer.kernels.op import TensorType, get
from devicelayer.ops import names  # noqa: F401  (registers the op library)

pytestmark = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")

GATES = {"lstm": 4, "gru": 3, "lbr_gru": 3}


def _runner():
    found = host_runner.library(host_dnnl.library())
    assert found is not None, host_runner.unavailable()
    return found


def test_the_runner_builds_once_and_later_processes_reuse_it(tmp_path):
    cc = host_runner.compiler()
    assert cc is not None, "no C compiler: scripts/setup.sh installs gcc"
    first = host_runner.build(cc, tmp_path)
    stamp = first.stat().st_mtime_ns
    assert host_runner.build(cc, tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # (no temporary file left)
    assert _runner() is not None and host_runner.unavailable() is None


def test_a_failing_compiler_is_reported_and_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError, match="failed"):
        host_runner.build("/bin/false", tmp_path)
    assert list(tmp_path.iterdir()) == []


def _script(body: str, **env: str) -> subprocess.CompletedProcess:
    code = textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **env})


def test_without_a_compiler_the_host_runs_its_python_calls_and_says_why(tmp_path):
    """A fresh cache and CC naming no compiler: no runner, the reason on record, a plan still right."""
    done = _script("""
        import numpy as np, devicelayer as dl
        from devicelayer.backends.host import dnnl, runner
        g = dl.Graph()
        x = g.input("x", (1, 3, 12, 12))
        w = g.constant(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32))
        g.output("y", g.relu(g.conv(x, w, pads=[1, 1, 1, 1])))
        plan = g.compile(["host"])
        xv = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)
        got = plan.run_numpy({"x": xv})["y"]
        ref = g.compile(["host"]).run_numpy({"x": xv})["y"]
        assert runner.library(dnnl.library()) is None
        print("WHY", runner.unavailable())
        print("SAME", bool(np.array_equal(got, ref)), bool(np.isfinite(got).all()))
    """, CC="/nonexistent/cc", DEVICELAYER_CACHE=str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "WHY no C compiler" in done.stdout and "SAME True True" in done.stdout
    assert not (tmp_path / "host-runner").exists() or not any((tmp_path / "host-runner").iterdir())


# -- the recurrent layers' two directions at once ------------------------------------------------------------------
def _arrays(rng, cell, t, n, i, h, layout, given):
    g = GATES[cell]
    state = (n, 2, h) if layout else (2, n, h)
    out = {"X": rng.uniform(-1, 1, (n, t, i) if layout else (t, n, i)),
           "W": rng.uniform(-0.6, 0.6, (2, g * h, i)), "R": rng.uniform(-0.6, 0.6, (2, g * h, h)),
           "B": rng.uniform(-0.5, 0.5, (2, 2 * g * h))}
    if "initial_h" in given:
        out["initial_h"] = rng.uniform(-0.5, 0.5, state)
    if "initial_c" in given:
        out["initial_c"] = rng.uniform(-0.5, 0.5, state)
    if "P" in given:
        out["P"] = rng.uniform(-0.5, 0.5, (2, 3 * h))
    return {k: v.astype(np.float32) for k, v in out.items()}


def _reference(cell, arrays, layout):
    op = "lstm" if cell == "lstm" else "gru"
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    last = max(order.index(k) for k in arrays)
    x = arrays["X"]
    steps, batch = (x.shape[1], x.shape[0]) if layout else x.shape[:2]
    full = {"sequence_lens": np.full(batch, steps, np.int32)}  # (every sequence whole)
    values = [arrays[k] if k in arrays else full[k] for k in order[:last + 1]]
    attrs = {"direction": "bidirectional", "layout": layout}
    if op == "gru":
        attrs["linear_before_reset"] = int(cell == "lbr_gru")
    checked, _ = get(op).prepare([TensorType(v.shape, v.dtype) for v in values], attrs)
    wide = [v if v.dtype == np.int32 else v.astype(np.float64) for v in values]
    return get(op).reference(wide, checked)


CASES = [("lstm", 9, 1, 5, 6, 0, ()), ("lstm", 7, 3, 4, 5, 0, ("initial_h", "initial_c")),
         ("lstm", 6, 2, 3, 4, 1, ("initial_h", "initial_c", "P")), ("lstm", 8, 3, 4, 6, 0, ("initial_h",)),
         ("gru", 7, 2, 5, 4, 0, ("initial_h",)), ("lbr_gru", 6, 3, 4, 5, 1, ("initial_h",)),
         ("lbr_gru", 5, 1, 3, 3, 0, ())]


def _lanes_and_operands(rng, cell, t, n, i, h, layout, given):
    lib = host_dnnl.library()
    g = Geometry(cell, t, n, i, h, 2, False, bool(layout), "initial_h" in given, "initial_c" in given, "P" in given)
    lanes = host_omp.alone(lib, lambda: RnnLanes(g))()
    arrays = _arrays(rng, cell, t, n, i, h, layout, given)
    weights = host_omp.alone(lib, lambda: lanes.prepare(arrays["W"], arrays["R"], arrays.get("B"),
                                                         arrays.get("P")))()
    y = np.full((n, t, 2, h) if layout else (t, 2, n, h), np.nan, np.float32)
    hn = np.full((n, 2, h) if layout else (2, n, h), np.nan, np.float32)
    cn = np.full_like(hn, np.nan) if cell == "lstm" else None
    ptr = lambda a: 0 if a is None else a.ctypes.data  # noqa: E731
    operands = (arrays["X"].ctypes.data, ptr(arrays.get("initial_h")), ptr(arrays.get("initial_c")), weights,
                y.ctypes.data, hn.ctypes.data, ptr(cn))
    return lanes, arrays, operands, [a for a in (y, hn, cn) if a is not None]


def _check(outs, want):
    for got, w in zip(outs, want):
        assert not np.isnan(got).any()
        np.testing.assert_allclose(got.astype(np.float64), w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-T{c[1]}-N{c[2]}-layout{c[5]}-{'+'.join(c[6]) or 'none'}"
                                             for c in CASES])
def test_both_directions_at_once_match_the_reference_in_every_form(case, rng):
    """The two directions as two layers: from Python one after the other, in the runner on the calling thread's
    team (LANES) and on its helpers (HELPED); outputs poisoned before each."""
    cell, t, n, i, h, layout, given = case
    lanes, arrays, operands, outs = _lanes_and_operands(rng, cell, t, n, i, h, layout, given)
    want = _reference(cell, arrays, layout)
    call = lanes.bind(*operands, keep=(arrays, operands))
    entries = host_runner.native(call)[0]
    assert [e[4] for e in entries] == [host_runner.LANES, host_runner.EXECUTE, host_runner.EXECUTE]
    runner = _runner()
    for form in ("python", "team", "helped", "helped-armed"):
        for o in outs:
            o.fill(np.nan)
        if form == "python":
            host_omp.alone(host_dnnl.library(), call)()
        else:
            if form == "helped-armed":
                runner.runner_arm(2_000_000)
            host_runner.Batch(runner, [("lstm", call)], helped=form.startswith("helped"))()
        _check(outs, want)
    # the eager path: one direction after the other
    for o in outs:
        o.fill(np.nan)
    lanes.run(*operands)
    _check(outs, want)


def test_one_direction_of_a_layer_reads_and_writes_only_its_part(rng):
    """A lane's layer writes its direction's slices of Y and the states, and leaves the other's as they were."""
    lib = host_dnnl.library()
    g = Geometry("lstm", 6, 3, 4, 5, 2, False, False, True, True, False)
    arrays = _arrays(rng, "lstm", 6, 3, 4, 5, 0, ("initial_h", "initial_c"))
    want = _reference("lstm", arrays, 0)
    for lane in (0, 1):
        layer = host_omp.alone(lib, lambda: RnnLayer(g, lane))()
        weights = host_omp.alone(lib, lambda: layer.prepare(arrays["W"], arrays["R"], arrays["B"], None))()
        y, hn, cn = (np.full(s, -7.0, np.float32) for s in ((6, 2, 3, 5), (2, 3, 5), (2, 3, 5)))
        host_omp.alone(lib, lambda: layer.run(arrays["X"].ctypes.data, arrays["initial_h"].ctypes.data,
                                              arrays["initial_c"].ctypes.data, weights, y.ctypes.data,
                                              hn.ctypes.data, cn.ctypes.data))()
        other = 1 - lane
        np.testing.assert_allclose(y[:, lane], want[0][:, lane], rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(hn[lane], want[1][lane], rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(cn[lane], want[2][lane], rtol=2e-5, atol=2e-5)
        assert (y[:, other] == -7.0).all() and (hn[other] == -7.0).all() and (cn[other] == -7.0).all()


def _lstm_model(rng, t=64, n=1, i=24, h=16, layout=0):
    helper = pytest.importorskip("onnx.helper")
    from devicelayer.onnx.testing import make_model

    arrays = _arrays(rng, "lstm", t, n, i, h, layout, ("initial_h", "initial_c"))
    node = helper.make_node("LSTM", ["X", "W", "R", "B", "", "initial_h", "initial_c"], ["Y", "Y_h", "Y_c"],
                            hidden_size=h, direction="bidirectional", layout=layout)
    relu = helper.make_node("Relu", ["Y"], ["Z"])
    inits = {k: v for k, v in arrays.items() if k != "X"}
    model = make_model([node, relu], {"X": arrays["X"]}, ["Z", "Y_h", "Y_c"], initializers=inits, opset=14)
    want = _reference("lstm", arrays, layout)
    return model, arrays, {"Z": np.maximum(want[0], 0), "Y_h": want[1], "Y_c": want[2]}


def _stretch(plan):
    from devicelayer.graph.replay import Segment

    found = []
    subs = plan._plans() if hasattr(plan, "_plans") else [plan]  # (an ONNX plan's, or a graph's own)
    for sub in subs:
        for prepared in (sub._cache.values() if hasattr(sub, "_cache") else [sub._prepared]):
            if prepared.replay is not None:
                found += [w.recording.native for w in prepared.replay.work if isinstance(w, Segment)]
    assert len(found) == 1
    return found[0]


@pytest.mark.parametrize("layout", [0, 1])
def test_a_plan_runs_a_small_bidirectional_lstm_as_two_lanes_through_its_trial(layout, rng):
    """The plan's LSTM is the two-lane form in a runner batch; every run is right while the stretch tries its
    alone form (the helpers) and after it settles on either."""
    import devicelayer.onnx as dlo

    if host_omp.team_size(host_dnnl.library()) < 2:
        pytest.skip("one CPU: the directions run one after the other")
    model, arrays, want = _lstm_model(rng, layout=layout)
    plan = dlo.load(model).compile(["host"])
    try:
        stretch = None
        deadline = time.perf_counter() + 10
        for k in range(4000):
            got = plan.run_numpy({"X": arrays["X"]})
            for name, w in want.items():
                np.testing.assert_allclose(got[name].astype(np.float64), w, rtol=3e-5, atol=3e-5, err_msg=name)
            stretch = stretch or _stretch(plan)
            if k > 5 and (not stretch.deciding or time.perf_counter() > deadline):
                break
        assert not stretch.deciding
        batches = [c for c in stretch.calls if isinstance(c, host_runner.Batch)]
        kinds = {int(e.kind) for b in batches for e in b._table}
        assert kinds & {host_runner.LANES, host_runner.HELPED}, kinds
        assert (host_runner.HELPED in kinds) == (not stretch.team)
    finally:
        plan.release()


def test_the_runner_off_gives_the_same_results(rng, monkeypatch):
    import devicelayer.onnx as dlo

    model, arrays, want = _lstm_model(rng, t=12, n=2, layout=0)
    results = {}
    for setting in ("1", "0"):
        monkeypatch.setenv("DEVICELAYER_HOST_RUNNER", setting)
        plan = dlo.load(model).compile(["host"])
        try:
            for _ in range(3):
                results[setting] = plan.run_numpy({"X": arrays["X"]})
            stretch = _stretch(plan)
            batched = any(isinstance(c, host_runner.Batch) for c in stretch.calls)
            assert batched == (setting == "1")
        finally:
            plan.release()
    for name, w in want.items():
        np.testing.assert_allclose(results["1"][name].astype(np.float64), w, rtol=3e-5, atol=3e-5)
        np.testing.assert_array_equal(results["1"][name], results["0"][name])


# -- batches: order, failures, threads, fork ----------------------------------------------------------------------
def _conv_chain(rng, layers=4, channels=8):
    g = dl.Graph()
    x = g.input("x", (1, channels, 10, 10))
    y = x
    for _ in range(layers):
        w = g.constant((rng.standard_normal((channels, channels, 3, 3)) / 8).astype(np.float32))
        y = g.conv(y, w, pads=[1, 1, 1, 1])  # (a graph's ReLU would be a NumPy call between the layers)
    g.output("y", y)
    return g


def _conv_reference(g, x):
    """The graph's result with the runner off (every call from Python)."""
    with pytest.MonkeyPatch.context() as m:
        m.setenv("DEVICELAYER_HOST_RUNNER", "0")
        plan = g.compile(["host"])
        try:
            return plan.run_numpy({"x": x})["y"]
        finally:
            plan.release()


def test_a_chain_of_layers_runs_as_one_batch_and_matches_the_python_calls(rng):
    g = _conv_chain(rng)
    plan = g.compile(["host"])
    try:
        for _ in range(3):
            x = rng.standard_normal((1, 8, 10, 10)).astype(np.float32)
            got = plan.run_numpy({"x": x})["y"]
            np.testing.assert_array_equal(got, _conv_reference(g, x))
        batches = [c for c in _stretch(plan).calls if isinstance(c, host_runner.Batch)]
        assert batches and max(len(b) for b in batches) >= 2
    finally:
        plan.release()


def _failing_call():
    """A layer, and a call noted as executing its primitive on no stream (oneDNN refuses it)."""
    lib = host_dnnl.library()
    layer = host_omp.alone(lib, lambda: RnnLayer(Geometry("gru", 3, 1, 2, 2, 1, False, False, False, False,
                                                          False)))()
    bad = host_runner.mark(lambda: None, [(layer.prim.value, 0, 0, 0, host_runner.EXECUTE)], [layer.lock],
                           keep=layer)
    return layer, bad


def test_a_failing_call_names_itself_and_the_runner_stays_usable(rng):
    runner = _runner()
    layer, bad = _failing_call()
    lanes, arrays, operands, outs = _lanes_and_operands(rng, "lstm", 5, 2, 3, 4, 0, ())
    good = lanes.bind(*operands, keep=(arrays, operands))
    for helped in (False, True):
        with pytest.raises(RuntimeError, match=r"the bad call: oneDNN status \d+"):
            host_runner.Batch(runner, [("the good call", good), ("the bad call", bad)], helped=helped)()
        assert not layer.lock.locked() and not any(lock.locked() for lock in host_runner.native(good).locks)
    for o in outs:
        o.fill(np.nan)
    host_runner.Batch(runner, [("the good call", good)], helped=True)()
    _check(outs, _reference("lstm", arrays, 0))


def test_a_failing_call_in_a_stretch_is_a_launch_error_with_its_label(rng):
    from devicelayer.backends.host.stretch import Stretch

    _, bad = _failing_call()
    lanes, arrays, operands, outs = _lanes_and_operands(rng, "gru", 4, 1, 3, 4, 0, ())
    good = lanes.bind(*operands, keep=(arrays, operands))
    stretch = Stretch([("first", good, True, False), ("second", bad, True, False)], None, _runner())
    with pytest.raises(dl.LaunchError, match="second: oneDNN status"):
        stretch()


def test_a_lanes_call_past_the_runner_s_limit_is_refused():
    runner = _runner()
    table = (host_runner.RunnerCall * 2)(host_runner.RunnerCall(0, 0, 0, host_runner.MAX_LANES + 1,
                                                                host_runner.LANES),
                                         host_runner.RunnerCall(0, 0, 0, 0, host_runner.EXECUTE))
    failed = ctypes.c_int(-5)
    assert runner.runner_run(table, 2, ctypes.byref(failed)) == -1 and failed.value == 0
    table[0].nargs = 3  # (past the end of the table)
    assert runner.runner_run(table, 2, ctypes.byref(failed)) == -1 and failed.value == 0


def test_a_batch_rejects_a_call_without_a_native_form():
    with pytest.raises(ValueError, match="no native form"):
        host_runner.Batch(_runner(), [("python", lambda: None)])


def test_two_threads_running_helped_batches_at_once_stay_right(rng):
    """The helpers serve one call at a time; the other thread runs its directions itself."""
    runner = _runner()
    jobs = []
    for _ in range(2):
        lanes, arrays, operands, outs = _lanes_and_operands(rng, "lstm", 16, 2, 6, 8, 0, ("initial_h",))
        jobs.append((host_runner.Batch(runner, [("lstm", lanes.bind(*operands, keep=(arrays, operands)))], helped=True),
                     outs, _reference("lstm", arrays, 0), lanes))
    errors = []

    def work(batch, outs, want):
        try:
            for _ in range(200):
                for o in outs:
                    o.fill(np.nan)
                batch()
                _check(outs, want)
        except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
            errors.append(exc)
    threads = [threading.Thread(target=work, args=job[:3]) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[0]


def test_a_forked_child_gets_helpers_of_its_own(rng):
    import multiprocessing as mp

    runner = _runner()
    lanes, arrays, operands, outs = _lanes_and_operands(rng, "lstm", 10, 1, 4, 6, 0, ())
    batch = host_runner.Batch(runner, [("lstm", lanes.bind(*operands, keep=(arrays, operands)))], helped=True)
    batch()  # (the parent's helpers exist)
    want = _reference("lstm", arrays, 0)
    ctx = mp.get_context("fork")
    queue = ctx.Queue()

    def child():
        for o in outs:
            o.fill(np.nan)
        runner.runner_arm(1_000_000)
        batch()
        queue.put([o.copy() for o in outs])
    p = ctx.Process(target=child)
    p.start()
    got = queue.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    _check(got, want)


@pytest.mark.parametrize("locked", [True, False])
def test_a_locked_batch_waits_for_its_layers_and_a_stretch_s_does_not_lock(locked, rng):
    """A batch run by itself holds its layers' locks (another run of the same layers, outside the host device's
    one-task-at-a-time order, waits); a stretch's batch runs unlocked, inside that order."""
    runner = _runner()
    lanes, arrays, operands, outs = _lanes_and_operands(rng, "gru", 5, 2, 3, 4, 0, ())
    batch = host_runner.Batch(runner, [("gru", lanes.bind(*operands, keep=(arrays, operands)))], locked=locked)
    lock = lanes.lanes[0].lock
    done = threading.Event()
    with lock:
        worker = threading.Thread(target=lambda: (batch(), done.set()))
        worker.start()
        assert done.wait(0.2) is (not locked)
    worker.join(30)
    assert done.is_set()
    _check(outs, _reference("gru", arrays, 0))


@pytest.mark.parametrize("damage", ["cache is a file", "damaged library"])
def test_an_unwritable_cache_or_a_damaged_library_still_gives_a_runner(damage, tmp_path):
    """The runner is built in a private folder where the cache cannot be written, and built again over a damaged
    file in the cache."""
    cc = host_runner.compiler()
    if damage == "cache is a file":
        cache = tmp_path / "not-a-folder"
        cache.write_text("x")
    else:
        cache = tmp_path / "cache"
        built = host_runner.build(cc, cache / "host-runner")
        built.write_bytes(b"not a shared library")
    done = _script("""
        from devicelayer.backends.host import dnnl, runner
        print("RUNNER", runner.library(dnnl.library()) is not None, runner.unavailable())
    """, DEVICELAYER_CACHE=str(cache))
    assert done.returncode == 0, done.stderr
    assert "RUNNER True None" in done.stdout, done.stdout + done.stderr
    if damage == "damaged library":
        assert built.read_bytes()[:4] == b"\x7fELF"


def test_a_residual_convolution_s_summand_copy_runs_in_the_batch(rng):
    """A convolution adding a summand copies the summand where it adds to (a COPY call of the runner): the
    whole chain is one batch, and right against the runner off."""
    helper = pytest.importorskip("onnx.helper")
    from onnx import TensorProto
    import devicelayer.onnx as dlo

    c = 16
    w1, w2 = ((rng.standard_normal((c, c, 3, 3)) / 12).astype(np.float32) for _ in range(2))
    inits = [helper.make_tensor(n, TensorProto.FLOAT, w.shape, w.ravel()) for n, w in (("w1", w1), ("w2", w2))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["b", "r"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, c, 20, 20))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, c, 20, 20))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rng.standard_normal((1, c, 20, 20)).astype(np.float32)
    r = np.maximum(_conv_numpy(x, w1), 0)
    want = np.maximum(_conv_numpy(r, w2) + r, 0)
    results = {}
    for setting in ("1", "0"):
        with pytest.MonkeyPatch.context() as m:
            m.setenv("DEVICELAYER_HOST_RUNNER", setting)
            plan = dlo.load(model).compile(["host"])
            try:
                for _ in range(3):
                    results[setting] = plan.run_numpy({"x": x})["y"]
                if setting == "1":
                    stretch = _stretch(plan)
                    kinds = [int(e.kind) for b in stretch.calls if isinstance(b, host_runner.Batch) for e in b._table]
                    assert host_runner.COPY in kinds and len(stretch.calls) == 1, kinds
            finally:
                plan.release()
    np.testing.assert_allclose(results["1"], want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(results["1"], results["0"])


def _conv_numpy(x, w):
    """A 3x3 convolution, padding 1, stride 1, in float64."""
    n, c, h, wd = x.shape
    p = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", p[:, :, i:i + h, j:j + wd], w[:, :, i, j].astype(np.float64))
    return out
