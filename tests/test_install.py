"""``pip install .`` (not editable) into a fresh virtual environment gives a working install, shaders included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_installs_into_a_fresh_venv(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    # the wheel's dependencies (numpy, rich, drivers' bindings) come from this environment, devicelayer from the wheel
    site_dir = next(venv.glob("lib/python*/site-packages"))
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site_dir / "zz_test_deps.pth").write_text("\n".join(deps) + "\n")
    wheel_dir = tmp_path / "wheel"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(wheel_dir), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    wheels = list(wheel_dir.glob("devicelayer-*.whl"))
    assert len(wheels) == 1
    inst = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--force-reinstall", "-q", str(wheels[0])],
                          capture_output=True, text=True, timeout=600)
    assert inst.returncode == 0, inst.stderr[-3000:]
    code = textwrap.dedent("""
        import json, numpy as np, devicelayer, devicelayer.backends
        import devicelayer.graph, devicelayer.kernels.ops, devicelayer.onnx
        from devicelayer.resources import shader_names, shader_path
        names = shader_names()
        g = devicelayer.Graph()
        x = g.input("x", (2, 8))
        g.output("y", g.relu(g.matmul(x, g.constant(np.eye(8, dtype=np.float32)))))
        y = g.compile(["host"])(x=-np.ones((2, 8), np.float32))["y"]
        assert (y == 0).all()
        assert devicelayer.onnx.load(devicelayer.onnx.bundled("tiny_cnn")).graph().nodes
        print(json.dumps({"file": devicelayer.__file__, "backends": devicelayer.backends.__file__,
                          "shaders": names, "first": str(shader_path(names[0])) if names else None,
                          "devices": [d.id for d in devicelayer.devices()]}))
        """)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    out = subprocess.run([str(py), "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    site = str(venv)
    assert doc["file"].startswith(site) and doc["backends"].startswith(site), doc
    shipped = sorted(p.name for p in (ROOT / "shaders").iterdir()
                     if p.is_file() and not p.name.startswith(("_", ".")) and p.suffix != ".py")
    assert doc["shaders"] == shipped and shipped, doc
    assert doc["first"].startswith(site)
    assert "host" in doc["devices"]
    cli = subprocess.run([str(venv / "bin" / "devicelayer"), "info", "--json"], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=300)
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert json.loads(cli.stdout)["devices"]
    run = subprocess.run([str(venv / "bin" / "devicelayer"), "run", "--bundled", "tiny_cnn", "--device", "host",
                          "--check", "--json"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
