"""Where a NVIDIA Vulkan run's time goes when runs take ~11 ms: a small transformer plan on vulkan:0 run for a while,
each run's wall time, and the time inside vkWaitSemaphores (VulkanDevice.wait_value) and queue submission."""
import sys, time, collections
import numpy as np
import devicelayer as dl
import devicelayer.onnx as dlo
from devicelayer.backends.vulkan import backend as vb

acc = collections.Counter()
for name in ("wait_value", "_queue_submit"):
    orig = getattr(vb.VulkanDevice, name)
    def timed(self, *a, _o=orig, _n=name, **k):
        t0 = time.perf_counter()
        try:
            return _o(self, *a, **k)
        finally:
            acc[_n] += time.perf_counter() - t0
            acc[_n + "_n"] += 1
    setattr(vb.VulkanDevice, name, timed)

path, seconds = sys.argv[1], float(sys.argv[2])
z = np.load(path.replace(".onnx", ".npz"))
key = sorted({k.rsplit("_", 1)[0] for k in z.files})[-1]
import onnxruntime as ort
names = [i.name for i in ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs()]
prefix = sorted({k[: k.index(names[0]) - 1] for k in z.files if k.endswith(names[0])})[-1]
feeds = {n: z[f"{prefix}_{n}"] for n in names}
plan = dlo.load(path).compile(["vulkan:0"])
for _ in range(20):
    plan.run_numpy(feeds)
acc.clear()
times = []
end = time.perf_counter() + seconds
while time.perf_counter() < end:
    t0 = time.perf_counter()
    plan.run_numpy(feeds)
    times.append(time.perf_counter() - t0)
t = np.array(times) * 1e3
print(f"{path}: {len(t)} runs, ms: median {np.median(t):.3f}, p10 {np.percentile(t,10):.3f}, p90 {np.percentile(t,90):.3f}, "
      f"max {t.max():.3f}; runs over 5 ms: {(t > 5).sum()}; first slow run at index "
      f"{int(np.argmax(t > 5)) if (t > 5).any() else -1}")
print("  in wait_value: %.1f ms over %d calls; in queue submit: %.1f ms over %d calls; total %.1f ms" % (
    acc["wait_value"] * 1e3, acc["wait_value_n"], acc["_queue_submit"] * 1e3, acc["_queue_submit_n"], t.sum()))
