"""Fixtures: the conformance suite runs on every device present.

``DEVICELAYER_REQUIRE=host,opencl`` makes the session fail when a named
backend is unavailable, so a missing driver can never pass as "no devices";
``onednn`` in it requires the host's oneDNN route.  ``DEVICELAYER_TEST_DEVICES=cuda:0,vulkan:0`` runs the
device-parametrized tests on those devices only (the GPU machine's pass).
"""

from __future__ import annotations

import os
import zlib

# Ray reads this when it is imported: 0 keeps a test cluster's every process on 127.0.0.1 (the cluster tests start
# several nodes on this machine with ray.cluster_utils.Cluster)
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np
import pytest

import devicelayer as dl


def pytest_report_header(config):
    lines = [f"devicelayer devices: {', '.join(d.id + ' (' + d.info.name + ')' for d in dl.devices()) or 'none'}"]
    lines += [f"  unavailable {u.backend}: {u.reason}" for u in dl.unavailable()]
    return lines


def pytest_sessionstart(session):
    required = [b.strip() for b in os.environ.get("DEVICELAYER_REQUIRE", "").split(",") if b.strip()]
    present = {d.info.backend for d in dl.devices()}
    if any(d.info.extras.get("conv", "").startswith("oneDNN") for d in dl.devices() if d.info.backend == "host"):
        present.add("onednn")  # a library of the host backend, named like a backend here
    missing = [b for b in required if b not in present]
    if missing:
        reasons = {u.backend: u.reason for u in dl.unavailable()}
        reasons["onednn"] = "libdnnl.so.3 not found (pip install devicelayer[onednn])"
        detail = "; ".join(f"{b}: {reasons.get(b, 'not loaded')}" for b in missing)
        raise pytest.UsageError(f"DEVICELAYER_REQUIRE names backends that are unavailable: {detail}")


def _device_ids() -> list[str]:
    """Every device present, or those ``DEVICELAYER_TEST_DEVICES`` names (comma-separated ids)."""
    ids = [d.id for d in dl.devices()]
    wanted = [i.strip() for i in os.environ.get("DEVICELAYER_TEST_DEVICES", "").split(",") if i.strip()]
    return [i for i in ids if i in wanted] if wanted else ids


def pytest_generate_tests(metafunc):
    ids = _device_ids()
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device_id", ids, ids=ids)
    if "device_pair" in metafunc.fixturenames:
        pairs = [(a, b) for a in ids for b in ids]
        metafunc.parametrize("device_pair", pairs, ids=[f"{a}->{b}" for a, b in pairs])


@pytest.fixture
def device(device_id):
    dev = dl.device(device_id)
    yield dev
    dev.synchronize()


@pytest.fixture
def rng(request):
    seed = zlib.crc32(request.node.nodeid.encode())
    return np.random.default_rng(seed)
