"""Model latency: the nine light_* ONNX models (random weights) on each device against onnxruntime (CPU),
measured in the same run; on CUDA devices also ResNet-50 (light_resnet50) at batch 1 and 16 against
onnxruntime and, when torch imports, PyTorch eager.

There is no ONNX-to-PyTorch converter in the environment, so the PyTorch peer runs the *same* devicelayer
Graph (after the ONNX front end's folding) through ``torch.nn.functional``, one call per node, eagerly
on the GPU (cuDNN conv, cuBLAS matmul; TF32 off, as devicelayer computes IEEE float32).  Times are per
inference, median over the repetitions (devicelayer and onnxruntime timed in alternation, each call after a
short pause), inputs from and outputs back on the host for every contestant (onnxruntime and devicelayer return NumPy; the PyTorch timing ends
at ``torch.cuda.synchronize`` with the output copied to the host).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from .common import interleaved

TITLE = "model latency (ms per inference, median; ratio = devicelayer / peer)"


def _median_ms(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


#: idle time before each paired call: the worker threads of onnxruntime's pool and of OpenBLAS spin for a while
#: after a call, and would run into the other contestant's timing (on 2 cores, 2-3x for small models)
PAUSE_S = 0.2


def _paired_ms(a, b, repeat: int, pause: float = PAUSE_S) -> tuple[float, float]:
    """Medians (ms) of ``a`` and ``b`` timed in alternation after a warm-up of each, each call after ``pause``
    seconds, so that the machine's load changes (other processes, clock) hit both alike."""
    def once(fn):
        def timed() -> float:
            time.sleep(pause)
            t0 = time.perf_counter()
            fn()
            return time.perf_counter() - t0
        return timed

    a()
    b()
    ta, tb = interleaved(once(a), once(b), repeat)
    return ta * 1e3, tb * 1e3


