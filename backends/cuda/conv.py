"""Convolutions on CUDA devices through vendor libraries: cuDNN, or im2col + a cuBLAS strided-batched GEMM.

Where cuDNN is installed each layer geometry is tuned once, when a plan is
made (as ONNX Runtime's exhaustive cuDNN search and PyTorch's
``cudnn.benchmark`` do): cuDNN's timed search picks its algorithm, then the
whole layer (bias and ReLU included) is timed through cuDNN and through
im2col + cuBLAS on scratch buffers, as a captured CUDA graph so that only GPU
time counts, and the faster runs it from then on. The choice (route and cuDNN
algorithm) is kept in the disk cache (``devicelayer.tuning``), so a later
process on the same GPU, driver and libraries takes it without timing. A
geometry first seen while a stream is captured, with no stored choice, is not
timed (cuDNN's heuristic choice runs it).
"""

from __future__ import annotations

import math
from typing import Any

import cupy
import numpy as np

from . import blas as cuda_blas, depthwise_conv, dnn as cuda_dnn, pointwise_conv
from .backend import _address, _cupy_at as _at, _Vendor
from .timing import gpu_ms as _time, scratch as scratch_arrays

_COL_BYTES = 256 << 20  # the most im2col scratch one convolution takes at once
_kernels: dict[str, Any] = {}


def _im2col() -> Any:
    """col (K, P) of one image: x at each kernel position and output position, zero where padded (1-3-D)."""
    if "im2col" not in _kernels:
        _kernels["im2col"] = cupy.ElementwiseKernel(
            "raw T x, int64 base, int32 C, int32 ID, int32 IH, int32 IW, int32 KD, int32 KH, int32 KW, int32 OD, "
            "int32 OH, int32 OW, int32 SD, int32 SH, int32 SW, int32 PD, int32 PH, int32 PW, int32 DD, int32 DH, "
            "int32 DW",
            "T col",
            """
            unsigned int r = (unsigned int)i;  // a scratch buffer holds under 2**31 elements: 32-bit index math
            int ow = r % OW; r /= OW; int oh = r % OH; r /= OH; int od = r % OD; r /= OD;
            int kw = r % KW; r /= KW; int kh = r % KH; r /= KH; int kd = r % KD; r /= KD;
            long long c = r % C, n = r / C;
            int zd = od * SD - PD + kd * DD, zh = oh * SH - PH + kh * DH, zw = ow * SW - PW + kw * DW;
            bool inside = zd >= 0 && zd < ID && zh >= 0 && zh < IH && zw >= 0 && zw < IW;
            col = inside ? x[base + (((n * C + c) * ID + zd) * IH + zh) * IW + zw] : (T)0;
            """, "devicelayer_im2col")
    return _kernels["im2col"]


def _epilogue() -> Any:
    """y += bias per output channel (when given), y += z (when given), then ReLU (when asked; NaN stays NaN),
    in one pass; y (N, M, P) or, ``last``, channels-last (N, P, M)."""
    if "epilogue" not in _kernels:
        _kernels["epilogue"] = cupy.ElementwiseKernel(
            "raw T b, raw T z, int32 P, int32 M, int32 has_bias, int32 has_z, int32 relu, int32 last", "T y",
            """
            T v = has_bias ? (T)(y + b[last ? i % M : (i / P) % M]) : y;
            if (has_z) v = v + z[i];
            y = (relu && v <= (T)0) ? (T)0 : v;
            """, "devicelayer_conv_epilogue")
    return _kernels["epilogue"]


def _relayout() -> Any:
    """y = x from (N, C, S) to channels-last (N, S, C), or back (``to_last`` 0)."""
    if "relayout" not in _kernels:
        _kernels["relayout"] = cupy.ElementwiseKernel(
            "raw T x, int64 C, int64 S, int32 to_last", "T y",
            """
            long long r = i;
            if (to_last) { long long c = r % C; r /= C; long long s = r % S; r /= S; y = x[(r * C + c) * S + s]; }
            else { long long s = r % S; r /= S; long long c = r % C; r /= C; y = x[(r * S + s) * C + c]; }
            """, "devicelayer_conv_relayout")
    return _kernels["relayout"]


