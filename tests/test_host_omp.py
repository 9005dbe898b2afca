"""The host worker's OpenMP team (oneDNN's threads): one CPU per thread, the opt-outs, and NumPy helper threads
that keep every CPU although the worker that starts them is pinned."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from devicelayer.backends import host_dnnl, host_omp

CPUS = sorted(os.sched_getaffinity(0))
needs_pinning = [pytest.mark.skipif(host_dnnl.library() is None, reason="oneDNN is not installed"),
                 pytest.mark.skipif(len(CPUS) < 2, reason="needs two CPUs to see a pin")]

# a fresh process runs a oneDNN pool on the host, then reports what the worker's team, the worker, and a NumPy
# helper and the dispatcher thread started from the worker may run on
_PROBE = """
import json, os, threading, numpy as np, devicelayer as dl
from devicelayer.backends import host_dnnl, host_omp
from devicelayer.events import dispatcher
from devicelayer.kernels.op import parallel
h = dl.device('host')
x = np.random.default_rng(0).random((1, 3, 9, 9), dtype=np.float32)
y = dl.ops.run('max_pool', [dl.tensor(x, h)], kernel_shape=[3, 3])[0].numpy()
seen, posted = {}, threading.Event()
def piece(a, b):
    seen[a] = sorted(os.sched_getaffinity(0))
def deferred():
    seen['dispatcher'] = sorted(os.sched_getaffinity(0))
    posted.set()
def probe():
    seen['team'] = [sorted(c) for c in host_omp.team_affinity(host_dnnl.library())]
    parallel(piece, 2, 1 << 24)
    dispatcher.post(deferred)  # the dispatcher thread starts here, on the worker
h.run(probe, [], 'probe').wait()
assert posted.wait(30)
print(json.dumps({'team_cpus': h.team_cpus, 'team': seen['team'], 'worker': seen[0], 'helper': seen[1],
                  'dispatcher': seen['dispatcher'], 'main': sorted(os.sched_getaffinity(0)), 'shape': y.shape}))
"""


def _probe(**env):
    base = {k: v for k, v in os.environ.items() if k not in (*host_omp._USER_BINDING, "DEVICELAYER_PIN_THREADS")}
    out = subprocess.run([sys.executable, "-c", _PROBE], env={**base, "DEVICELAYER_BACKENDS": "host", **env},
                         capture_output=True, text=True, timeout=120, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _pinning(fn):
    for mark in needs_pinning:
        fn = mark(fn)
    return fn


@_pinning
def test_the_team_gets_one_cpu_per_thread_and_the_helpers_keep_every_cpu():
    seen = _probe()
    assert seen["shape"] == [1, 3, 7, 7]
    team = seen["team_cpus"]
    assert team is not None and len(team) == len(seen["team"]) >= 2
    assert len(set(team)) == len(team) and set(team) <= set(CPUS)
    assert seen["team"] == [[c] for c in team]  # as the OS reports it for each thread of the team
    assert seen["worker"] == [team[0]]  # the worker is the team's thread 0
    assert seen["helper"] == CPUS and seen["dispatcher"] == CPUS and seen["main"] == CPUS


@_pinning
@pytest.mark.parametrize("env", [{"DEVICELAYER_PIN_THREADS": "0"}, {"DEVICELAYER_PIN_THREADS": "off"}])
def test_turned_off_nothing_is_pinned(env):
    seen = _probe(**env)
    assert seen["team_cpus"] is None
    assert seen["team"] == [CPUS] * len(seen["team"]) and len(seen["team"]) >= 2
    assert seen["worker"] == CPUS and seen["helper"] == CPUS


@_pinning
@pytest.mark.parametrize("env", [{"OMP_PROC_BIND": "false"}, {"OMP_PLACES": "cores"}])
def test_a_binding_the_user_set_is_left_to_the_openmp_runtime(env):
    seen = _probe(**env)
    assert seen["team_cpus"] is None
    if env.get("OMP_PROC_BIND") == "false":  # libgomp binds nothing either
        assert seen["team"] == [CPUS] * len(seen["team"])
    assert seen["main"] == CPUS and seen["helper"] == CPUS


@_pinning
def test_a_team_larger_than_the_cpus_is_not_pinned():
    seen = _probe(OMP_NUM_THREADS=str(len(CPUS) + 1))
    assert seen["team_cpus"] is None and len(seen["team"]) == len(CPUS) + 1
    assert all(c == CPUS for c in seen["team"])


@_pinning
def test_a_smaller_team_takes_the_first_places():
    seen = _probe(OMP_NUM_THREADS="2")
    assert seen["team_cpus"] == host_omp.places(set(CPUS))[:2]
    assert seen["team"] == [[c] for c in seen["team_cpus"]]


def test_places_take_one_thread_per_core_first():
    cores = {0: [0, 4], 4: [0, 4], 1: [1, 5], 5: [1, 5], 2: [2, 6], 6: [2, 6], 3: [3, 7], 7: [3, 7]}
    assert host_omp.places(set(range(8)), cores.__getitem__) == [0, 1, 2, 3, 4, 5, 6, 7]
    interleaved = {c: [c - c % 2, c - c % 2 + 1] for c in range(8)}  # siblings numbered next to each other
    assert host_omp.places(set(range(8)), interleaved.__getitem__) == [0, 2, 4, 6, 1, 3, 5, 7]
    assert host_omp.places({1, 3, 5}, interleaved.__getitem__) == [1, 3, 5]  # one thread of each core allowed
    assert host_omp.places({0, 1, 3}, interleaved.__getitem__) == [0, 3, 1]
    assert sorted(host_omp.places(set(CPUS))) == CPUS  # this machine's topology: every CPU once


@pytest.mark.parametrize("text,cpus", [("0", [0]), ("0-3", [0, 1, 2, 3]), ("0,4", [0, 4]), ("0-1,8-9\n", [0, 1, 8, 9])])
def test_kernel_cpu_lists(text, cpus):
    assert host_omp._cpu_list(text) == cpus


@pytest.mark.parametrize("env,want", [({}, True), ({"DEVICELAYER_PIN_THREADS": "0"}, False),
                                      ({"DEVICELAYER_PIN_THREADS": "1"}, True), ({"OMP_PROC_BIND": "close"}, False),
                                      ({"GOMP_CPU_AFFINITY": "0-3"}, False), ({"KMP_AFFINITY": "compact"}, False),
                                      ({"OMP_PLACES": ""}, True)])
def test_wanted_follows_the_environment(monkeypatch, env, want):
    for name in (*host_omp._USER_BINDING, "DEVICELAYER_PIN_THREADS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert host_omp.wanted() is want