def _torch_runner(graph: Any, feeds: dict[str, np.ndarray], device: str):
    """A callable running ``graph`` eagerly with torch on ``device``; None when torch or an op is missing."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        return None

    dev = torch.device(device)

    def conv(x, w, b, a, transposed=False):
        nd = len(a["strides"])
        p = a["pads"]
        if any(p[i] != p[nd + i] for i in range(nd)):
            x = F.pad(x, [v for i in reversed(range(nd)) for v in (p[i], p[nd + i])])
            pad = 0
        else:
            pad = tuple(p[:nd])
        fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
        return fn(x, w, b, a["strides"], pad, a["dilations"], a["group"])

    def pool(x, a, kind):
        nd = len(a["kernel_shape"])
        p = a["pads"]
        if any(p[i] != p[nd + i] for i in range(nd)) or any(p[i] * 2 > a["kernel_shape"][i] for i in range(nd)):
            return None
        pad = tuple(p[:nd])
        if kind == "max":
            fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nd]
            return fn(x, a["kernel_shape"], a["strides"], pad, a["dilations"], bool(a["ceil_mode"]))
        fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
        return fn(x, a["kernel_shape"], a["strides"], pad, bool(a["ceil_mode"]), bool(a["count_include_pad"]))

    def activated(y, a):  # a fused activation attribute, applied last
        return F.relu(y) if a.get("activation") == "relu" else y

    def gemm(ins, a):
        A = ins[0].t() if a["transA"] else ins[0]
        B = ins[1].t() if a["transB"] else ins[1]
        y = a["alpha"] * (A @ B)
        return y + a["beta"] * ins[2] if len(ins) == 3 else y

    table = {
        "conv": lambda i, a: activated(
            conv(i[0], i[1], i[2] if len(i) > 2 else None, a) + (i[3] if len(i) > 3 else 0), a),
        "relu": lambda i, a: F.relu(i[0]),
        "max_pool": lambda i, a: pool(i[0], a, "max"),
        "average_pool": lambda i, a: pool(i[0], a, "avg"),
        "global_average_pool": lambda i, a: i[0].mean(dim=tuple(range(2, i[0].dim())), keepdim=True),
        "batch_normalization": lambda i, a: activated(
            F.batch_norm(i[0], i[3], i[4], i[1], i[2], False, 0.0, a["epsilon"]), a),
        "lrn": lambda i, a: F.local_response_norm(i[0], a["size"], a["alpha"], a["beta"], a["bias"]),
        "gemm": gemm,
        "matmul": lambda i, a: i[0] @ i[1],
        "add": lambda i, a: i[0] + i[1],
        "mul": lambda i, a: i[0] * i[1],
        "reshape": lambda i, a: i[0].reshape(a["shape"]),
        "flatten": lambda i, a: i[0].reshape(int(np.prod(i[0].shape[:a["axis"]])), -1),
        "unsqueeze": lambda i, a: _unsqueeze(i[0], a["axes"]),
        "concat": lambda i, a: torch.cat(list(i), a["axis"]),
        "transpose": lambda i, a: i[0].permute(*a["perm"]),
        "softmax": lambda i, a: torch.softmax(i[0], a["axis"]),
    }
    nodes = graph.needed()
    if any(n.op not in table for n in nodes):
        return None
    consts = {id(v): torch.as_tensor(np.ascontiguousarray(v.constant), device=dev)
              for v in graph.values.values() if v.constant is not None}
    torch.backends.cudnn.allow_tf32 = False  # IEEE float32 products, as devicelayer computes
    torch.backends.cuda.matmul.allow_tf32 = False

    def run():
        env = dict(consts)
        for v in graph.inputs:  # inputs start on the host for every contestant
            env[id(v)] = torch.as_tensor(feeds[v.name]).to(dev, non_blocking=False)
        with torch.no_grad():
            for n in nodes:
                y = table[n.op]([env[id(v)] for v in n.inputs], n.attrs)
                if y is None:
                    raise NotImplementedError(n.op)
                env[id(n.outputs[0])] = y
        outs = [env[id(v)].cpu() for v in graph.outputs.values()]
        torch.cuda.synchronize(dev) if dev.type == "cuda" else None
        return outs

    try:
        run()
    except NotImplementedError:
        return None
    return run


def _max_rel_diff(ours: list[np.ndarray], theirs: list[np.ndarray]) -> float:
    """The largest difference between two runs' outputs, relative to each output's largest magnitude: the
    PyTorch peer must compute what the plan computes."""
    worst = 0.0
    for a, b in zip(ours, theirs, strict=True):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, float(np.max(np.abs(a - b), initial=0.0)) / max(float(np.max(np.abs(b), initial=0.0)),
                                                                           1e-30))
    return worst


def _unsqueeze(x, axes):
    for a in sorted(axes):
        x = x.unsqueeze(a)
    return x


def run(devices, quick: bool = False) -> list[dict]:
    import onnx

    from devicelayer.onnx import load
    from devicelayer.onnx.testing import (LIGHT, light_path, onnxruntime_session, random_inputs,
                                          randomize_weights, with_batch)

    repeat = 3 if quick else 10
    rows = []
    nan = float("nan")
    for name in LIGHT:
        base = randomize_weights(onnx.load(str(light_path(name))), seed=7, expose_logits=False)
        batches = [1]
        if name == "resnet50" and any(d.info.backend == "cuda" for d in devices):
            batches = [1, 16]
        for batch in batches:
            model = base if batch == 1 else with_batch(base, batch)
            feeds = random_inputs(model, seed=3)
            sess = onnxruntime_session(model)
            ort_ms = _median_ms(lambda: sess.run(None, feeds), repeat)
            graph = load(model)
            for dev in devices:
                if batch > 1 and dev.info.backend != "cuda":
                    continue
                row = {"model": name, "batch": batch, "device": dev.id, "devicelayer_ms": nan,
                       "onnxruntime_cpu_ms": ort_ms, "ratio_ort": nan, "devicelayer_vs_torch_ms": nan,
                       "torch_ms": nan, "ratio_torch": nan, "torch_max_rel_diff": nan,
                       "error": ""}
                try:
                    plan = graph.compile([dev.id])
                    slow = dev.info.device_type == "cpu" or dev.info.backend == "host"
                    # onnxruntime again, in alternation with the plan: both see the same load
                    row["onnxruntime_cpu_ms"], row["devicelayer_ms"] = _paired_ms(
                        lambda: sess.run(None, feeds), lambda: plan(**feeds), max(3, repeat // 2) if slow else repeat)
                    plan.release()
                    row["ratio_ort"] = row["devicelayer_ms"] / row["onnxruntime_cpu_ms"]
                except Exception as exc:  # a device that cannot run a model is a row, not a crash
                    row["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
                if dev.info.backend == "cuda" and not row["error"]:
                    torch_run = _torch_runner(graph, feeds, f"cuda:{dev.info.index}")
                    if torch_run is not None:
                        # back to back, in alternation, no pause (an idle pause lets the GPU clock down): the
                        # plan's time against PyTorch is this pairing's, not the one against onnxruntime
                        plan = graph.compile([dev.id])
                        row["torch_max_rel_diff"] = _max_rel_diff(list(plan(**feeds).values()),
                                                                  [t.numpy() for t in torch_run()])
                        row["devicelayer_vs_torch_ms"], row["torch_ms"] = _paired_ms(
                            lambda: plan(**feeds), torch_run, repeat, pause=0.0)
                        plan.release()
                        row["ratio_torch"] = row["devicelayer_vs_torch_ms"] / row["torch_ms"]
                rows.append(row)
    return rows
