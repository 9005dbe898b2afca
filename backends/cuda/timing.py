"""GPU time of a call as vendor-library choices are tuned (convolution routes, cuBLASLt candidates)."""

from __future__ import annotations

from typing import Any

import cupy
import numpy as np

#: timed calls per contestant when tuning (after one warm-up call)
TIMED = 5


def gpu_ms(stream: Any, fn: Any) -> float:
    """GPU milliseconds per call of ``fn`` on ``stream``: one warm-up call, then a CUDA graph of a few calls timed
    as one launch, so host gaps between the calls' launches do not count (replayed plans have none); timed
    directly where the calls cannot be captured."""
    fn()
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    graph = None
    pool = cupy.cuda.MemoryPool()  # scratch taken while capturing lives as long as the graph
    with cupy.cuda.using_allocator(pool.malloc):
        stream.begin_capture(cupy.cuda.runtime.streamCaptureModeRelaxed)
        try:
            for _ in range(TIMED):
                fn()
        finally:
            try:
                graph = stream.end_capture()
            except Exception:
                graph = None
        if graph is not None:
            graph.launch(stream)
        start.record(stream)
        if graph is not None:
            graph.launch(stream)
        else:
            for _ in range(TIMED):
                fn()
        end.record(stream)
        end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end) / TIMED


def scratch(ins: Any, outs: Any) -> tuple[list[Any], Any]:
    """Random CuPy arrays of the call's input types and an empty one of its first output's (on the current stream
    and allocator): what a tuned call runs on."""
    rng = cupy.random.default_rng(0)
    arrays = [rng.standard_normal(t.shape, dtype=np.float32).astype(t.dtype) for t in ins]
    return arrays, cupy.empty(outs[0].shape, outs[0].dtype)
