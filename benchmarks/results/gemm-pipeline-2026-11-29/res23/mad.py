"""Run a module (argv[1:]) with NVIDIA's OpenCL kernels built with -cl-mad-enable where MAD=1 (contracted
multiply-adds, as CUDA's and Vulkan's compilers make them)."""
import os
import runpy
import sys

from devicelayer.backends import opencl

if os.environ.get("MAD") == "1":
    real = opencl.OpenCLDevice._build

    def _build(self, source, entry, options):
        extra = ("-cl-mad-enable",) if "NVIDIA" in self.info.vendor.upper() or "NVIDIA" in self.info.name.upper() else ()
        return real(self, source, entry, tuple(options) + extra)
    opencl.OpenCLDevice._build = _build
sys.argv = sys.argv[1:]
sys.path.insert(0, os.getcwd())
runpy.run_module(sys.argv[0], run_name="__main__")
