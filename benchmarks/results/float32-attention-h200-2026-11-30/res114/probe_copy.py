"""hostcopy.copy_into into pinned memory at the sizes of a model's inputs, on 1-4 threads (PARALLEL_LEAST and
PIECE_LEAST lowered so smaller copies split too)."""
import statistics, time
import numpy as np
import cupy
from devicelayer import hostcopy

def med(f, n=200):
    for _ in range(5): f()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); ts.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(ts)

for nbytes in (600_000, 1_200_000, 2_457_600, 5_644_800, 9_633_792):
    src = np.random.default_rng(0).standard_normal(nbytes // 4).astype(np.float32)
    mem = cupy.cuda.alloc_pinned_memory(nbytes)
    dst = np.ndarray(src.shape, np.float32, buffer=mem)
    row = []
    for threads in (1, 2, 3, 4):
        hostcopy.MOST_THREADS, hostcopy.PARALLEL_LEAST, hostcopy.PIECE_LEAST = threads, 1, nbytes // threads
        row.append(f"{threads}: {med(lambda: hostcopy.copy_into(dst, src)):.0f} us")
    print(f"{nbytes / 1e6:.2f} MB ->", ", ".join(row), flush=True)
