"""cuDNN convolutions of ResNet-50's layer geometries in each storage layout: where channels-last pays.

    python -m benchmarks.cudnn_layouts [--dtype float16] [--batch 16] [--out DIR]

Each geometry (with bias and ReLU, as a folded ResNet layer runs) is built through the CUDA backend's cuDNN
layer in five forms: NCHW with bias and ReLU as separate cuDNN calls, NCHW fused, everything channels-last,
NCHW input with a channels-last output, and channels-last activations with NCHW filters. Each form gets cuDNN's
timed algorithm search, then its GPU time per call (a captured graph of calls). A form cuDNN refuses is reported
as such. Output: per geometry and form, microseconds, and the sum over ResNet-50's convolutions.
"""

from __future__ import annotations

import argparse

import numpy as np

from benchmarks.common import write_result

#: (C_in, H, M, k, stride, repeats in ResNet-50): the convolutions of torchvision's ResNet-50 at 224x224
RESNET50 = [(3, 224, 64, 7, 2, 1), (64, 56, 64, 1, 1, 3), (64, 56, 64, 3, 1, 3), (64, 56, 256, 1, 1, 4),
            (256, 56, 64, 1, 1, 2), (256, 56, 128, 1, 1, 1), (128, 56, 128, 3, 2, 1), (128, 28, 512, 1, 1, 4),
            (256, 56, 512, 1, 2, 1), (512, 28, 128, 1, 1, 3), (128, 28, 128, 3, 1, 3), (512, 28, 256, 1, 1, 1),
            (256, 28, 256, 3, 2, 1), (256, 14, 1024, 1, 1, 6), (512, 28, 1024, 1, 2, 1), (1024, 14, 256, 1, 1, 5),
            (256, 14, 256, 3, 1, 5), (1024, 14, 512, 1, 1, 1), (512, 14, 512, 3, 2, 1), (512, 7, 2048, 1, 1, 3),
            (1024, 14, 2048, 1, 2, 1), (2048, 7, 512, 1, 1, 2), (512, 7, 512, 3, 1, 2)]
FORMS = {"nchw unfused": (False, False, False), "nchw fused": (False, False, False),
         "nhwc": (True, True, True), "nchw -> nhwc": (False, True, True), "nhwc, nchw filters": (True, False, True)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    import cupy

    import devicelayer as dl
    from devicelayer.backends.cuda import dnn as cuda_dnn, timing as cuda_timing

    dev = dl.device("cuda:0")
    dnn = dev._dnn()
    dtype = np.dtype(args.dtype)
    rows, sums = [], {f: 0.0 for f in FORMS}
    stream = cupy.cuda.Stream(non_blocking=True)
    with dev.cu_device, stream:
        scratch = cupy.empty(cuda_dnn.WORKSPACE_LIMIT, np.uint8)
        for c, h, m, k, s, reps in RESNET50:
            n, p = args.batch, k // 2
            o = (h + 2 * p - k) // s + 1
            x = cupy.random.standard_normal((n, c, h, h), np.float32).astype(dtype)
            w = cupy.random.standard_normal((m, c, k, k), np.float32).astype(dtype)
            b = cupy.random.standard_normal((m,), np.float32).astype(dtype)
            y = cupy.empty((n, m, o, o), dtype)
            row = {"geometry": f"{c}x{h}x{h} -> {m}x{o}x{o}, {k}x{k}/{s}", "repeats": reps}
            for form, lasts in FORMS.items():
                try:
                    layer = cuda_dnn._Layer(dnn, (dtype, (n, c, h, h), (m, c, k, k), (n, m, o, o), (p, p), (s, s),
                                                  (1, 1), 1, True, True, False, lasts))
                    if form == "nchw unfused":
                        layer.fused = False
                    dnn.find(layer, stream.ptr, x.data.ptr, w.data.ptr, y.data.ptr, scratch.data.ptr, scratch.nbytes)
                    ws = cupy.empty(max(layer.workspace, 1), np.uint8)
                    us = 1e3 * cuda_timing.gpu_ms(stream, lambda: dnn.forward(
                        layer, stream.ptr, x.data.ptr, w.data.ptr, b.data.ptr, y.data.ptr, ws.data.ptr))
                    row[form] = {"us": us, "algo": layer.algo, "fused": layer.fused}
                    sums[form] += us * reps
                    layer.release()
                except cuda_dnn.DnnError as exc:
                    row[form] = {"error": str(exc)}
                    sums[form] = float("nan")
            rows.append(row)
            print(row["geometry"], {f: (round(v["us"], 1) if "us" in v else v["error"][:60]) for f, v in row.items()
                                    if isinstance(v, dict)}, flush=True)
    print(f"sum over ResNet-50's convolutions ({args.dtype}, batch {args.batch}), us:",
          {f: round(v, 1) for f, v in sums.items()})
    if args.out:
        write_result(args.out, "cudnn-layouts", {"dtype": args.dtype, "batch": args.batch, "rows": rows,
                                                 "sums_us": sums, "cudnn": cuda_dnn.version()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
