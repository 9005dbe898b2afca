import sys
import torch
torch.ones(1000, 1000) @ torch.ones(1000, 1000)
from benchmarks.host_vs_onnxruntime import main
sys.exit(main(sys.argv[1:]))
