"""Run benchmarks.host_vs_onnxruntime with the host's SMALL_FLOPS (convolutions, products) set to argv[1]."""
import sys
sys.path.insert(0, ".")
import devicelayer.backends.host.conv as conv
import devicelayer.backends.host.gemm as gemm
conv.SMALL_FLOPS = gemm.SMALL_FLOPS = float(sys.argv[1])
from benchmarks.host_vs_onnxruntime import main
sys.exit(main(sys.argv[2:]))
