"""Ctrl-C at random moments of plan runs, in a process of its own (tests/test_interrupts.py runs it).

    python tests/sigint_fuzz.py DEVICE [RUNS]

Runs a small plan (recorded and not, NumPy and Tensor inputs, the same graph as an ONNX session) and greedy
decoding with the bundled tiny_gpt (``Generator.generate``) while
another thread sends SIGINT to the main thread every 0.5-10 ms.  Each run must either return the right
result or raise KeyboardInterrupt; afterwards runs must be right again and the device's pool must hold what
it held before.  Prints one JSON line: counts per mode, the wrong outcomes, and the pool before and after.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import threading
import time

import numpy as np

import devicelayer as dl

N = 48


def graph() -> dl.Graph:
    g = dl.Graph("sigint")
    x = g.input("x", (N, N))
    y = g.matmul(g.relu(g.add(x, x)), x)
    g.output("y", g.exp(g.mul(y, g.constant(np.float32(0.001)))))
    return g


def reference(a: np.ndarray) -> np.ndarray:
    a = a.astype(np.float64)
    return np.exp((np.maximum(a + a, 0) @ a) * 0.001)


def onnx_session(device: dl.Device):
    """The same graph as an ONNX model in an InferenceSession on ``device`` (None without the onnx package)."""
    try:
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    import devicelayer.onnx as ort

    nodes = [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "x"], ["m"]), helper.make_node("Mul", ["m", "k"], ["s"]),
             helper.make_node("Exp", ["s"], ["y"])]
    g = helper.make_graph(nodes, "sigint", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", N])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", N])],
                          [numpy_helper.from_array(np.array(0.001, np.float32), "k")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return ort.InferenceSession(model.SerializeToString(), providers=[device.id])


def decoder(device: dl.Device):
    """Greedy decoding of a few tokens with the bundled tiny_gpt on ``device`` (None without onnx), and its tokens."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        return None, None
    from pathlib import Path

    from devicelayer.onnx import bundled, load, read_model
    from devicelayer.onnx.generate import Generator

    gen = Generator(load(read_model(Path(bundled("tiny_gpt")))), [device.id], bucket=4)
    prompt = np.array([[1, 5, 7, 3]])
    return (lambda: gen.generate(prompt, 6).tokens), gen.generate(prompt, 6).tokens


def settled(device: dl.Device) -> tuple[int, int]:
    """The pool's (live buffers, allocated bytes) once the device is idle and they no longer change (frees
    complete on the dispatcher once the work they wait for is done)."""
    device.synchronize()
    pool = device.pool
    seen, deadline = None, time.monotonic() + 30
    while time.monotonic() < deadline:
        now = (pool.live_buffers, pool.allocated_bytes)
        if now == seen:
            break
        seen = now
        time.sleep(0.2)
    return seen


def handler_installed() -> bool | None:
    """Whether devicelayer's SIGINT handler is the process's (None where devicelayer has none)."""
    try:
        from devicelayer import interrupts
    except ImportError:
        return None
    return interrupts.installed()


def absorb(seconds: float) -> None:
    """Let ``seconds`` pass without a Ctrl-C: every late one (a held-back signal sent again) is absorbed."""
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < seconds:
        try:
            time.sleep(0.01)
        except KeyboardInterrupt:
            quiet_since = time.monotonic()


def main() -> int:
    device = dl.device(sys.argv[1])
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 150
    pool = device.pool
    plans = {"plan": graph().compile([device], record=False), "recorded": graph().compile([device], record=True)}
    session = onnx_session(device)
    rng = np.random.default_rng(0)
    feed = dl.tensor(np.zeros((N, N), np.float32), device)

    decode, tokens = decoder(device)

    def run(mode: str, a: np.ndarray) -> bool:
        """One run of ``mode`` on ``a``: whether its result is right."""
        if mode == "generate":
            return bool(np.array_equal(decode(), tokens))
        if mode == "session":
            y = session.run(None, {"x": a})[0]
        elif mode.endswith("tensor"):
            pool.upload(feed.buffer, a)
            y = plans[mode.split()[0]].run_numpy({"x": feed})["y"]
        else:
            y = plans[mode].run_numpy({"x": a})["y"]
        return bool(np.allclose(y, reference(a), rtol=1e-3, atol=1e-4))

    modes = list(plans) + ["plan tensor", "recorded tensor"] + (["session"] if session is not None else []) \
        + (["generate"] if decode is not None else [])
    for mode in modes:  # warm: every plan prepared and recorded, every kernel compiled
        run(mode, np.ones((N, N), np.float32))
    before = settled(device)

    go, stop = threading.Event(), threading.Event()
    main_thread = threading.main_thread().ident

    def pester() -> None:
        go.wait()  # set by the main thread where a KeyboardInterrupt is caught
        r = random.Random(1)
        while not stop.wait(r.uniform(0.0005, 0.01)):
            signal.pthread_kill(main_thread, signal.SIGINT)

    counts = {m: {"ok": 0, "interrupted": 0} for m in modes}
    wrong: list[str] = []
    pest = threading.Thread(target=pester, daemon=True)
    pest.start()
    for i in range(runs * len(modes)):
        mode = modes[i % len(modes)]
        try:
            go.set()
            a = rng.standard_normal((N, N)).astype(np.float32)
            try:
                if run(mode, a):
                    counts[mode]["ok"] += 1
                else:
                    wrong.append(f"{mode}: wrong result")
            except KeyboardInterrupt:
                counts[mode]["interrupted"] += 1
            except BaseException as exc:  # noqa: BLE001 - the outcome this script reports
                wrong.append(f"{mode}: {type(exc).__name__}: {exc}"[:300])
        except KeyboardInterrupt:  # between runs
            pass
    while pest.is_alive():
        try:
            stop.set()
            pest.join()
        except KeyboardInterrupt:
            pass
    absorb(0.3)
    after_checks = []
    for mode in modes:
        a = rng.standard_normal((N, N)).astype(np.float32)
        try:
            ok = run(mode, a)
            after_checks.append(f"{mode}: {'right' if ok else 'wrong result'}")
        except BaseException as exc:  # noqa: BLE001
            after_checks.append(f"{mode}: {type(exc).__name__}: {exc}"[:300])
    after = settled(device)
    print(json.dumps({"device": device.id, "counts": counts, "wrong": wrong, "after": after_checks,
                      "pool_before": before, "pool_after": after, "handler": handler_installed()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
