"""Where PyTorch's time goes on a CNN: torch.compile (reduce-overhead) and eager channels-last, kernel by kernel
(torch.profiler), GPU time of one call with inputs already on the device.  python3 .gpu/probe_torch.py ARCH DTYPE BATCH"""
import sys, time, statistics, torch
from torch.profiler import profile, ProfilerActivity
from benchmarks.gpu_vs_torch import _arch, _batched

arch, dtype, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
module, example, names = _arch(arch).build()
tdt = getattr(torch, dtype)
module = module.cuda().eval().to(tdt)
x = tuple(t.to(tdt).cuda() for t in _batched(example, batch, torch))

def gpu_ms(fn, n=30):
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)

def kernels(fn, label, top=30):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10): fn()
        torch.cuda.synchronize()
    ev = [e for e in prof.key_averages() if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0) > 0]
    tot = sum(getattr(e, "self_device_time_total", 0) for e in ev) / 10 / 1000
    cnt = sum(e.count for e in ev) / 10
    print(f"== {label}: {cnt:.0f} kernels a call, {tot:.3f} ms of kernel time a call, GPU time a call {gpu_ms(fn):.3f} ms", flush=True)
    for e in sorted(ev, key=lambda e: -getattr(e, "self_device_time_total", 0))[:top]:
        print(f"  {getattr(e,'self_device_time_total',0)/10/1000:8.3f} ms {e.count/10:5.0f}x  {e.key[:150]}")

with torch.no_grad():
    kernels(lambda: module(*x), f"{arch} {dtype} b{batch} eager NCHW", 12)
    cl = module.to(memory_format=torch.channels_last)
    xc = tuple(t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in x)
    kernels(lambda: cl(*xc), f"{arch} {dtype} b{batch} eager channels-last", 12)
    module = module.to(memory_format=torch.contiguous_format)
    comp = torch.compile(module, mode=sys.argv[4] if len(sys.argv) > 4 else "reduce-overhead")
    t0 = time.time()
    for _ in range(3): comp(*x)
    torch.cuda.synchronize()
    print(f"compile {time.time()-t0:.1f} s")
    kernels(lambda: comp(*x), f"{arch} {dtype} b{batch} torch.compile", 40)