def relayout(index: int, t: Any, src: int, dst: int, to_last: bool) -> None:
    """Tensor ``t`` (N, C, spatial...) at device address ``src`` copied to ``dst`` channels-last, or back to NCHW
    (the current stream)."""
    _relayout()(_at(src, (t.size,), t.dtype, index), np.int64(t.shape[1]), np.int64(math.prod(t.shape[2:])),
                np.int32(to_last), _at(dst, (t.size,), t.dtype, index))


def plain_activation(attrs: dict) -> bool:
    """Whether a conv call's activation is none or ReLU: the only ones cuDNN's and the epilogue's calls apply (the
    op's kernels take any other in their own epilogue)."""
    return attrs.get("activation") in (None, "relu")


def epilogue(index: int, ins: Any, outs: Any, attrs: dict, b: int, y: int, z: int, last: bool = False) -> None:
    """Bias, summand and ReLU of a convolution on y (device addresses; the current stream), where it has any."""
    xt, yt = ins[0], outs[0]
    relu = attrs.get("activation") == "relu"
    if len(ins) >= 3 or relu:
        M, P = yt.shape[1], math.prod(yt.shape[2:])
        one = _at(y, (1,), xt.dtype, index)  # stands in for an absent operand (never read)
        bias = _at(b, ins[2].shape, xt.dtype, index) if len(ins) >= 3 else one
        summand = _at(z, yt.shape, xt.dtype, index) if len(ins) == 4 else one
        _epilogue()(bias, summand, np.int32(P), np.int32(M), np.int32(len(ins) >= 3), np.int32(len(ins) == 4),
                    np.int32(relu), np.int32(last), _at(y, yt.shape, yt.dtype, index))


