"""oneDNN's OpenMP threads on the host: bound one per CPU (also after the team shrinks and grows again), the
opt-outs, and threads devicelayer starts from the bound worker keeping every CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from devicelayer.backends.host import dnnl as host_dnnl, omp as host_omp

CPUS = sorted(os.sched_getaffinity(0))
needs_onednn = pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed")
needs_two_cpus = pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs to see a binding")
#: how the description names oneDNN's runtime where it has one of its own (``omp_copy``), as in this process
OWN = ", a runtime of their own" if host_omp._loaded_with.get("runtime") == "own" else ""
needs_own = pytest.mark.skipif(not OWN, reason="oneDNN runs on a shared OpenMP runtime here")

# a fresh process runs a oneDNN pool on the host worker, then reports what the worker's teams (default size; then
# sizes n, 2, n: libgomp ends threads when a team shrinks and starts new ones when it grows), the worker, and a
# NumPy helper and the dispatcher started from the worker may run on, and what the process shows of it
_PROBE = """
import json, os, sys, threading, numpy as np
if sys.argv[1] == 'preload':
    import ctypes; ctypes.CDLL('libgomp.so.1', mode=os.RTLD_GLOBAL)
import devicelayer as dl
from devicelayer.backends.host import dnnl as host_dnnl, omp as host_omp
from devicelayer.events import dispatcher
from devicelayer.kernels.op import parallel
h = dl.device('host')
x = np.random.default_rng(0).random((1, 3, 9, 9), dtype=np.float32)
y = dl.ops.run('max_pool', [dl.tensor(x, h)], kernel_shape=[3, 3])[0].numpy()
seen, posted, n = {}, threading.Event(), len(os.sched_getaffinity(0))
def piece(a, b):
    seen[a] = sorted(os.sched_getaffinity(0))
def deferred():
    seen['dispatcher'] = sorted(os.sched_getaffinity(0))
    posted.set()
def probe():
    lib = host_dnnl.library()
    seen['team'] = [sorted(c) for c in host_omp.team_affinity(lib)]
    seen['regrown'] = [[sorted(c) for c in host_omp.team_affinity(lib, k)] for k in (n, 2, n)][-1]
    parallel(piece, 2, 1 << 24)
    dispatcher.post(deferred)  # the dispatcher thread starts here, on the worker
h.run(probe, [], 'probe').wait()
assert posted.wait(30)
print(json.dumps({'team': seen['team'], 'regrown': seen['regrown'], 'worker': seen[0], 'helper': seen[1],
                  'dispatcher': seen['dispatcher'], 'main': sorted(os.sched_getaffinity(0)), 'shape': y.shape,
                  'threads': h.info.extras.get('onednn_threads'), 'env': os.environ.get('OMP_PROC_BIND')}))
