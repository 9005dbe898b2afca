"""Exchange overhead: handing a Tensor to another library and taking one back through DLPack, against the same
exchange between two arrays of that library (NumPy on the host; PyTorch on CUDA where it is installed), and an
InferenceSession's run against the plan it wraps and against onnxruntime."""

from __future__ import annotations

import numpy as np

from benchmarks.common import interleaved, per_call

TITLE = "exchange overhead (us per call; ratio = devicelayer / peer)"


def _row(dev, what, peer, mine, theirs):
    return {"device": dev.id, "name": dev.info.name, "metric": what, "peer": peer,
            "devicelayer_us": mine * 1e6, "peer_us": theirs * 1e6, "ratio": mine / theirs}


def _host_rows(dev, calls, rounds):
    import devicelayer as dl

    x = np.arange(1 << 16, dtype=np.float32)
    t = dl.tensor(x, dev)
    t.ready.wait()

    def export():
        return per_call(lambda: np.from_dlpack(t), calls)

    def numpy_export():
        return per_call(lambda: np.from_dlpack(x), calls)

    def take():
        return per_call(lambda: dl.from_dlpack(x).free(), calls)

    export(), numpy_export(), take()  # warm up
    rows = [_row(dev, "export to NumPy", "NumPy to NumPy", *interleaved(export, numpy_export, rounds)),
            _row(dev, "from_dlpack + free", "NumPy to NumPy", *interleaved(take, numpy_export, rounds))]
    t.free()
    return rows


def _torch_rows(dev, calls, rounds):
    try:
        import torch
    except ImportError:
        return []
    import devicelayer as dl

    if dev.pool.dlpack_device()[0] != dl.DLDeviceType.kDLCUDA or not torch.cuda.is_available():
        return []
    t = dl.tensor(np.arange(1 << 16, dtype=np.float32), dev)
    t.ready.wait()
    peer = torch.arange(1 << 16, dtype=torch.float32, device=f"cuda:{dev.info.index}")

    def export():
        return per_call(lambda: torch.from_dlpack(t), calls)

    def torch_export():
        return per_call(lambda: torch.from_dlpack(peer), calls)

    def take():
        return per_call(lambda: dl.from_dlpack(peer).free(), calls)

    export(), torch_export(), take()
    rows = [_row(dev, "export to PyTorch", "PyTorch to PyTorch", *interleaved(export, torch_export, rounds)),
            _row(dev, "from_dlpack + free", "PyTorch to PyTorch", *interleaved(take, torch_export, rounds))]
    t.free()
    return rows


def _session_rows(dev, calls, rounds):
    try:
        import onnxruntime as ort
    except ImportError:
        return []
    import devicelayer.onnx as dlort

    path = dlort.bundled("tiny_cnn")
    feed = {"x": np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    sess = dlort.InferenceSession(path, providers=[dev.id])
    plan = sess.plan
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    def session():
        return per_call(lambda: sess.run(None, feed), calls)

    def bare_plan():
        return per_call(lambda: plan.run_numpy(feed), calls)

    def onnxruntime():
        return per_call(lambda: ref.run(None, feed), calls)

    session(), bare_plan(), onnxruntime()
    rows = [_row(dev, "tiny_cnn session.run", "its DynamicPlan", *interleaved(session, bare_plan, rounds)),
            _row(dev, "tiny_cnn session.run", "onnxruntime (CPU)", *interleaved(session, onnxruntime, rounds))]
    plan.release()
    return rows


def run(devices, quick: bool = False) -> list[dict]:
    calls, rounds = (50, 3) if quick else (200, 9)
    rows = []
    for dev in devices:
        if dev.pool.maps_host_memory:
            rows += _host_rows(dev, calls, rounds)
        rows += _torch_rows(dev, calls, rounds)
        rows += _session_rows(dev, max(10, calls // 10), rounds)
    return rows