def im2col_conv(dev: Any, stream: Any, ins: Any, outs: Any, attrs: dict, x: int, w: int, b: int, y: int,
                z: int = 0) -> None:
    """Y[n] (M, P) = W (M, K) @ col[n] (K, P) + bias + Z, ReLU: im2col into bounded scratch, one strided batch of
    GEMMs per scratch-full of images (none for 1x1 stride-1 layers); arguments are device addresses."""
    index = dev.index
    xt, wt, yt = ins[0], ins[1], outs[0]
    nd = len(xt.shape) - 2
    N, C, M = xt.shape[0], xt.shape[1], wt.shape[0]
    pad3 = (1,) * (3 - nd)
    in3, k3, out3 = pad3 + xt.shape[2:], pad3 + wt.shape[2:], pad3 + yt.shape[2:]
    s3, d3 = pad3 + tuple(attrs["strides"]), pad3 + tuple(attrs["dilations"])
    p3 = (0,) * (3 - nd) + tuple(attrs["pads"][:nd])
    K, P, image = C * math.prod(k3), math.prod(out3), C * math.prod(in3)
    pointwise = all(k == 1 for k in k3) and all(s == 1 for s in s3) and not any(attrs["pads"])
    blas, size = dev._blas(), xt.dtype.itemsize
    tf32 = bool(attrs.get("allow_tf32"))
    with stream:
        if pointwise:  # Y[n] (M, P) = W (M, C) @ X[n] (C, P): one strided batch over the images
            blas.gemm(stream.ptr, xt.dtype, False, False, M, P, K, 1.0, w, K, 0, x, P, image, 0.0, y, P, M * P, N,
                      tf32)
        else:
            per = max(1, min(N, _COL_BYTES // (K * P * size)))
            col = cupy.empty((per, K, P), xt.dtype)
            xs = _at(x, (xt.size,), xt.dtype, index)  # 1-D: raw indexing is plain offsets
            for n0 in range(0, N, per):
                nb = min(per, N - n0)
                _im2col()(xs, n0 * image, C, *in3, *k3, *out3, *s3, *p3, *d3, col[:nb])
                blas.gemm(stream.ptr, xt.dtype, False, False, M, P, K, 1.0, w, K, 0, col.data.ptr, P, K * P, 0.0,
                          y + n0 * M * P * size, P, M * P, nb, tf32)
        epilogue(index, ins, outs, attrs, b, y, z)


def _addresses(in_bufs: Any, out_bufs: Any) -> tuple[int, int, int, int, int]:
    """x, w, bias, y, z (0 for an absent operand)."""
    return (_address(in_bufs[0]), _address(in_bufs[1]), _address(in_bufs[2]) if len(in_bufs) >= 3 else 0,
            _address(out_bufs[0]), _address(in_bufs[3]) if len(in_bufs) == 4 else 0)


class Im2colConv(_Vendor):
    """Ungrouped convolution as im2col + cuBLAS strided-batched GEMMs."""

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Float convolutions without groups (grouped and depthwise ones use the op's kernels), with no activation
        or ReLU (the epilogue applies those alone)."""
        col = math.prod(ins[1].shape[1:]) * math.prod(outs[0].shape[2:])  # one image's im2col elements
        return (attrs["group"] == 1 and ins[0].dtype in cuda_blas.DTYPES and col < 2**31 and plain_activation(attrs)
                and all(t.size > 0 for t in (*ins, *outs)))

    def enqueue(self, stream: Any, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> None:
        """Queue the convolution on ``stream`` (the device is current)."""
        im2col_conv(self.dev, stream, ins, outs, attrs, *_addresses(in_bufs, out_bufs))


class DnnConv(Im2colConv):
    """Convolution through cuDNN or im2col + cuBLAS, whichever ran the layer faster when it was tuned; layers
    cuDNN's legacy API cannot describe (asymmetric pads, tensors of 2**31 elements or more) use im2col.

    2-D float16 and float32 layers are also tuned on channels-last activations: through cuDNN with channels-last
    filters, for a 1x1 layer of stride 1 without padding or groups as one cuBLASLt product over the
    activations' rows (N * H * W, C) with bias, summand and ReLU in its epilogue, and for a depthwise layer
    through the channels-last depthwise kernel (``depthwise_conv``). A layer that runs faster so
    offers that layout to its neighbours in a plan (``private_layout``): where a plan keeps a tensor channels-last
    between two such layers, neither converts it; an end the plan keeps NCHW is converted in one pass."""

    #: the device-private layout (activations (N, H, W, C); the layer's filters (M, kH, kW, C / group))
    private_layout = "cuda-channels-last"

    def __init__(self, dev: Any, name: str, library: str,
                 binding: tuple[frozenset[int], bool] = (frozenset(), False), weights: Any = None) -> None:
        super().__init__(dev, name, library)
        self._library, self._binding = library, binding
        self._weights = weights  # the filters where a plan holds them constant (host array), else None
        self._filters_last: Any = None  # those filters channels-last on the device, made when a plan binds them
        self._taps: Any = None  # depthwise filters as the depthwise kernel reads them, made alike

    # -- layouts a plan negotiates ------------------------------------------------------------
    def layout_input(self, index: int) -> bool:
        """The input and the summand can be read channels-last."""
        return index in (0, 3)

    def offers_layout(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Whether this call runs faster channels-last (tuned once per geometry)."""
        return self.route(ins, outs, attrs, last=True)[0] in LAST_ROUTES

    def specialize(self, ins: Any, outs: Any, attrs: dict, constants: Any) -> "DnnConv":
        """This op knowing its constant filters (a plan relays them channels-last once, where it binds that)."""
        w = constants.get(1)
        return self if w is None else DnnConv(self.dev, self.name, self._library, self._binding, np.asarray(w))

    def with_layout(self, in_last: frozenset[int], out_last: bool) -> "DnnConv":
        """This op reading inputs ``in_last`` and writing its output channels-last (``out_last``)."""
        op = DnnConv(self.dev, self.name, self._library, (frozenset(in_last), bool(out_last)), self._weights)
        w = self._weights
        if op._last and w is not None and w.ndim == 4 and w.shape[2:] != (1, 1):
            dev = self.dev
            with dev._enter(f"prepare {self.label}"), cupy.cuda.using_allocator(dev.pool.cupy_pool.malloc):
                op._filters_last = cupy.asarray(np.ascontiguousarray(np.moveaxis(w, 1, -1)))
                if w.shape[1] == 1:
                    op._taps = cupy.asarray(depthwise_conv.relaid(w))
        return op

    @property
    def _last(self) -> bool:
        """Whether this op runs its layers channels-last (some end of it is)."""
        return bool(self._binding[0] or self._binding[1])

    def _filters(self, stream: Any, t: Any, w: int, keep: list) -> int:
        """The address of the filters channels-last (``t`` their type, ``w`` their NCHW address): as they are for
        1x1 layers, the plan's prepared copy, or else relaid into scratch on ``stream``."""
        if all(k == 1 for k in t.shape[2:]):
            return w
        if self._filters_last is not None and tuple(self._filters_last.shape) == (t.shape[0], *t.shape[2:],
                                                                                    t.shape[1]):
            return int(self._filters_last.data.ptr)
        with stream:
            out = cupy.empty(t.size, t.dtype)
            keep.append(out)
            relayout(self.dev.index, t, w, out.data.ptr, True)
        return int(out.data.ptr)

    def _depthwise_taps(self, stream: Any, t: Any, w: int, keep: list) -> int:
        """The address of depthwise filters as the depthwise kernel reads them: the plan's prepared copy, or else
        relaid into scratch on ``stream``."""
        if self._taps is not None and tuple(self._taps.shape) == (math.prod(t.shape[2:]), t.shape[0]):
            return int(self._taps.data.ptr)
        return depthwise_conv.taps(self.dev, stream, t, w, keep)

    # -- routes -------------------------------------------------------------------------------
    def _layer(self, ins: Any, outs: Any, attrs: dict, last: bool = False) -> "cuda_dnn._Layer | None":
        """The cuDNN layer of this convolution (channels-last activations where ``last``), None when cuDNN
        cannot run it."""
        xt, wt, yt = ins[0], ins[1], outs[0]
        nd = len(xt.shape) - 2
        pads = tuple(attrs["pads"])
        if (xt.dtype not in cuda_dnn.DTYPES or pads[:nd] != pads[nd:] or not 1 <= nd <= 3
                or any(t.size == 0 or t.size > cuda_dnn.ELEMENT_LIMIT for t in (*ins, *outs))):
            return None
        if last and (nd != 2 or xt.dtype not in LAST_DTYPES):
            return None
        lift = (1,) if nd == 1 else ()  # 1-D as 2-D with a height of one
        try:
            return self.dev._dnn().layer(
                xt.dtype, xt.shape[:2] + lift + xt.shape[2:], wt.shape[:2] + lift + wt.shape[2:],
                yt.shape[:2] + lift + yt.shape[2:], ((0,) + pads[:1]) if nd == 1 else pads[:nd],
                lift + tuple(attrs["strides"]), lift + tuple(attrs["dilations"]), attrs["group"], len(ins) >= 3,
                attrs.get("activation") == "relu", len(ins) == 4, (last, last, last), bool(attrs.get("allow_tf32")))
        except cuda_dnn.DnnError as exc:
            self.dev._dnn().refuse(str(exc))
            return None

    def route(self, ins: Any, outs: Any, attrs: dict, tune: bool = True, last: bool = False) -> tuple[str, Any]:
        """("dnn", layer), ("im2col", None) or ("kernels", None): how this geometry runs (decided once); with
        ``last``, channels-last: ("dnn", layer) only where that beat the NCHW route, else ("nchw", None)."""
        key = _key(ins, outs, attrs, last)
        routes = self.dev._conv_routes
        found = routes.get(key)
        if found is not None:
            return found[:2]
        if last:
            return self._route_last(key, ins, outs, attrs, tune)
        layer = self._layer(ins, outs, attrs)
        col = super().accepts(ins, outs, attrs)
        if layer is None:
            found = ("im2col" if col else "kernels", None, {})
        else:
            found = self._stored(key, layer, col)
            if found is None and not tune:
                try:
                    layer.pick()  # cuDNN's heuristic choice
                    return ("dnn", layer)  # not kept: a later plan tunes it
                except cuda_dnn.DnnError as exc:  # no algorithm within the scratch limit
                    self.dev._dnn().refuse(str(exc))
                    found = ("im2col" if col else "kernels", None, {})
            elif found is None:
                found = self._tune(ins, outs, attrs, layer, col)
                self._store(key, found)
        routes[key] = found
        return found[:2]

    def _route_last(self, key: tuple, ins: Any, outs: Any, attrs: dict, tune: bool) -> tuple[str, Any]:
        """The channels-last route of a geometry: cuDNN's, the 1x1 product's (``pointwise_conv``) or the depthwise
        kernel's (``depthwise_conv``), whichever ran faster, where that beat the NCHW route's best."""
        layer = self._layer(ins, outs, attrs, last=True)
        nchw = self.route(ins, outs, attrs, tune)
        if layer is None or nchw[0] == "kernels":
            found: tuple[str, Any, dict] = ("nchw", None, {})
        else:
            found = self._stored(key, layer, False, ins, outs, attrs) or (None, None, {})
            if found[0] is None:
                if not tune:
                    return ("nchw", None)
                found = self._tune(ins, outs, attrs, layer, False, last=True)
                faster = found[0] in LAST_ROUTES and found[2].get(found[0], 1e30) < routes_best(self.dev, key[:-1])
                found = found if faster else ("nchw", None, found[2])
                self._store(key, found)
        self.dev._conv_routes[key] = found
        return found[:2]

    def _stored(self, key: tuple, layer: Any, col: bool, ins: Any = None, outs: Any = None,
                attrs: dict | None = None) -> tuple[str, Any, dict] | None:
        """The route an earlier process measured for this geometry (the disk cache), where it still applies
        (``ins``, ``outs`` and ``attrs``: the call, for a stored 1x1 product or depthwise choice)."""
        stored = self.dev._tuned(TUNED_KIND).get(repr(key))
        if not isinstance(stored, dict):
            return None
        how = stored.get("how")
        saved = stored.get("times_ms") if isinstance(stored.get("times_ms"), dict) else {}
        times = {"stored": True, **{k: float(v) for k, v in saved.items()
                                    if isinstance(v, (int, float)) and not isinstance(v, bool)}}
        if how == "im2col" and col:
            return ("im2col", None, times)
        if how == "nchw":
            return ("nchw", None, times)
        if how == "dnn" and self.dev._dnn().adopt(layer, stored.get("algo"), stored.get("workspace")):
            layer.fused = layer.fused and bool(stored.get("fused", True))
            return ("dnn", layer, times)
        if how == "gemm" and ins is not None and attrs is not None:
            described = pointwise_conv.product(self.dev, ins, attrs)
            choice = described.recall(stored) if described is not None else None
            return ("gemm", (described, choice), times) if choice is not None else None
        choice = stored.get("choice")
        if (how == "direct" and ins is not None and attrs is not None and depthwise_conv.takes(ins, outs, attrs)
                and isinstance(choice, list) and tuple(choice) in depthwise_conv.CHOICES):
            return ("direct", tuple(choice), times)
        return None

    def _store(self, key: tuple, found: tuple[str, Any, dict]) -> None:
        """Keep a measured route for later processes (the kernels route needs no measuring: not kept)."""
        how, layer, times = found
        if how in ("dnn", "im2col", "nchw", "gemm", "direct"):
            extra: dict = ({"algo": layer.algo, "workspace": layer.workspace, "fused": layer.fused} if how == "dnn"
                           else {})
            if how == "gemm":
                described, choice = layer
                extra = described.record(choice)
            if how == "direct":
                extra = {"choice": list(layer)}
            measured = {k: v for k, v in times.items() if k != "stored"}
            self.dev._tuned(TUNED_KIND).put(repr(key), {"how": how, "times_ms": measured, **extra})

    def _tune(self, ins: Any, outs: Any, attrs: dict, layer: Any, col: bool,
              last: bool = False) -> tuple[str, Any, dict]:
        """Time the layer through cuDNN (after cuDNN's algorithm search; with its fused epilogue and with the
        epilogue apart, keeping the faster), through im2col (``col``) and, channels-last (``last``), as the 1x1
        product or through the depthwise kernel where it is one, on scratch buffers."""
        dev, dnn = self.dev, self.dev._dnn()
        times: dict[str, float] = {}
        product_choice = direct_choice = None
        with dev._enter(f"tune {self.label}"), cupy.cuda.using_allocator(dev.pool.cupy_pool.malloc):
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                arrays, y = scratch_arrays(ins, outs)
                x, w = arrays[0].data.ptr, arrays[1].data.ptr
                b, z = (arrays[k].data.ptr if len(ins) > k else 0 for k in (2, 3))
                try:
                    scratch = cupy.empty(cuda_dnn.WORKSPACE_LIMIT, np.uint8)
                except cupy.cuda.memory.OutOfMemoryError:
                    scratch = None
                try:
                    if scratch is not None:
                        dnn.find(layer, stream.ptr, x, w, y.data.ptr, scratch.data.ptr, scratch.nbytes)
                        del scratch
                    times["dnn"] = self._tune_dnn(stream, ins, outs, attrs, layer, x, w, b, y.data.ptr, z, last)
                except cuda_dnn.DnnError as exc:
                    dnn.refuse(str(exc))
                if last and pointwise_conv.takes(ins, outs, attrs):
                    described = pointwise_conv.product(dev, ins, attrs)
                    best = pointwise_conv.tune(stream, described, x, w, b, y.data.ptr, z) if described else None
                    if best is not None:
                        product_choice, times["gemm"] = (described, best[0]), best[1]
                if last and depthwise_conv.takes(ins, outs, attrs):
                    keep: list = []
                    w_taps = depthwise_conv.taps(dev, stream, ins[1], w, keep)
                    best = depthwise_conv.tune(stream, ins, outs, attrs, x, w_taps, b, y.data.ptr, z)
                    if best is not None:
                        direct_choice, times["direct"] = best
                if last:  # what converting an end from or to NCHW costs (a plan's NCHW neighbours pay it)
                    for end, t, a in (("x", ins[0], arrays[0]), ("y", outs[0], y)):
                        tmp = cupy.empty_like(a)
                        times[f"relayout {end}"] = _time(stream, lambda t=t, a=a, tmp=tmp: relayout(
                            dev.index, t, a.data.ptr, tmp.data.ptr, True))
                if col:
                    times["im2col"] = _time(stream, lambda: im2col_conv(dev, stream, ins, outs, attrs, x, w, b,
                                                                        y.data.ptr, z))
            stream.synchronize()
        routes = {k: v for k, v in times.items() if not k.startswith("relayout")}
        if not routes:
            return ("kernels", None, times)
        best_route = min(routes, key=routes.__getitem__)
        return (best_route, {"dnn": layer, "gemm": product_choice, "direct": direct_choice}.get(best_route), times)

    def _tune_dnn(self, stream: Any, ins: Any, outs: Any, attrs: dict, layer: Any, x: int, w: int, b: int, y: int,
                  z: int, last: bool) -> float:
        """GPU ms of the layer through cuDNN as it runs best: each of the ``DNN_TIMED`` algorithms its search
        ranked fastest (its ranking times the convolution alone), with the fused epilogue and with it apart; the
        layer keeps the fastest."""
        fusable, best, error = layer.fused, None, None
        for algo, memory in (layer.found or [layer.pick()])[:DNN_TIMED]:
            layer.set_pick(algo, memory)
            for fused in ((True, False) if fusable else (False,)):
                layer.fused = fused
                try:
                    ms = _time(stream, lambda: self._dnn_forward(stream, ins, outs, attrs, layer, x, w, b, y, z,
                                                                 last))
                except cuda_dnn.DnnError as exc:  # (an algorithm the search ranked that this call refuses)
                    error = exc
                    continue
                if best is None or ms < best[0]:
                    best = (ms, algo, memory, layer.fused)  # (cuDNN may refuse the fusion: then it ran apart)
        if best is None:
            raise error or cuda_dnn.DnnError("no cuDNN algorithm ran the layer")
        ms, algo, memory, layer.fused = best
        layer.set_pick(algo, memory)
        return ms

    def _dnn_forward(self, stream: Any, ins: Any, outs: Any, attrs: dict, layer: Any, x: int, w: int, b: int,
                     y: int, z: int, last: bool = False) -> None:
        with stream:  # scratch from the pool in use, ordered on this stream
            scratch = cupy.empty(layer.workspace, np.uint8) if layer.workspace else None
            if not self.dev._dnn().forward(layer, stream.ptr, x, w, b, y,
                                           scratch.data.ptr if scratch is not None else 0, z):
                epilogue(self.dev.index, ins, outs, attrs, b, y, z, last)

    def accepts(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Float convolutions cuDNN describes or im2col takes (tuned on first sight), with no activation or ReLU."""
        return plain_activation(attrs) and self.route(ins, outs, attrs)[0] != "kernels"

    def describe(self, ins: Any, outs: Any, attrs: dict) -> str:
        """How this call runs: route, cuDNN algorithm and epilogue or cuBLASLt candidate, the layouts of its ends,
        the tuned times."""
        last = self._last
        how, layer = self.route(ins, outs, attrs, tune=False, last=last)
        if how == "gemm":
            text = f"gemm channels-last, cuBLASLt candidate {layer[1]}"
        elif how == "direct":
            text = f"depthwise kernel channels-last, {layer[0]} channels x {layer[1]} columns a thread"
        else:
            text = f"{how}" + (f" algo {layer.algo}{' fused' if layer.fused else ''}" if layer is not None else "")
        if last:
            in_last, out_last = self._binding
            text += (f", channels-last ends: inputs {sorted(in_last)}{', output' if out_last else ''}; computed "
                     f"{'channels-last' if self._computes_last(ins, outs, attrs) else 'NCHW'}")
        times, times_last = (
            {k: round(v, 4) for k, v in _times(self.dev, _key(ins, outs, attrs, at)).items() if isinstance(v, float)}
            for at in (False, True))
        return f"{text}; tuned ms: {times} channels-last {times_last}"

    def enqueue(self, stream: Any, ins: Any, outs: Any, attrs: dict, in_bufs: Any, out_bufs: Any) -> None:
        x, w, b, y, z = _addresses(in_bufs, out_bufs)
        if self._last:
            how, layer = self.route(ins, outs, attrs, tune=False, last=True)
            if how not in LAST_ROUTES:  # (a plan binds the layout only where the route was tuned channels-last)
                raise cuda_dnn.DnnError(f"{self.label}: no channels-last route for this call")
            self._enqueue_last(stream, ins, outs, attrs, how, layer, x, w, b, y, z)
            return
        how, layer = self.route(ins, outs, attrs, tune=False)
        if how == "dnn":
            try:
                self._dnn_forward(stream, ins, outs, attrs, layer, x, w, b, y, z)
                return
            except cuda_dnn.DnnError as exc:
                if not super().accepts(ins, outs, attrs):  # (cuDNN checks its arguments before any work)
                    raise
                self.dev._dnn().refuse(str(exc))
        im2col_conv(self.dev, stream, ins, outs, attrs, x, w, b, y, z)

    def _computes_last(self, ins: Any, outs: Any, attrs: dict) -> bool:
        """Whether a call bound to channels-last ends computes channels-last (converting its NCHW ends) or NCHW
        (converting its channels-last ends): whichever the tuned times make cheaper."""
        in_last, out_last = self._binding
        how = self.route(ins, outs, attrs, tune=False, last=True)[0]
        last = _times(self.dev, _key(ins, outs, attrs, True))
        t_last, t_nchw = last.get(how), routes_best(self.dev, _key(ins, outs, attrs))
        rx, ry = last.get("relayout x"), last.get("relayout y")
        if not all(isinstance(v, float) for v in (t_last, rx, ry)) or t_nchw == float("inf"):
            return True
        private = [0 in in_last, len(ins) == 4 and 3 in in_last, out_last]
        sizes = [rx, ry if len(ins) == 4 else 0.0, ry]
        cost_last = t_last + sum(c for p, c in zip(private, sizes) if not p)
        cost_nchw = t_nchw + sum(c for p, c in zip(private, sizes) if p)
        return cost_last <= cost_nchw

    def _enqueue_last(self, stream: Any, ins: Any, outs: Any, attrs: dict, how: str, layer: Any, x: int, w: int,
                      b: int, y: int, z: int) -> None:
        """A call with channels-last ends: computed channels-last (on route ``how``) or NCHW
        (``_computes_last``), each end in the other layout converted through scratch in one pass."""
        in_last, out_last = self._binding
        compute_last = self._computes_last(ins, outs, attrs)
        index = self.dev.index
        with stream:
            keep: list = []

            def convert(address: int, t: Any, to_last: bool) -> int:
                out = cupy.empty(t.size, t.dtype)
                keep.append(out)
                relayout(index, t, address, out.data.ptr, to_last)
                return out.data.ptr

            if (0 in in_last) != compute_last:
                x = convert(x, ins[0], compute_last)
            if len(ins) == 4 and (3 in in_last) != compute_last:
                z = convert(z, ins[3], compute_last)
            target = y
            if out_last != compute_last:
                tmp = cupy.empty(outs[0].size, outs[0].dtype)
                keep.append(tmp)
                target = tmp.data.ptr
            if compute_last and how == "gemm":
                pointwise_conv.run(self.dev, stream, ins, outs, attrs, layer, x, w, b, target, z)
            elif compute_last and how == "direct":
                w_taps = self._depthwise_taps(stream, ins[1], w, keep)
                depthwise_conv.run(stream, ins, outs, attrs, layer, x, w_taps, b, target, z)
            elif compute_last:
                w_last = self._filters(stream, ins[1], w, keep)
                self._dnn_forward(stream, ins, outs, attrs, layer, x, w_last, b, target, z, last=True)
            else:
                route, nchw = self.route(ins, outs, attrs, tune=False)
                if route == "dnn":
                    self._dnn_forward(stream, ins, outs, attrs, nchw, x, w, b, target, z)
                else:
                    im2col_conv(self.dev, stream, ins, outs, attrs, x, w, b, target, z)
            if out_last != compute_last:
                relayout(index, outs[0], target, y, out_last)


def _key(ins: Any, outs: Any, attrs: dict, last: bool = False) -> tuple:
    """What decides a convolution's route (its NCHW one, or with ``last`` its channels-last one)."""
    tf32 = ("tf32",) if attrs.get("allow_tf32") else ()  # (before the layout: a channels-last key less its end is
    # the NCHW one)
    return (ins[0].dtype, tuple(t.shape for t in ins), outs[0].shape, tuple(attrs["pads"]), tuple(attrs["strides"]),
            tuple(attrs["dilations"]), attrs["group"], attrs.get("activation")) + tf32 + (
                ("channels-last",) if last else ())


#: the disk cache's kind for convolution routes (a new name where what is stored changes meaning)
TUNED_KIND = "conv-4"
#: how many of cuDNN's fastest-ranked algorithms a layer's tuning times with its epilogue
DNN_TIMED = 3
#: the channels-last routes (cuDNN with channels-last filters; a 1x1 layer as one product over rows; the depthwise
#: kernel)
LAST_ROUTES = ("dnn", "gemm", "direct")
#: element types tuned channels-last
LAST_DTYPES = frozenset({np.dtype(np.float32)} | cuda_blas.HALVES)


def _times(dev: Any, key: tuple) -> dict:
    """The times measured (or read back from the disk cache) for a route, empty where none were."""
    found = dev._conv_routes.get(key)
    return found[2] if found is not None else {}


def routes_best(dev: Any, key: tuple) -> float:
    """The fastest time measured for a geometry's NCHW routes (ms; infinite where none was timed)."""
    return min((v for k, v in _times(dev, key).items() if k in ("dnn", "im2col") and isinstance(v, float)),
               default=float("inf"))
