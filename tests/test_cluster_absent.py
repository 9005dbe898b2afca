"""Without Ray: devicelayer.cluster imports, every call of it says how to install Ray, nothing else changes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.errors import DeviceNotFound
from devicelayer.graph import remote


def run_without_ray(code: str) -> subprocess.CompletedProcess:
    shim = "import sys; sys.modules['ray'] = None  # as if Ray were not installed\n"
    return subprocess.run([sys.executable, "-c", shim + textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120)


def test_without_ray_the_cluster_calls_raise_backend_unavailable_with_the_hint():
    done = run_without_ray("""
        import numpy as np
        import devicelayer as dl
        import devicelayer.cluster as dc
        from devicelayer.errors import BackendUnavailable, DeviceNotFound
        for call in (lambda: dc.connect(), lambda: dc.devices(), lambda: dc.device("abcdef01/host"),
                     lambda: dc.nodes()):
            try:
                call()
            except BackendUnavailable as exc:
                assert "pip install 'devicelayer[cluster]'" in str(exc), exc
            else:
                raise AssertionError("no BackendUnavailable")
        g = dl.Graph()
        x = g.input("x", (3,))
        g.output("y", g.relu(x))
        try:
            g.compile(["abcdef01/host"])
        except DeviceNotFound as exc:
            assert "connect" in str(exc)
        else:
            raise AssertionError("no DeviceNotFound")
        v = np.array([-1.5, 0.25, 2.0], np.float32)
        assert (g.compile(["host"])(x=v)["y"] == np.maximum(v, 0)).all()
        print("ok")
    """)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_without_ray_info_cluster_is_refused_with_the_hint():
    done = run_without_ray("""
        import sys
        from devicelayer.cli import main
        sys.exit(main(["info", "--cluster"]))
    """)
    assert done.returncode == 2
    assert "pip install 'devicelayer[cluster]'" in done.stderr


def test_nothing_but_the_cluster_layer_imports_ray():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        import sys
        import devicelayer, devicelayer.graph, devicelayer.onnx, devicelayer.cli, devicelayer.cluster
        devicelayer.devices()
        print("ray" in sys.modules)
    """)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_node_qualified_ids_without_a_cluster_are_device_not_found(rng):
    if remote.provider() is not None:
        pytest.fail("a cluster connection was left open by an earlier test")
    g = dl.Graph()
    x = g.input("x", (4,))
    g.output("y", g.exp(x))
    for bad in (["abcdef01/host"], ["host", "abcdef01/opencl:0"]):
        with pytest.raises(DeviceNotFound, match="devicelayer.cluster.connect"):
            g.compile(bad)
    with pytest.raises(DeviceNotFound, match="devicelayer.cluster.connect"):
        g.compile(["host"], placement={"exp_1": "abcdef01/host"})
    v = rng.standard_normal(4).astype(np.float32)
    np.testing.assert_allclose(g.compile(["host"])(x=v)["y"], np.exp(v.astype(np.float64)), rtol=1e-6)
