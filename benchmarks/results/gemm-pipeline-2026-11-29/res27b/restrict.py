"""Run a module (argv[1:]) with GLSL storage buffers declared restrict where RESTRICT=1 (as CUDA's and OpenCL's
parameters already are: __restrict__, restrict)."""
import os
import runpy
import sys

from devicelayer.kernels import render

if os.environ.get("RESTRICT") == "1":
    real = render.render_glsl

    def render_glsl(spec, float64=False):
        text = real(spec, float64)
        return text.replace("readonly buffer", "readonly restrict buffer").replace(
            "writeonly buffer", "writeonly restrict buffer").replace(") buffer DL_", ") restrict buffer DL_")
    render.render_glsl = render_glsl
    render.RENDERERS["glsl"] = render_glsl
sys.argv = sys.argv[1:]
sys.path.insert(0, os.getcwd())
runpy.run_module(sys.argv[0], run_name="__main__")