"""


def _probe(preload=False, **env):
    base = {k: v for k, v in os.environ.items() if k not in (*host_omp.USER_BINDING, "DEVICELAYER_PIN_THREADS")}
    out = subprocess.run([sys.executable, "-c", _PROBE, "preload" if preload else "-"],
                         env={**base, "DEVICELAYER_BACKENDS": "host", **env},
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _one_cpu_each(team):
    return all(len(c) == 1 for c in team) and len({c[0] for c in team}) == min(len(team), len(CPUS))


@needs_onednn
@needs_two_cpus
def test_each_thread_of_the_team_runs_on_its_own_cpu_and_what_the_worker_starts_keeps_every_cpu():
    seen = _probe()
    assert seen["shape"] == [1, 3, 7, 7]
    assert len(seen["team"]) == len(CPUS) and _one_cpu_each(seen["team"])
    assert seen["worker"] == seen["team"][0]  # the worker is its team's thread 0
    assert seen["helper"] == CPUS and seen["dispatcher"] == CPUS and seen["main"] == CPUS
    assert seen["threads"] == f"{len(CPUS)} OpenMP threads{OWN}, bound (true), one CPU per thread"
    assert seen["env"] is None  # set only while loading: child processes do not inherit it


@needs_onednn
@pytest.mark.skipif(len(CPUS) < 3, reason="a team of 2 or fewer never ends threads to start them again")
def test_threads_started_again_after_a_smaller_team_are_bound_too():
    seen = _probe()
    assert len(seen["regrown"]) == len(CPUS) and _one_cpu_each(seen["regrown"])


@needs_onednn
@needs_two_cpus
@pytest.mark.parametrize("value", ["0", "off"])
def test_turned_off_nothing_is_bound(value):
    seen = _probe(DEVICELAYER_PIN_THREADS=value)
    assert seen["team"] == [CPUS] * len(CPUS) and seen["regrown"] == [CPUS] * len(CPUS)
    assert seen["worker"] == CPUS and seen["helper"] == CPUS
    assert seen["threads"] == f"{len(CPUS)} OpenMP threads{OWN}, unbound (DEVICELAYER_PIN_THREADS=0)"


@needs_onednn
@needs_two_cpus
def test_the_users_binding_is_followed():
    seen = _probe(OMP_PROC_BIND="false")
    assert seen["team"] == [CPUS] * len(CPUS)
    assert seen["threads"] == f"{len(CPUS)} OpenMP threads{OWN}, unbound (the user's OMP_PROC_BIND)"
    seen = _probe(OMP_PROC_BIND="close")
    assert _one_cpu_each(seen["team"]) and seen["env"] == "close"
    assert seen["threads"] == f"{len(CPUS)} OpenMP threads{OWN}, bound (close) (the user's OMP_PROC_BIND)"
    assert seen["helper"] == CPUS and seen["main"] == CPUS


@needs_onednn
@needs_own
@needs_two_cpus
def test_a_runtime_loaded_before_devicelayer_leaves_onednns_own_bound():
    seen = _probe(preload=True)
    assert len(seen["team"]) == len(CPUS) and _one_cpu_each(seen["team"])
    assert seen["threads"] == f"{len(CPUS)} OpenMP threads{OWN}, bound (true), one CPU per thread"


@needs_onednn
@needs_two_cpus
def test_a_shared_runtime_loaded_before_devicelayer_keeps_its_settings():
    seen = _probe(preload=True, DEVICELAYER_PRIVATE_OPENMP="0")
    assert seen["team"] == [CPUS] * len(CPUS)
    assert seen["threads"] == (f"{len(CPUS)} OpenMP threads, unbound (the OpenMP runtime was loaded before "
                               "devicelayer)")


@pytest.mark.parametrize("env,want", [({}, True), ({"DEVICELAYER_PIN_THREADS": "0"}, False),
                                      ({"DEVICELAYER_PIN_THREADS": "1"}, True), ({"OMP_PROC_BIND": "close"}, False),
                                      ({"GOMP_CPU_AFFINITY": "0-3"}, False), ({"KMP_AFFINITY": "compact"}, False),
                                      ({"OMP_PLACES": ""}, True)])
def test_wanted_follows_the_environment(monkeypatch, env, want):
    for name in (*host_omp.USER_BINDING, "DEVICELAYER_PIN_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert host_omp.wanted() is want


def test_which_mapped_runtimes_count_as_the_one_onednn_links():
    lib = "7f00-7f01 r-xp 00000000 08:01 42    /usr/lib/x86_64-linux-gnu/"
    assert host_omp.runtime_in([lib + "libgomp.so.1\n"]) and host_omp.runtime_in([lib + "libgomp.so.1.0.0"])
    assert host_omp.runtime_in(["7f00-7f01 r-xp 00000000 08:01 42    /opt/intel/lib/libiomp5.so"])
    assert not host_omp.runtime_in([lib + "libc.so.6", "7f00-7f01 rw-p 00000000 00:00 0    [heap]"])
    assert not host_omp.runtime_in(["7f00-7f01 r-xp 0 08:01 42   /venv/torch/lib/libgomp-a34b3233.so.1"])
    with open("/proc/self/maps") as f:
        mapped = f.read()
    assert host_omp.runtime_loaded() == host_omp.runtime_in(mapped.splitlines())


def test_loading_sets_the_binding_only_while_it_lasts(monkeypatch):
    monkeypatch.setattr(host_omp, "_loaded_with", {})  # (this process's record of its own loading stays)
    for name in (*host_omp.USER_BINDING, "DEVICELAYER_PIN_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(host_omp, "runtime_loaded", lambda: False)
    with host_omp.loading():
        assert os.environ["OMP_PROC_BIND"] == "true"
    assert "OMP_PROC_BIND" not in os.environ
    monkeypatch.setattr(host_omp, "runtime_loaded", lambda: True)
    with host_omp.loading():
        assert "OMP_PROC_BIND" not in os.environ
    monkeypatch.setenv("OMP_PROC_BIND", "spread")
    monkeypatch.setattr(host_omp, "runtime_loaded", lambda: False)
    with host_omp.loading():
        assert os.environ["OMP_PROC_BIND"] == "spread"
    assert os.environ["OMP_PROC_BIND"] == "spread"


@needs_onednn
def test_a_stretch_of_alone_calls_sets_the_team_size_once_and_gives_it_back():
    """A stretch waking no team runs each ``alone`` call as it is, inside one section of team size one; the
    calling thread's size is back afterwards, after a failing call too; a stretch with a team call keeps the
    per-call wrappers and no section."""
    from devicelayer.backends.host.stretch import Stretch, team_call
    from devicelayer.errors import LaunchError

    lib = host_dnnl.library()
    omp = host_omp._openmp(lib)
    size = omp["omp_get_max_threads"]()
    seen: list[int] = []

    def probe() -> None:
        seen.append(omp["omp_get_max_threads"]())

    def fails() -> None:
        raise RuntimeError("bad call")

    wrapped = host_omp.alone(lib, probe)
    stretch = Stretch([("a", team_call(wrapped, False), True, False), ("b", team_call(wrapped, False), True, False)],
                      host_omp.section(lib))
    assert stretch.calls == [probe, probe]  # the wrappers are not called
    stretch()
    assert seen == [1, 1] and omp["omp_get_max_threads"]() == size
    failing = Stretch([("a", wrapped, True, False), ("b", host_omp.alone(lib, fails), True, False)],
                      host_omp.section(lib))
    with pytest.raises(LaunchError, match="bad call"):
        failing()
    assert seen[-1] == 1 and omp["omp_get_max_threads"]() == size
    mixed = Stretch([("a", wrapped, True, False), ("t", team_call(lambda: None, True), True, True)],
                    host_omp.section(lib))
    assert mixed.calls[0] is wrapped
    seen.clear()
    mixed()
    assert seen == [1] and omp["omp_get_max_threads"]() == size


@needs_onednn
def test_a_synchronous_runtime_needs_no_stream_wait():
    """oneDNN on OpenMP finishes a primitive within its execute call: the layers skip the stream wait."""
    assert host_dnnl.engine().synchronous


@needs_onednn
def test_the_team_size_is_the_default_whichever_thread_asks(monkeypatch):
    lib = host_dnnl.library()
    omp = host_omp._openmp(lib)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    procs = omp["omp_get_num_procs"]()
    assert host_omp.team_size(lib) == procs
    assert host_omp.alone(lib, lambda: host_omp.team_size(lib))() == procs  # (its own size is one meanwhile)
    monkeypatch.setenv("OMP_NUM_THREADS", "3,1")
    assert host_omp.team_size(lib) == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "none")
    assert host_omp.team_size(lib) == procs


@pytest.mark.parametrize("team, flops", [(1, 4_000_000), (2, 4_000_000), (4, 2_000_000), (16, 500_000),
                                         (256, 250_000)])
def test_the_work_a_call_runs_alone_under_shrinks_with_the_team(monkeypatch, team, flops):
    from devicelayer.backends.host import conv as host_conv

    monkeypatch.setattr(host_omp, "team_size", lambda lib: team)
    assert host_conv.small_flops.__wrapped__() == flops
