"""run_numpy of one plan with its CUDA pool lending output arrays and not, alternating blocks in one process."""
import statistics, sys, time
import devicelayer as dl
from devicelayer.onnx import load
from benchmarks import cuda_item_times as cit

arch, dtype, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
class A: model = None
A.arch, A.dtype, A.batch = arch, dtype, batch
data, feeds = cit._model(A)
dev = dl.device("cuda:0")
plan = load(data).compile([dev])
pool_type = type(dev.pool)
times = {True: [], False: []}
for rnd in range(8):
    for lend in ((True, False) if rnd % 2 else (False, True)):
        pool_type.lends_host_arrays = lend
        for _ in range(5):
            out = plan.run_numpy(feeds)
        t0 = time.perf_counter()
        for _ in range(40):
            out = plan.run_numpy(feeds)
        times[lend].append((time.perf_counter() - t0) / 40 * 1e3)
pool_type.lends_host_arrays = True
print(f"{arch} {dtype} b{batch} outputs", {k: v.nbytes for k, v in out.items()})
for lend, ts in times.items():
    print(f"lending {lend}: median {statistics.median(ts):.3f} ms, range {min(ts):.3f}-{max(ts):.3f}")
