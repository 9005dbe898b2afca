"""Top CUDA kernels of PyTorch eager for a benchmark arch (torch.profiler), to compare with cuda_item_times."""
import sys
import torch
from benchmarks import gpu_vs_torch as g

name, batch, dtype = sys.argv[1], int(sys.argv[2]), sys.argv[3]
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
module, example, names = g._arch(name).build()
dt = getattr(torch, dtype)
module = module.to("cuda", dt).eval()
example = tuple(x.to("cuda", dt if x.is_floating_point() else x.dtype) for x in g._batched(example, batch, torch))
with torch.no_grad():
    for _ in range(5):
        module(*example)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            module(*example)
        torch.cuda.synchronize()
print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=90))
