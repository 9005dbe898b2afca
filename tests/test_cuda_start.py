"""The CUDA device's start: the driver on a thread of its own while CuPy imports (once per process, waited for
before the backend's first call, the runtime's own contexts made; only a recorded reason where the process has no
CUDA driver), and cuBLAS started on a thread while a plan that calls it compiles."""

from __future__ import annotations

import ctypes
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import devicelayer as dl

ROOT = Path(__file__).resolve().parent.parent
CUDA = [d for d in dl.devices() if d.info.backend == "cuda"]


def _driver_start():
    return importlib.import_module("devicelayer.backends.cuda.driver_start")


def _has_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def _fresh_process(code: str) -> dict:
    """What ``code`` (run in a new interpreter over this checkout) printed last, as JSON."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_begin_starts_one_thread_and_finish_waits_for_it():
    ds = _driver_start()
    ds.begin()
    first = ds._thread
    ds.begin()
    assert ds._thread is first  # once per process
    ds.finish()
    assert not first.is_alive()
    ds.finish()  # again: returns at once
    if _has_driver():
        assert ds.outcome["failed"] is None or "status" in str(ds.outcome["failed"])
    else:
        assert ds.outcome["failed"] == "no CUDA driver library" and ds.outcome["contexts"] == []


@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_a_fresh_process_starts_the_driver_beside_cupys_import_and_uses_its_contexts():
    code = textwrap.dedent("""\
        import json, ctypes, numpy as np, devicelayer as dl
        from devicelayer.backends.cuda import driver_start as ds
        dev = dl.device('cuda:0')
        x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
        back = dl.tensor(x, dev).numpy()
        lib = ctypes.CDLL('libcuda.so.1')
        flags, active = ctypes.c_uint(), ctypes.c_int()
        lib.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active))
        n = len([d for d in dl.devices() if d.info.backend == 'cuda'])
        print(json.dumps({'outcome': ds.outcome, 'thread': ds._thread is not None, 'active': active.value,
                          'same': bool((back == x).all()), 'n': n}))
    """)
    got = _fresh_process(code)
    assert got["thread"] and got["outcome"]["failed"] is None
    assert got["outcome"]["contexts"] == list(range(got["n"]))
    assert got["active"] == 1 and got["same"]


@pytest.mark.skipif(not CUDA, reason="no CUDA device")
def test_a_plan_with_products_starts_cublas_on_a_thread_while_it_compiles():
    code = textwrap.dedent("""\
        import json, numpy as np, devicelayer as dl
        from onnx import TensorProto, helper
        from devicelayer.onnx import load
        dev = dl.device('cuda:0')
        before = dev._warming is None and dev._blas_handle is None
        x = helper.make_tensor_value_info('x', TensorProto.FLOAT, [3, 64, 32])
        w = helper.make_tensor_value_info('w', TensorProto.FLOAT, [32, 48])
        y = helper.make_tensor_value_info('y', TensorProto.FLOAT, [3, 64, 48])
        g = helper.make_graph([helper.make_node('MatMul', ['x', 'w'], ['y'])], 'g', [x, w], [y])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)])
        plan = load(m).compile([dev])
        warming = dev._warming
        r = np.random.default_rng(5)
        a, b = r.standard_normal((3, 64, 32)).astype(np.float32), r.standard_normal((32, 48)).astype(np.float32)
        got = plan.run_numpy({'x': a, 'w': b})['y']
        warming.join()
        err = float(np.abs(got - a.astype(np.float64) @ b).max())
        print(json.dumps({'before': before, 'started': warming is not None,
                          'handle': dev._blas_handle is not None, 'err': err}))
    """)
    got = _fresh_process(code)
    assert got["before"] and got["started"] and got["handle"]
    assert got["err"] < 1e-3


def test_asking_for_a_product_starts_cublas_once_and_it_ends_with_a_handle(device):
    warming = getattr(device, "_warming", "none")
    if warming == "none":
        pytest.skip("the device starts no library on a thread")
    device.vendor_op("matmul")
    first = device._warming
    device.vendor_op("conv")
    assert first is not None and device._warming is first
    device._warming.join(timeout=120)
    assert not device._warming.is_alive() and device._blas_handle is not None
