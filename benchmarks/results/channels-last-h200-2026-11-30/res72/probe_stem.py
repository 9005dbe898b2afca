"""ResNet-50's stem (float16, b16) channels-last: the conv op's own tuning against a layer made and found directly;
every algorithm cuDNN's search reports."""
import ctypes, numpy as np, cupy
import devicelayer as dl
from devicelayer.kernels.op import TensorType
from backends.cuda import dnn as D
from backends.cuda.timing import gpu_ms
dev = dl.device("cuda:0")
op = dev.vendor_op("conv")
t = np.dtype(np.float16)
ins = [TensorType((16, 3, 224, 224), t), TensorType((64, 3, 7, 7), t), TensorType((64,), t)]
outs = [TensorType((16, 64, 112, 112), t)]
attrs = {"pads": [3, 3, 3, 3], "strides": [2, 2], "dilations": [1, 1], "group": 1, "activation": "relu"}
print("route nchw", op.route(ins, outs, attrs)[0], "last", op.route(ins, outs, attrs, last=True))
print(op.describe(ins, outs, attrs))
layer = op._layer(ins, outs, attrs, last=True)
print("layer algo", layer.algo, "fused", layer.fused)
dnn = dev._dnn()
with dev.cu_device, cupy.cuda.using_allocator(dev.pool.cupy_pool.malloc):
    stream = cupy.cuda.Stream(non_blocking=True)
    x = cupy.random.standard_normal(ins[0].shape, dtype=np.float32).astype(t)
    w = cupy.random.standard_normal(ins[1].shape, dtype=np.float32).astype(t)
    b = cupy.random.standard_normal((64,), dtype=np.float32).astype(t)
    y = cupy.empty(outs[0].shape, t)
    ws = cupy.empty(D.WORKSPACE_LIMIT, np.uint8)
    perf = (D._AlgoPerf * D._ALGOS)()
    count = ctypes.c_int()
    dnn.lib.cudnnSetStream(dnn.handle, ctypes.c_void_p(stream.ptr))
    st = dnn.lib.cudnnFindConvolutionForwardAlgorithmEx(dnn.handle, layer.x, x.data.ptr, layer.w, w.data.ptr, layer.conv,
        layer.y, y.data.ptr, D._ALGOS, ctypes.byref(count), perf, ws.data.ptr, ws.nbytes)
    print("find status", st, [(p.algo, p.status, round(p.time, 4), p.memory, p.mathType) for p in perf[:count.value]])
    for p in perf[:count.value]:
        if p.status:
            continue
        layer.set_pick(p.algo, p.memory)
        for fused in (True, False):
            layer.fused = fused
            ms = gpu_ms(stream, lambda: dnn.forward(layer, stream.ptr, x.data.ptr, w.data.ptr, b.data.ptr, y.data.ptr, ws.data.ptr, 0))
            print(f"  algo {p.algo} fused {fused}: {ms:.4f} ms")
