"""Where a transformer's batch-16 run goes, devicelayer (recorded items) against torch.compile (profiled kernels).
python3 .gpu/probe_b16.py ARCH DTYPE OUTDIR"""
import statistics, sys, time
import numpy as np
import torch
from benchmarks.gpu_vs_torch import _arch, _batched, _export, _checked, _float16_converted
from benchmarks.cuda_item_times import item_times
import devicelayer as dl
from devicelayer.onnx import load

arch, dtype, outdir = sys.argv[1], sys.argv[2], sys.argv[3]
batch = int(sys.argv[4]) if len(sys.argv) > 4 else 16
module, example, names = _arch(arch).build()
tdtype = getattr(torch, dtype)
module = module.cuda().eval()
example = _batched(example, batch, torch)
if dtype != "float32":
    module = module.to(tdtype)
    example = tuple(x.to(tdtype) if x.is_floating_point() else x for x in example)
host = [x.numpy() for x in example]
with torch.no_grad():
    data = _export(module, tuple(x.cuda() for x in example), names)
    if dtype == "float16" and _checked(data) is not None:
        data = _float16_converted(module, tuple(x.cuda() for x in example), names)
open(f"{outdir}/{arch}-{dtype}-b{batch}.onnx", "wb").write(data)
compiled = torch.compile(module, mode="reduce-overhead")
dev_ins = [torch.from_numpy(a).cuda() for a in host]
with torch.no_grad():
    for _ in range(5):
        compiled(*dev_ins)
    torch.cuda.synchronize()
    def gpu_only(fn, n=100):
        ts = []
        for _ in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); out = fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
        return statistics.median(ts)
    print(f"{arch} {dtype} b{batch}: torch.compile device-resident call {gpu_only(lambda: compiled(*dev_ins)):.3f} ms")
    def host_call():
        ins = [torch.from_numpy(a).to('cuda') for a in host]
        out = compiled(*ins); out = out[0] if isinstance(out, (tuple, list)) else out
        return out.float().cpu().numpy()
    ts = []
    for _ in range(200):
        t = time.perf_counter(); host_call(); ts.append(time.perf_counter() - t)
    print(f"  torch.compile host->host {statistics.median(ts)*1e3:.3f} ms")
    out0 = compiled(*dev_ins); out0 = out0[0] if isinstance(out0, (tuple, list)) else out0
    print(f"  output {tuple(out0.shape)} {out0.dtype}")
    t = time.perf_counter()
    for _ in range(200): out0.float().cpu()
    print(f"  torch output download alone {(time.perf_counter()-t)/200*1e3:.3f} ms")
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            compiled(*dev_ins)
        torch.cuda.synchronize()
    ka = prof.key_averages()
    rows = sorted([(k.key, k.count, getattr(k, 'device_time_total', getattr(k, 'cuda_time_total', 0))) for k in ka], key=lambda r: -r[2])
    total = sum(r[2] for r in rows)
    print(f"  torch.compile kernels: {sum(r[1] for r in rows)/20:.0f} per call, {total/20/1e3:.3f} ms per call")
    for k, c, t in rows[:30]:
        print(f"    {t/20/1e3:8.4f} ms  x{c/20:.0f}  {k[:110]}")
plan = load(data).compile([dl.device("cuda:0")])
feeds = dict(zip(names, host))
out = plan.run_numpy(feeds)
rows, graph_ms = item_times(plan, 5)
by = {}
for _, op, ms in rows:
    by.setdefault(op, []).append(ms)
print(f"  devicelayer: {len(rows)} items, sum {sum(r[2] for r in rows):.3f} ms, replayed graph {graph_ms:.3f} ms")
for op, v in sorted(by.items(), key=lambda kv: -sum(kv[1])):
    print(f"    {op:26s} {len(v):4d} {sum(v):8.3f} ms")
for label, op, ms in sorted(rows, key=lambda r: -r[2])[:30]:
    print(f"    {ms:8.4f} ms  {label[:150]}")
ts = []
for _ in range(200):
    t = time.perf_counter(); plan.run_numpy(feeds); ts.append(time.perf_counter() - t)
print(f"  devicelayer run_numpy {statistics.median(ts)*1e3:.3f} ms")
