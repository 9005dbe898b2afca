"""float32 GEMM through devicelayer's ``matmul`` on every device, against NumPy on the host and, on every GPU
device where a CUDA device is present (NVIDIA's OpenCL and Vulkan drivers included), cuBLAS through CuPy in the same
process."""

from __future__ import annotations


import numpy as np

from benchmarks.common import seconds_per_call

import devicelayer as dl
from devicelayer.kernels.runner import run as run_op
from devicelayer.ops import names  # noqa: F401  (registers the op library)

TITLE = "float32 GEMM n x n x n (TFLOP/s; ratio = devicelayer / peer)"



def _seconds(call, sync, budget: float, rounds: int) -> float:
    return seconds_per_call(call, sync, budget, rounds, max_reps=20)


def _cublas_seconds(dev, a: np.ndarray, b: np.ndarray, budget: float, rounds: int) -> float:
    import cupy  # only with a CUDA device present

    with cupy.cuda.Device(dev.info.index):
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            ca, cb = cupy.asarray(a), cupy.asarray(b)
            cc = cupy.empty((a.shape[0], b.shape[1]), np.float32)

            def call():
                cupy.matmul(ca, cb, out=cc)

            return _seconds(call, stream.synchronize, budget, rounds)


def _cublas_peer(cuda, a: np.ndarray, b: np.ndarray, budget: float, rounds: int) -> tuple[str, float]:
    """(a label's suffix, seconds) of cuBLAS's product on ``cuda``: ("", its time), or a failure's name and NaN."""
    try:
        return "", _cublas_seconds(cuda, a, b, budget, rounds)
    except Exception as exc:  # noqa: BLE001  (report, do not abort the other devices)
        return f" failed: {type(exc).__name__}", float("nan")


def run(devices, quick: bool = False) -> list[dict]:
    n = 1024 if quick else 4096
    flops = 2.0 * n ** 3
    rounds = 3 if quick else 5
    budget = 0.3 if quick else 1.0
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    numpy_s = _seconds(lambda: np.matmul(a, b), lambda: None, budget, rounds)
    # cuBLAS is every GPU device's peer where a CUDA device is present (NVIDIA's OpenCL and Vulkan drivers run on
    # the same GPU)
    cuda = next((d for d in devices if d.info.backend == "cuda"), None)
    cublas = _cublas_peer(cuda, a, b, budget, rounds) if cuda is not None else None
    rows = []
    for dev in devices:
        if not dev.info.supports("float32"):
            continue
        ta, tb = dl.tensor(a, dev), dl.tensor(b, dev)
        tc = dl.tensor(np.zeros((n, n), np.float32), dev)
        last = []

        def call():
            last[:] = [run_op("matmul", [ta, tb], out=[tc])[0].ready]

        def sync():
            for e in last:
                e.wait()

        mine = _seconds(call, sync, budget, rounds)
        got = tc.numpy()[:64]
        err = float(np.max(np.abs(got - a[:64] @ b)) / max(1.0, float(np.max(np.abs(a[:64] @ b)))))
        path = "vendor" if dev.info.kernel_language != "python" and dev.vendor_op("matmul") is not None else (
            "numpy" if dev.info.kernel_language == "python" else "tiled kernel")
        base = {"device": dev.id, "name": dev.info.name, "n": n, "path": path, "devicelayer_tflops": flops / mine / 1e12}
        peers = [("NumPy (host)", numpy_s)]
        if cublas is not None and dev.info.device_type == "gpu":
            label = "cuBLAS (CuPy)" if dev is cuda else f"cuBLAS (CuPy, {cuda.id})"
            peers.append((label + cublas[0], cublas[1]))
        for peer, theirs in peers:
            rows.append({**base, "peer": peer, "peer_tflops": flops / theirs / 1e12, "ratio": theirs / mine,
                         "max_rel_err": err})
        for t in (ta, tb, tc):
            dev.pool.free(t.buffer)
    return rows
