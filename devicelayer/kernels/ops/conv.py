"""Convolutions: ``conv`` (ONNX Conv, 1-D to 3-D) and ``conv_transpose`` (ONNX ConvTranspose, 1-D to 3-D).

Device kernels are an implicit GEMM written once in the kernel dialect
(``shaders/conv_tiled.dlk``: the GEMM tiling of ``gemm_tiled.dlk`` with the B
tile gathered from input patches in the kernel, no im2col buffer), a direct
kernel for groups of few output channels such as depthwise convolutions
(``shaders/conv_direct.dlk``), and the plain GEMM kernel for 1x1 convolutions.
Kernel window, strides, padding and dilations are compile-time constants of a
kernel (one compile per layer geometry); sizes are scalars.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np

from .. import tiles as _tiles
from ...dtypes import arithmetic, computes_as_float
from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..op import (ALLOW_TF32, Launch, Op, Plan, TensorType, get, groups_for, local_1d, parallel, register,
                  tf32_attr)
from . import epilogue as _epilogue
from . import matmul as _mm
from .coverage import device_gap
from .epilogue import Epilogue
from .matmul import (GEMM_SCALAR_BYTES, GROUP_SIZE, INTEGER_OPERANDS, gemm_steps, integer_shared,
                     tiled_defines, tiled_fits, tiled_shared, zero_point_stride)
from .elementwise import relu_into
from .windows import as_rows, padded, rows, runs, windows

_AUTO_PAD = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
_SCALARS = ("NB", "Cg", "Mg", "G", "ID", "IH", "IW", "OD", "OH", "OW")
#: unary activations a conv applies last (oneDNN post-ops on the host, the kernels' epilogue elsewhere), beside relu
#: and clip
UNARY_ACTIVATIONS = ("leaky_relu", "elu", "sigmoid", "hard_sigmoid", "hard_swish", "swish", "tanh", "gelu",
                    "gelu_tanh")
#: the activation's parameter attributes -> the elementwise op's attribute they set
_ACTIVATION_PARAMS = {"activation_min": "min", "activation_max": "max", "activation_alpha": "alpha",
                      "activation_beta": "beta"}


def _int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


class _ConvBase(Op):
    """Shared attribute handling of conv and conv_transpose."""

    transposed = False
    min_inputs = 2
    max_inputs = 3
    #: the input holding the bias (when given)
    bias_index = 2
    #: the smallest pad accepted
    min_pad = 0
    attr_names: frozenset[str] = frozenset({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides",
                                            ALLOW_TF32})

    def _ints(self, attrs: dict[str, Any], name: str, n: int, default: int, minimum: int) -> tuple[int, ...]:
        value = attrs.get(name)
        if value is None:
            return (default,) * n
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (list, tuple)) or not all(_int(v) for v in value):
            raise self.error(f"attribute {name!r} must be a list of integers, got {value!r}")
        if len(value) != n:
            raise self.error(f"attribute {name!r} needs {n} values for {n // (2 if name == 'pads' else 1)} "
                             f"spatial dimension(s), got {len(value)}")
        if any(int(v) < minimum for v in value):
            raise self.error(f"attribute {name!r} values must be >= {minimum}, got {list(value)}")
        return tuple(int(v) for v in value)

    def _common(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        extra = set(attrs) - self.attr_names
        if extra:
            raise self.error(f"unknown attribute(s) {sorted(extra)}; it takes {sorted(self.attr_names)}")
        x, w = inputs[0], inputs[1]
        self._check_dtypes(inputs)
        if not 3 <= len(x.shape) <= 5:
            raise self.error(f"X must be (N, C, spatial...) with 1 to 3 spatial dimensions, got shape {x.shape}")
        if len(w.shape) != len(x.shape):
            raise self.error(f"W must have the rank of X ({len(x.shape)}), got shape {w.shape}")
        nd = len(x.shape) - 2
        group = attrs.get("group", 1)
        if not _int(group) or group < 1:
            raise self.error(f"attribute 'group' must be a positive integer, got {group!r}")
        auto_pad = attrs.get("auto_pad", "NOTSET")
        if isinstance(auto_pad, bytes):
            auto_pad = auto_pad.decode()
        if auto_pad not in _AUTO_PAD:
            raise self.error(f"attribute 'auto_pad' must be one of {list(_AUTO_PAD)}, got {auto_pad!r}")
        kernel = w.shape[2:]
        ks = self._ints(attrs, "kernel_shape", nd, 1, 1) if attrs.get("kernel_shape") is not None else kernel
        if ks != kernel:
            raise self.error(f"kernel_shape {list(ks)} does not match W's spatial shape {list(kernel)}")
        if any(k < 1 for k in kernel):
            raise self.error(f"W's kernel window must not be empty, got shape {w.shape}")
        out = {"group": int(group), "kernel_shape": kernel,
               "strides": self._ints(attrs, "strides", nd, 1, 1),
               "dilations": self._ints(attrs, "dilations", nd, 1, 1),
               "pads": self._ints(attrs, "pads", 2 * nd, 0, self.min_pad)}
        if auto_pad != "NOTSET" and any(out["pads"]):
            raise self.error(f"'pads' {list(out['pads'])} cannot be used with auto_pad={auto_pad}")
        out["auto_pad"] = auto_pad
        out.update(tf32_attr(self, attrs) if ALLOW_TF32 in self.attr_names else {})
        if len(inputs) > self.bias_index:
            m = w.shape[1] * out["group"] if self.transposed else w.shape[0]
            if inputs[self.bias_index].shape != (m,):
                raise self.error(f"B must have shape ({m},) (one bias per output channel), "
                                 f"got {inputs[self.bias_index].shape}")
        return out

    def _check_dtypes(self, inputs: Sequence[TensorType]) -> None:
        x = inputs[0]
        if not computes_as_float(x.dtype):
            raise self.error(f"needs floating-point inputs, got {x.dtype}")
        for t in inputs[1:]:
            if t.dtype != x.dtype:
                raise self.error(f"inputs must share one dtype, got {x.dtype} and {t.dtype}")

    def _types(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        return [TensorType(self.out_shape(inputs, attrs), inputs[0].dtype)]

    def out_shape(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[int, ...]:
        raise NotImplementedError

    def infer(self, inputs, attrs):
        return self._types(inputs, attrs)

    # -- device plan ---------------------------------------------------------------------------------
    def plan(self, inputs, outputs, attrs, info):
        """The convolution's kernels; the summand Z and the activation are their epilogue (one launch)."""
        x, w = inputs[0].shape, inputs[1].shape
        y = outputs[0].shape
        window, sizes = _geometry(inputs, outputs, attrs)
        NB, Cg, Mg, G = sizes[:4]
        P = math.prod(y[2:])
        elem = dialect_type(inputs[0].dtype)
        has_bias = len(inputs) >= 3
        epilogue = conv_epilogue(self, inputs, outputs, attrs)
        extra = [("in", 3)] if len(inputs) == 4 else []
        if (not self.transposed and all(k == 1 for k in w[2:]) and all(s == 1 for s in attrs["strides"])
                and not any(attrs["pads"]) and (G == 1 or not has_bias)
                and pointwise_products(info, Mg, NB * P)):
            # 1x1: per image, Y (M, P) = W (M, C) @ X (C, P): the plain GEMM kernel
            batch = [(NB, 0, x[1] * P)] + ([(G, Mg * Cg, Cg * P)] if G > 1 else [])
            return Plan(gemm_steps(info, elem, Mg, P, Cg, Cg, 1, P, 1, batch, 1.0, 1.0,
                                   (2, 1, 0) if has_bias else None, ("in", 1), ("in", 0), ("out", 0),
                                   epilogue=epilogue, epilogue_args=extra))
        args = ([("in", 0), ("in", 1)] + ([("in", 2)] if has_bias else []) + extra + [("out", 0)] + sizes
                + list(epilogue.values if epilogue else ()))
        if not self.transposed and _mm.register_kernels(info):
            _tiles.note(NB * G * Mg * P * Cg * math.prod(w[2:]))
            marks = window + (("HAS_BIAS", int(has_bias)), _tiles.REGISTER_DEFINE)
            if Cg == 1 and len(inputs) < 4 and elem in ("float", "f64"):
                # one input channel per group, no summand: a row of y per work item, accumulated in place
                spec = _conv_spec(self.name, "rows", (elem, elem), has_bias, marks, epilogue)
                rows = NB * G * Mg * math.prod(y[2:-1])
                local = _mm.register_local(info, rows)
                return Plan([Launch(spec, tuple(args), groups_for(rows, local, info), (local,))])
            tm, tn = register_block(Mg, y[-1])
            spec = _conv_spec(self.name, "register", (elem, elem), has_bias,
                              (("TM", tm), ("TN", tn), ("C1", int(Cg == 1))) + marks, epilogue)
            blocks = NB * G * -(-Mg // tm) * (P // y[-1]) * -(-y[-1] // tn)
            local = _mm.register_local(info, blocks)
            return Plan([Launch(spec, tuple(args), groups_for(blocks, local, info), (local,))])
        tiled = tiled_fits(info) and Mg >= 16 and NB * P >= 16
        depth = Cg * math.prod(w[2:])
        mma = tiled and _mm.takes_mma(info, elem) and _mm.mma_fits(Mg, NB * P, depth)
        splits = elem in _SPLIT_TYPES and depth >= 2 * SPLIT_LEAST * _mm.BK
        micro, cols, pipe = (conv_tile(info, elem, (Mg, NB * P, depth), G, mma, splits,
                                       0 if self.transposed else Cg) if tiled
                             else (4, 4, _mm.Pipeline()))
        tile = tiled_defines(micro, pipe.takes_runs(info), pipe.bk, _mm.unrolls_tiles(info), cols) + (
            ("VEC", pipe.vec), ("STAGES", pipe.stages), ("MMA", pipe.mma),
            ("CINNER", channels_inner(self.transposed, Cg, pipe.bk)))
        defines = ((tile if tiled else ()) + window
                   + (("TRANSPOSED", int(self.transposed)), ("HAS_BIAS", int(has_bias)), ("INTEGER", 0)))
        if tiled:
            ntiles = -(-Mg // (16 * micro)) * -(-(NB * P) // (16 * cols)) * G
            split = conv_split(info, elem, ntiles, -(-depth // pipe.bk), micro)
            groups = max(1, min(ntiles * split, info.max_work_groups[0], 65535 * 16))
            if split > 1:
                return _split_plan(self.name, info, elem, tile_name(micro, cols), defines + (("SPLIT", split),),
                                   split, groups, sizes, has_bias, extra, epilogue)
        spec = _conv_spec(self.name, tile_name(micro, cols) if tiled else "direct", (elem, elem), has_bias, defines,
                          epilogue)
        if tiled:
            return Plan([Launch(spec, tuple(args), (groups * GROUP_SIZE,), (GROUP_SIZE,))])
        local = local_1d(info)
        return Plan([Launch(spec, tuple(args), groups_for(NB * G * Mg * P, local, info), (local,))])


#: the tiled convolution splits K on GPUs where its tiles number fewer than SPLIT_BELOW per compute unit, into
#: parts enough for SPLIT_FILL[micro-tile edge] groups per unit, each of SPLIT_LEAST slices or more, SPLIT_MOST
#: parts at most.  H200, ResNet-50's 3x3 layers at 14 x 14 and 7 x 7, batch 16, float32, ms on NVIDIA's Vulkan /
#: OpenCL: 256 channels at 64 x 64 tiles (196) 0.281 / 0.233 whole, 0.201-0.205 / 0.181-0.186 in 2, 4 or 8 parts;
#: 512 channels at 128 x 128 tiles (28) 0.847 / 0.810 whole, 0.190 / 0.215 in 8 parts (cuDNN 0.161, 0.187)
SPLIT_BELOW = 2
SPLIT_FILL = {2: 8, 4: 6, 8: 2}
SPLIT_LEAST = 16
SPLIT_MOST = 16


def conv_tile(info: DeviceInfo, elem: str, product: tuple[int, int, int], groups: int, mma: bool,
              splits: bool, channels: int = 0) -> tuple[int, int, _mm.Pipeline]:
    """The tiled convolution's micro-tile rows and columns and its pipeline (``conv_pipeline``) for an implicit
    product of (output channels of a group, output positions, depth) repeated for ``groups``: a rectangular
    micro-tile of ``tiles.WIDE_TILES`` forced on this thread where shared memory takes it, else the edge of
    ``matmul.micro_tile`` (``mma``: the device may multiply on matrix units; ``splits``: K may be split), its
    columns as ``wide_columns`` says.  ``channels``: a group's input channels where K may run over them innermost
    (forward convolutions; 0 otherwise)."""
    rows, positions, depth = product
    micro = _mm.micro_tile(info, rows, positions, groups, depth, elem, mma, splits)
    forced = _tiles.forced()
    if forced in _tiles.WIDE_TILES:
        tm, tn = forced
        pipe = conv_pipeline(info, elem, tm, product, channels)
        if info.local_memory >= _mm.tiled_shared_bytes(elem, tm, pipe.bk, pipe.stages, bool(pipe.mma), tn):
            return tm, tn, pipe
    cols = micro if forced is not None else wide_columns(info, elem, micro, rows, positions, groups)
    return micro, cols, conv_pipeline(info, elem, micro, product, channels)


#: the static rule's rectangular micro-tile on GPUs: ``tiles.WIDE_TILES``'s (4 x 8) where a group has WIDE_ROWS
#: output channels or fewer and its tiles (64 x 128) number WIDE_LEAST or more per compute unit
WIDE_ROWS = 64
WIDE_LEAST = 2


def wide_columns(info: DeviceInfo, elem: str, micro: int, rows: int, positions: int, groups: int) -> int:
    """The micro-tile columns of the tiled convolution at a micro-tile edge: those of ``tiles.WIDE_TILES``'s
    micro-tile on GPUs for float32 and float16 at its edge, where a group's ``rows`` output channels are
    ``WIDE_ROWS`` or fewer and its tiles over all ``positions`` fill the compute units (``WIDE_LEAST``); else the
    edge."""
    tm, tn = _tiles.WIDE_TILES[0]
    if (info.device_type != "gpu" or elem not in _SPLIT_TYPES or micro != tm or rows > WIDE_ROWS
            or -(-positions // (16 * tn)) * groups < WIDE_LEAST * info.compute_units):
        return micro
    return tn


def tile_name(micro: int, cols: int) -> str:
    """The tiled kernel's name part for a micro-tile: "tiled4", or "tiled4x8" where its columns differ."""
    return f"tiled{micro}" if cols == micro else f"tiled{micro}x{cols}"


def conv_split(info: DeviceInfo, elem: str, tiles: int, slices: int, micro: int = 4) -> int:
    """How many parts the tiled convolution splits K into (``conv_tiled.dlk``'s SPLIT; 1: none) for ``tiles``
    output tiles of micro-tile edge ``micro`` and ``slices`` K slices each: on GPUs, in float32 and float16, where
    the tiles alone leave compute units with too few groups to hide their loads (``SPLIT_BELOW``, ``SPLIT_FILL``,
    ``SPLIT_LEAST``, ``SPLIT_MOST``)."""
    if info.device_type != "gpu" or elem not in _SPLIT_TYPES or tiles >= SPLIT_BELOW * info.compute_units:
        return 1
    fill = SPLIT_FILL.get(micro, 4) * info.compute_units
    return max(1, min(SPLIT_MOST, -(-fill // tiles), slices // SPLIT_LEAST))


#: element types the tiled convolution splits K for (the conv kernels' float types: their parts summed in float32)
#: and takes wide micro-tiles for
_SPLIT_TYPES = ("float", "f16")


def _split_plan(kind: str, info: DeviceInfo, elem: str, kernel: str, defines: tuple[tuple[str, int], ...],
                split: int, groups: int, sizes: Sequence[int], has_bias: bool, extra: Sequence[Any],
                epilogue: Epilogue | None) -> Plan:
    """A tiled convolution split along K in ``split`` parts: the tiled kernel writes each part's sums to a
    scratch tensor, ``conv_split_sum.dlk`` adds them up with the bias and the epilogue into y."""
    NB, _, Mg, G = sizes[:4]
    P = math.prod(sizes[7:10])
    total = NB * G * Mg * P
    spec = _conv_spec(kind, kernel, (elem, elem), False,
                      tuple((k, 0 if k == "HAS_BIAS" else v) for k, v in defines))
    parts = [("in", 0), ("in", 1), ("tmp", 0)] + list(sizes)
    sums = ([("tmp", 0)] + ([("in", 2)] if has_bias else []) + list(extra) + [("out", 0), total, P, G * Mg]
            + list(epilogue.values if epilogue else ()))
    local = local_1d(info)
    return Plan([Launch(spec, tuple(parts), (groups * GROUP_SIZE,), (GROUP_SIZE,)),
                 Launch(_split_sum_spec(elem, has_bias, split, epilogue), tuple(sums), groups_for(total, local, info),
                        (local,))],
                temps=[TensorType.of((split * total,), np.float32)])


@functools.lru_cache(maxsize=64)
def _split_sum_spec(elem: str, has_bias: bool, split: int, epilogue: Epilogue | None) -> KernelSpec:
    """The kernel that adds a split convolution's parts (``conv_split_sum.dlk``), with the bias and epilogue."""
    params = ([Param("part", "float")] + ([Param("bias", elem)] if has_bias else [])
              + list(epilogue.buffers if epilogue else ()) + [Param("y", elem, "out")]
              + [Param(n, "int", "scalar") for n in ("total", "P", "C")] + list(epilogue.scalars if epilogue else ()))
    source, extra = _mm.with_epilogue("conv_split_sum.dlk", epilogue)
    name = (f"conv_split_sum{split}_{elem}{'_bias' if has_bias else ''}"
            f"{f'_ep{epilogue.digest}' if epilogue else ''}")
    return KernelSpec(name, tuple(params), source, elem=elem,
                      defines=(("SPLIT", split), ("HAS_BIAS", int(has_bias))) + extra)


def pointwise_products(info: DeviceInfo, channels: int, positions: int) -> bool:
    """Whether an unstrided 1x1 convolution with ``channels`` output channels a group and ``positions`` output
    positions over all images runs as one product per image (the GEMM kernels) rather than as the tiled
    convolution: on CPU devices (their register-blocked products), and on GPUs where the tiled convolution does not
    take it.  On GPUs the tiled convolution's tiles span images, and it splits K where they are few (H200,
    ResNet-50's twelve 1x1 layers at batch 16, summed: 3.25 -> 2.84 ms on NVIDIA's Vulkan, 4.17 -> 3.05 on its
    OpenCL, 2.52 -> 1.84 in float16 on Vulkan; 14 x 14 and 7 x 7 maps 1.3-2.3x faster, a few 56 x 56 and
    28 x 28 ones up to 9% slower, 256 -> 64 channels at 56 x 56 in float16 42%)."""
    return info.device_type != "gpu" or not (tiled_fits(info) and channels >= 16 and positions >= 16)


def channels_inner(transposed: bool, channels: int, bk: int) -> int:
    """1 where the tiled convolution walks K window tap by window tap, a group's input channels fastest
    (``conv_tiled.dlk``'s CINNER): forward convolutions whose group has a multiple of the K slice ``bk`` of
    input channels, so that a slice lies within one tap."""
    return int(not transposed and channels % bk == 0)


def register_block(channels: int, cols: int) -> tuple[int, int]:
    """The (channels, columns) of an output row a work item of ``conv_register.dlk`` computes: as the product
    kernel's blocks (``matmul.register_block``), but 8 columns for rows of 5 to 7 as well (a 7x7 map's 512-channel
    3x3 layer: 10.5 ms on PoCL against 12.6 with 4 columns and two rows a block)."""
    tm, tn = _mm.register_block(channels, cols)
    return tm, 8 if cols > 4 else tn


def _geometry(inputs: Sequence[TensorType], outputs: Sequence[TensorType],
              attrs: dict[str, Any]) -> tuple[tuple[tuple[str, int], ...], list[int]]:
    """A conv call as its kernels see it, every input 3-D spatial (leading extents of 1): the window defines
    (K, S, P, D along D, H, W) and the size scalars (NB, Cg, Mg, G, input extents, output extents)."""
    x, w, y = inputs[0].shape, inputs[1].shape, outputs[0].shape
    nd = len(x) - 2
    G = attrs["group"]
    pad3 = (1,) * (3 - nd)
    window = []
    for prefix, values in (("K", pad3 + w[2:]), ("S", pad3 + attrs["strides"]),
                           ("P", (0,) * (3 - nd) + attrs["pads"][:nd]), ("D", pad3 + attrs["dilations"])):
        window += [(prefix + axis, int(v)) for axis, v in zip("DHW", values)]
    return tuple(window), [x[0], x[1] // G, y[1] // G, G, *(pad3 + x[2:]), *(pad3 + y[2:])]


def conv_epilogue(op: Op, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
                  attrs: dict[str, Any]) -> Epilogue | None:
    """The summand Z (input 3, added after the bias) and the activation of a checked conv call as the epilogue
    its kernels apply before they store (``kernels/ops/epilogue.py``); None where it has neither."""
    checked = _epilogue_attrs(op, inputs, outputs, attrs)
    return _epilogue.code(outputs[0], inputs[3:4], checked) if checked else None


def _epilogue_attrs(op: Op, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
                    attrs: dict[str, Any]) -> dict[str, Any]:
    """The checked epilogue attributes (``epilogue.check``) of a checked conv call: + Z, then the activation;
    ``{}`` where it has neither."""
    steps: list[tuple[str, dict[str, Any], tuple[int, ...]]] = [("add", {}, (0, 1))] if len(inputs) == 4 else []
    if attrs.get("activation") is not None:
        last = 2 if steps else 0  # the add's result (operands: 0 the conv's, 1 Z, 2 the first step's)
        steps.append((attrs["activation"], activation_params(attrs), (last,)))
    extras = inputs[3:4]
    return _epilogue.check(op, outputs[0], extras, {"epilogue": tuple(steps), "epilogue_inputs": len(extras)})


#: the tiled convolution's pipeline on GPUs: K in slices of 8 through two shared stages, the micro-tile as runs of 4
#: read from shared memory as vectors (micro-tiles of 4 or more).  H200, ResNet-50's 53 convolutions at batch 16,
#: float32, summed at the static tile rule: NVIDIA's OpenCL 6.86 -> 6.35 ms (K in slices of 16, one stage, no runs
#: before); its Vulkan driver as fast as with slices of 8 and two stages alone at 64 x 64 tiles, 11% faster at
#: 128 x 128 (7.95 -> 7.06 ms had every layer taken them)
GPU_CONV_PIPELINE = _mm.Pipeline(bk=8, stages=2, vec=1, runs=1)
#: the tiled convolution's MMA form (float16 on the device's matrix units, ``matmul.takes_mma``): K in slices of
#: 32 through two shared stages at 128 x 128 tiles, of 16 at 64 x 64 (``matmul.mma_pipeline``; H200, ResNet-50's
#: 3x3 and 7x7 convolutions at batch 16 and 64 x 64 tiles, five geometries: 1.36 against 1.38 ms in all); 64-deep
#: slices through one stage where a group's input channels are whole slices of them (``matmul.deep_slices``) at
#: 64 x 64 tiles, and at 128 x 128 for windows of more than one tap (H200, vulkan:0, ResNet-50's thirteen
#: convolution geometries at batch 16, the faster edge of each: 1.255 -> 1.149 ms; its 3x3 layers at 14 x 14 and
#: 7 x 7 0.113 -> 0.100 and 0.109 -> 0.099, its 1024 -> 256 1x1 layer at 14 x 14 0.064 -> 0.054)
MMA_CONV_PIPELINE = _mm.Pipeline(bk=32, stages=2, mma=1)


def conv_pipeline(info: DeviceInfo, elem: str, micro: int,
                  product: tuple[int, int, int] = (_mm.MMA_LEAST,) * 3, channels: int = 0) -> _mm.Pipeline:
    """How the tiled convolution kernel walks K (``conv_tiled.dlk`` always loads a slice ahead): its K slice,
    shared stages, runs, vector reads (micro-tiles of 4 or more) and MMA form of the pipeline forced on this thread
    (``matmul.forcing_pipeline``), else ``MMA_CONV_PIPELINE`` (``matmul.mma_pipeline``, deep where a group's
    ``channels`` allow: ``matmul.deep_slices``) where the device multiplies float16 on matrix units with micro-tiles
    of 4 or 8 and the implicit ``product`` (output channels of a group, output positions, depth) is large enough
    (``matmul.mma_fits``), else ``GPU_CONV_PIPELINE`` on GPUs (its vector reads at micro-tiles of 4 or more), else
    the plain one.  A forced pipeline takes the MMA form wherever the device and tile take it, the product large
    enough or not; one the device or tile cannot take is the same pipeline with K slices of 16 on the usual
    multiply."""
    forced = _mm.forced_pipeline()
    mma = _mm.mma_applies(info, elem, micro, forced is not None or _mm.mma_fits(*product), forced)
    if forced is not None:
        pipe = _mm.Pipeline(bk=forced.bk, stages=forced.stages,
                            vec=forced.vec if micro >= 4 and elem != "f64" else 0, runs=forced.runs, mma=forced.mma)
        return pipe if mma else _mm.without_mma(pipe)
    if mma:
        # (at 128 x 128 tiles, 1x1 layers keep their 32-deep slices through two stages: H200, ResNet-50's four
        # 1x1 geometries, 0.049-0.066 ms against 0.052-0.073 in slices of 64)
        deep = _mm.deep_slices(product[2], channels) and (micro == 4 or product[2] > channels)
        return _mm.mma_pipeline(MMA_CONV_PIPELINE, micro, deep)
    if info.device_type == "gpu" and elem != "f64":
        return GPU_CONV_PIPELINE._replace(vec=int(micro >= 4))
    return _mm.Pipeline()


#: the conv kernels: name -> (shader, shares memory between a work-group's items, reads y back)
_KERNELS = {"tiled": ("conv_tiled.dlk", True, False), "direct": ("conv_direct.dlk", False, False),
            "register": ("conv_register.dlk", False, False), "rows": ("conv_rows.dlk", False, True)}


@functools.lru_cache(maxsize=256)
def _conv_spec(kind: str, kernel: str, types: tuple[str, str], has_bias: bool,
               defines: tuple[tuple[str, int], ...], epilogue: Epilogue | None = None) -> KernelSpec:
    """The kernel of op ``kind`` for one layer geometry (cached: plans are made on every eager call): ``kernel``
    is one of ``_KERNELS``, "tiled" with its micro-tile edge ("tiled4"); ``types`` are X's and W's dialect
    types (``conv_integer`` takes zero points after them and accumulates in int); an epilogue's buffers come
    before y, its scalars last."""
    integer = kind == "conv_integer"
    elem = "int" if integer else types[0]
    params = [Param("x", types[0]), Param("w", types[1])]
    if integer:
        params += [Param("xz", types[0]), Param("wz", types[1])]
    if has_bias:
        params.append(Param("bias", elem))
    params += list(epilogue.buffers) if epilogue else []
    shader, tiled, reads_y = _KERNELS[kernel.rstrip("0123456789x")]
    given = dict(defines)
    split = given.get("SPLIT", 1)
    # (split along K: y is the scratch tensor of the parts' float32 sums)
    params.append(Param("y", "float" if split > 1 else elem, "inout" if reads_y else "out"))
    params += [Param(n, "int", "scalar") for n in _SCALARS]
    params += list(epilogue.scalars) if epilogue else []
    geometry = "_".join(str(v).replace("-", "m") for k, v in defines if k[0] in "KSPD" and k[1:] in "DHW")
    pipe = _mm.Pipeline(bk=given.get("BK", _mm.BK), stages=given.get("STAGES", 1), vec=given.get("VEC", 0),
                        mma=given.get("MMA", 0))
    shape = (f"{given['TM']}x{given['TN']}{'c1' if given['C1'] else ''}" if kernel == "register"
             else ("r" if given.get("RUNS") else "") + pipe.tag + ("_ci" if given.get("CINNER") else "")
             + (f"_sk{split}" if split > 1 else ""))
    name = (f"{kind}_{kernel}{shape}_{'_'.join(dict.fromkeys(types))}"
            f"{'_bias' if has_bias else ''}{f'_ep{epilogue.digest}' if epilogue else ''}_{geometry}")
    source, extra = _mm.with_epilogue(shader, epilogue)
    defines += extra
    if tiled:
        micro = given["TM"]
        shared = (integer_shared(micro) if integer
                  else tiled_shared(elem, micro, pipe.bk, pipe.stages, bool(pipe.mma), given["TN"]))
        return KernelSpec(name, tuple(params), source, elem=elem, shared=shared, local_size=(GROUP_SIZE,),
                          defines=defines)
    return KernelSpec(name, tuple(params), source, elem=elem, defines=defines)


@register
class Conv(_ConvBase):
    """conv(X, W[, B[, Z]]): ONNX Conv over 1 to 3 spatial dimensions.

    X (N, C, D...), W (M, C/group, k...), B (M,); Z, of the output's shape, is
    added after the bias (a fused residual Add); attributes strides, pads
    ([begin..., end...]), dilations, group, auto_pad (NOTSET, VALID, SAME_UPPER,
    SAME_LOWER), kernel_shape (must match W) and activation, applied last: "relu" (a fused Relu), "clip"
    (bounds ``activation_min`` and ``activation_max``) or one of ``UNARY_ACTIVATIONS`` (parameters
    ``activation_alpha``/``activation_beta`` where the op takes alpha/beta: leaky_relu, elu, hard_sigmoid,
    swish).  The host applies Z and the activation in oneDNN's convolution (or in place after NumPy's);
    the device kernels in their epilogue, before the store.
    """

    name = "conv"
    attr_names = _ConvBase.attr_names | {"activation"} | frozenset(_ACTIVATION_PARAMS)
    max_inputs = 4

    def check(self, inputs, attrs):
        takes = "activation" in self.attr_names  # (conv_integer takes none)
        out = self._common(inputs, {k: v for k, v in attrs.items()
                                    if not (takes and (k == "activation" or k in _ACTIVATION_PARAMS))})
        if takes:
            out.update(_activation(self, attrs))
        x, w = inputs[0].shape, inputs[1].shape
        nd, G = len(x) - 2, out["group"]
        if x[1] % G or w[0] % G:
            raise self.error(f"group {G} must divide the input channels ({x[1]}) and output channels ({w[0]})")
        if w[1] * G != x[1]:
            raise self.error(f"W {w} takes {w[1]} channels per group; X has {x[1]} channels in {G} group(s)")
        s, d, k = out["strides"], out["dilations"], out["kernel_shape"]
        pads = list(out["pads"])
        if out["auto_pad"] == "VALID":
            pads = [0] * (2 * nd)
        elif out["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
            for i in range(nd):
                want = -(-x[2 + i] // s[i])
                total = max(0, (want - 1) * s[i] + d[i] * (k[i] - 1) + 1 - x[2 + i])
                small, big = total // 2, total - total // 2
                pads[i], pads[nd + i] = (small, big) if out["auto_pad"] == "SAME_UPPER" else (big, small)
        out["pads"] = tuple(pads)
        out["auto_pad"] = "NOTSET"
        for i in range(nd):
            size = x[2 + i] + pads[i] + pads[nd + i] - d[i] * (k[i] - 1) - 1
            if size < 0:
                raise self.error(f"the dilated kernel ({d[i] * (k[i] - 1) + 1}) is larger than the padded input "
                                 f"({x[2 + i] + pads[i] + pads[nd + i]}) along spatial axis {i}")
        return out

    def infer(self, inputs, attrs):
        types = self._types(inputs, attrs)
        if len(inputs) == 4 and (inputs[3].shape != types[0].shape or inputs[3].dtype != types[0].dtype):
            raise self.error(f"Z (the summand) must have the output's shape {types[0].shape} and dtype "
                             f"{types[0].dtype}, got {inputs[3].shape} {inputs[3].dtype}")
        return types

    def out_shape(self, inputs, attrs):
        x, w = inputs[0].shape, inputs[1].shape
        nd = len(x) - 2
        s, d, k, p = attrs["strides"], attrs["dilations"], attrs["kernel_shape"], attrs["pads"]
        spatial = tuple((x[2 + i] + p[i] + p[nd + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd))
        return (x[0], w[0]) + spatial

    def reference(self, inputs, attrs):
        x, w = inputs[0], inputs[1]
        dtype, ct = x.dtype, arithmetic(x.dtype)
        x, w = x.astype(ct, copy=False), w.astype(ct, copy=False)
        nd = x.ndim - 2
        G = attrs["group"]
        s, d, k, p = attrs["strides"], attrs["dilations"], attrs["kernel_shape"], attrs["pads"]
        out = self.out_shape([TensorType.of(a.shape, a.dtype) for a in inputs], attrs)
        C, M = x.shape[1], w.shape[0]
        xp = np.ascontiguousarray(padded(x, p[:nd], p[nd:]))  # ``runs`` needs a C-ordered image
        with np.errstate(all="ignore"):
            if not x.size or not w.size:  # nothing to multiply: sums over no terms (or no output)
                y = np.zeros(out, ct)
            elif G == 1 and all(v == 1 for v in s) and math.prod(k) > 1:
                y = _conv_flat(xp, w, d, out)
            elif C // G == 1 and M // G == 1 and G > 1:
                y = _conv_depthwise(xp, w, s, d, out)
            else:
                y = _conv_im2col(windows(xp, k, s, d, out[2:]), w, G, out)
            if len(inputs) >= 3:
                y += inputs[2].astype(ct, copy=False).reshape((1, M) + (1,) * nd)
            if len(inputs) == 4:
                y += inputs[3].astype(ct, copy=False)
            y = activate(y, attrs)
        return [y.astype(dtype, copy=False)]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is not None or (len(inputs) < 4 and attrs.get("activation") is None):
            return why
        outputs = self.infer(inputs, attrs)  # Z and the activation: the kernels' epilogue
        checked = _epilogue_attrs(self, inputs, outputs, attrs)
        return _epilogue.unsupported(outputs[0], inputs[3:4], checked, info, 3 + len(inputs[2:3]), GEMM_SCALAR_BYTES)

    def reference_into(self, inputs, outputs, attrs):
        x = inputs[0]
        if arithmetic(x.dtype) != x.dtype or not x.size or not inputs[1].size or not outputs[0].size:
            return super().reference_into(inputs, outputs, attrs)
        _conv_into(inputs, outputs[0], attrs)
        return None


#: im2col buffers above twice this size are filled and multiplied a band of output rows at a time (cache-sized)
_CHUNK_BYTES = 4 << 20


def _products(w: np.ndarray, cols: np.ndarray, y: np.ndarray, nout: int) -> None:
    """``y = w @ cols``: w (M, K), cols (K's axes..., ``nout`` output axes) any strided view, y (M, S) with S
    the outputs in order.  im2col copies ``cols`` (no copy where the view is contiguous), in bands of the
    first output axis when large, each band followed by its BLAS product."""
    K, outs = w.shape[1], cols.shape[-nout:]
    S = math.prod(outs)
    inner = S // outs[0] if outs[0] else 0
    rows = outs[0] if K * S * w.itemsize <= 2 * _CHUNK_BYTES else max(1, _CHUNK_BYTES // (K * inner * w.itemsize))
    if rows >= outs[0]:
        np.matmul(w, cols.reshape(K, S), out=y)
        return
    band = np.empty(cols.shape[:-nout] + (rows,) + outs[1:], w.dtype)
    rest = (slice(None),) * (nout - 1)
    for a in range(0, outs[0], rows):
        b = min(outs[0], a + rows)
        part = band[(Ellipsis, slice(0, b - a)) + rest]
        np.copyto(part, cols[(Ellipsis, slice(a, b)) + rest])
        np.matmul(w, part.reshape(K, -1), out=y[:, a * inner:b * inner])


def _conv_flat(xp: np.ndarray, w: np.ndarray, d: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """A stride-1 ungrouped conv: im2col copies long contiguous runs (``runs``), then BLAS products."""
    view, full = runs(xp, w.shape[2:], d, out)
    for n in range(xp.shape[0]):
        _products(w.reshape(w.shape[0], -1), view[n], full[n, :, :view.shape[-1]], 1)
    return rows(full, xp, out)


def _conv_im2col(win: np.ndarray, w: np.ndarray, G: int, out: Sequence[int]) -> np.ndarray:
    """A conv from its windows (N, C, *k, *out): im2col (none for 1x1 stride-1 convs) and BLAS products."""
    N, C, M = win.shape[0], win.shape[1], w.shape[0]
    nd = len(out) - 2
    S = math.prod(out[2:])
    y = np.empty((N, G, M // G, S), w.dtype)
    wm = w.reshape(G, M // G, -1)
    for n in range(N):
        for g in range(G):
            _products(wm[g], win[n, g * (C // G):(g + 1) * (C // G)], y[n, g], nd)
    return y.reshape(out)


def _conv_depthwise(xp: np.ndarray, w: np.ndarray, s: Sequence[int], d: Sequence[int],
                    out: Sequence[int]) -> np.ndarray:
    """A depthwise conv (one input and one output channel per group): a multiply-add per kernel position,
    over contiguous runs of the image when the stride is 1."""
    C, k = xp.shape[1], w.shape[2:]
    flat = all(v == 1 for v in s)
    if flat:
        win, full = runs(xp, k, d, out)
        acc = full[..., :win.shape[-1]]
    else:
        win, acc = windows(xp, k, s, d, out[2:]), np.empty(out, w.dtype)
    wk = w.reshape(C, -1, *(1,) * (win.ndim - 2 - len(k)))
    term = np.empty_like(acc)
    for j, kpos in enumerate(np.ndindex(*k)):
        np.multiply(win[(slice(None), slice(None)) + kpos], wk[:, j], out=acc if j == 0 else term)
        if j:
            acc += term
    return rows(full, xp, out) if flat else acc


#: a stride-1 ungrouped conv multiplies over contiguous runs (``runs``) when they add at most this share of
#: columns past the output rows; more (small images), its im2col gathers just the output's windows
_RUN_WASTE = 1.1


def _conv_into(inputs: Sequence[np.ndarray], y: np.ndarray, attrs: dict[str, Any]) -> None:
    """Conv of float32/float64 ``inputs`` written into ``y``: ungrouped as BLAS products over im2col bands
    (none for 1x1 stride-1 convs), grouped as batched products a few groups at a time spread over the host
    threads; then bias and activation in place, a block of channels at a time."""
    x, w = inputs[0], inputs[1]
    nd, G = x.ndim - 2, attrs["group"]
    s, d, k, p = attrs["strides"], attrs["dilations"], attrs["kernel_shape"], attrs["pads"]
    N, M = x.shape[0], w.shape[0]
    out = y.shape
    S = math.prod(out[2:])
    xp = np.ascontiguousarray(padded(x, p[:nd], p[nd:]))
    stride1 = all(v == 1 for v in s)
    with np.errstate(all="ignore"):
        if G == 1:
            wm = w.reshape(M, -1)
            view, full = runs(xp, k, d, out) if stride1 and math.prod(k) > 1 else (None, None)
            if view is not None and full[0].size <= _RUN_WASTE * M * S:
                for n in range(N):
                    _products(wm, view[n], full[n, :, :view.shape[-1]], 1)
                np.copyto(y, as_rows(full, xp, out))
            else:
                win = windows(xp, k, s, d, out[2:])
                for n in range(N):
                    _products(wm, win[n], y[n].reshape(M, S), nd)
        else:
            _grouped_into(xp, w, G, s, d, y)
        _bias_activation(y, inputs[2] if len(inputs) >= 3 else None, attrs, inputs[3] if len(inputs) == 4 else None)


def _grouped_into(xp: np.ndarray, w: np.ndarray, G: int, s: Sequence[int], d: Sequence[int], y: np.ndarray) -> None:
    """A grouped conv into ``y``: per image, Y[g] (Mg, S) = W[g] (Mg, Cg k) @ cols[g] as one batched product
    over a band of groups (stride 1: over contiguous runs, trimmed after), bands spread over the host threads."""
    N, C, M, k, out = xp.shape[0], xp.shape[1], w.shape[0], w.shape[2:], y.shape
    Cg, Mg = C // G, M // G
    K, S = Cg * math.prod(k), math.prod(out[2:])
    wm = w.reshape(G, Mg, K)
    flat = all(v == 1 for v in s)
    if flat:
        view, full = runs(xp, k, d, out)
        L = view.shape[-1]
    else:
        view, L = windows(xp, k, s, d, out[2:]), S
    band = max(1, _CHUNK_BYTES // max(1, K * L * xp.itemsize))  # groups per im2col band

    def piece(g0: int, g1: int) -> None:
        for n in range(N):
            for a in range(g0, g1, band):
                b = min(g1, a + band)
                cols = view[n, a * Cg:b * Cg].reshape(b - a, K, L)  # a copy unless contiguous (1x1, stride 1)
                dst = full[n, a * Mg:b * Mg, :L] if flat else y[n, a * Mg:b * Mg].reshape(b - a, Mg * S)
                np.matmul(wm[a:b], cols, out=dst.reshape(b - a, Mg, L))
                if flat:
                    part = as_rows(full[n:n + 1, a * Mg:b * Mg], xp, (1, (b - a) * Mg) + out[2:])
                    np.copyto(y[n:n + 1, a * Mg:b * Mg], part)
    parallel(piece, G, N * (xp[0].nbytes * math.prod(k) + y[0].nbytes))


def _activation(op: Op, attrs: dict[str, Any]) -> dict[str, Any]:
    """The checked ``activation`` attribute with its parameters (clip: ``activation_min``/``activation_max``,
    numbers, min <= max; the others those of the elementwise op's own attributes it takes, defaults filled in)."""
    name = attrs.get("activation")
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    given = {k: attrs[k] for k in _ACTIVATION_PARAMS if k in attrs}
    if name is None:
        if given:
            raise op.error(f"attribute(s) {sorted(given)} go with an activation only")
        return {}
    if name == "clip":
        return {"activation": "clip", **_clip_bounds(op, attrs)}
    if name != "relu" and name not in UNARY_ACTIVATIONS:
        raise op.error(f"attribute 'activation' must be one of {['relu', 'clip', *UNARY_ACTIVATIONS]} (applied "
                       f"after the bias), or absent, got {name!r}")
    unary = get(name)
    defaults = unary.prepare([TensorType((1,), np.dtype(np.float32))], {})[0]
    takes = {k for k, v in _ACTIVATION_PARAMS.items() if v in defaults}
    wrong = sorted(set(given) - takes)
    if wrong:
        raise op.error(f"attribute(s) {wrong} do not go with activation {name!r}"
                       + (f" (it takes {sorted(takes)})" if takes else ""))
    for k, v in given.items():
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or math.isnan(float(v)):
            raise op.error(f"attribute {k!r} must be a number, got {v!r}")
    params = unary.prepare([TensorType((1,), np.dtype(np.float32))],
                           {_ACTIVATION_PARAMS[k]: float(v) for k, v in given.items()})[0]
    return {"activation": name, **{k: float(params[v]) for k, v in _ACTIVATION_PARAMS.items() if v in params}}


def activation_params(attrs: dict[str, Any]) -> dict[str, float]:
    """The checked activation's parameters as its elementwise op's attributes (``{"alpha": ...}``)."""
    return {v: attrs[k] for k, v in _ACTIVATION_PARAMS.items() if k in attrs}


def activate(y: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """``y`` after the checked conv attributes' activation (in place for relu and clip)."""
    name = attrs.get("activation")
    if name == "relu":
        np.maximum(y, 0, out=y)
    elif name == "clip":
        np.clip(y, attrs["activation_min"], attrs["activation_max"], out=y)
    elif name is not None:
        return get(name).reference([y], activation_params(attrs))[0].astype(y.dtype, copy=False)
    return y


def _clip_bounds(op: Op, attrs: dict[str, Any]) -> dict[str, float]:
    """The checked bounds of a fused clip activation (numbers, not NaN, min <= max; a missing one unbounded)."""
    extra = sorted({"activation_alpha", "activation_beta"} & set(attrs))
    if extra:
        raise op.error(f"attribute(s) {extra} do not go with activation 'clip' (it takes activation_min, "
                       f"activation_max)")
    out = {}
    for name, default in (("activation_min", -math.inf), ("activation_max", math.inf)):
        value = attrs.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or math.isnan(float(value)):
            raise op.error(f"attribute {name!r} must be a number, got {value!r}")
        out[name] = float(value)
    if out["activation_min"] > out["activation_max"]:
        raise op.error(f"activation_min ({out['activation_min']}) is greater than activation_max "
                       f"({out['activation_max']})")
    return out


def _bias_activation(y: np.ndarray, bias: np.ndarray | None, attrs: dict[str, Any],
                     z: np.ndarray | None = None) -> None:
    """``y += bias`` per channel, ``y += z``, then the checked attributes' activation, in place, spread over the
    host threads by channels."""
    activation = attrs.get("activation")
    if bias is None and activation is None and z is None:
        return
    b = None if bias is None else bias.reshape((1, -1) + (1,) * (y.ndim - 2))

    def piece(c0: int, c1: int) -> None:
        part = y[:, c0:c1]
        if b is not None:
            part += b[:, c0:c1]
        if z is not None:
            part += z[:, c0:c1]
        if activation == "relu":
            relu_into(part, part)
        elif activation is not None:
            part[...] = activate(part, attrs)
    parallel(piece, y.shape[1], 2 * y.nbytes)


@register
class ConvInteger(Conv):
    """conv_integer(X, W, x_zero_point, w_zero_point[, B]): int32 ``conv(X - x_zero_point, W - w_zero_point)
    (+ B)`` (ONNX ConvInteger; B, int32 per output channel, is QLinearConv's bias), accumulated exactly.

    X and W are 8- or 16-bit integers; x_zero_point is a scalar of X's dtype, w_zero_point a scalar or one
    per output channel of W's dtype; padding contributes nothing (it is X's zero point).  Attributes as conv's,
    without activation.
    """

    name = "conv_integer"
    attr_names = _ConvBase.attr_names - {ALLOW_TF32}
    min_inputs = 4
    max_inputs = 5
    bias_index = 4

    def _check_dtypes(self, inputs):
        x, w, xz, wz = inputs[:4]
        for t, what in ((x, "X"), (w, "W")):
            if t.dtype.name not in INTEGER_OPERANDS:
                raise self.error(f"{what} must be one of {list(INTEGER_OPERANDS)}, got {t.dtype}")
        for z, t, what in ((xz, x, "x_zero_point"), (wz, w, "w_zero_point")):
            if z.dtype != t.dtype:
                raise self.error(f"{what} must have its operand's dtype {t.dtype}, got {z.dtype}")
        zero_point_stride(self, xz, 1, "x_zero_point")
        zero_point_stride(self, wz, w.shape[0] if w.shape else 1, "w_zero_point")
        if len(inputs) == 5 and inputs[4].dtype != np.int32:
            raise self.error(f"B must be int32, got {inputs[4].dtype}")

    def infer(self, inputs, attrs):
        return [TensorType.of(self.out_shape(inputs, attrs), np.int32)]

    def reference(self, inputs, attrs):
        x, w, xz, wz = (a.astype(np.float64) for a in inputs[:4])
        x = x - xz.reshape(())
        w = w - wz.reshape((-1,) + (1,) * (w.ndim - 1) if wz.size > 1 else ())
        floats = [x, w, inputs[4].astype(np.float64)] if len(inputs) == 5 else [x, w]
        y = Conv.reference(self, floats, attrs)[0]  # exact: products and sums of integers below 2**53
        return [np.rint(y).astype(np.int32)]

    def reference_into(self, inputs, outputs, attrs):
        return Op.reference_into(self, inputs, outputs, attrs)

    def unsupported(self, inputs, attrs, info):
        return device_gap(self, [*inputs, *self.infer(inputs, attrs)], info)

    def plan(self, inputs, outputs, attrs, info):
        window, sizes = _geometry(inputs, outputs, attrs)
        NB, _, Mg, G = sizes[:4]
        P = math.prod(outputs[0].shape[2:])
        has_bias = len(inputs) == 5
        wzs = zero_point_stride(self, inputs[3], inputs[1].shape[0], "w_zero_point")
        tiled = tiled_fits(info) and Mg >= 16 and NB * P >= 16
        micro = _mm.micro_tile(info, Mg, NB * P, G, sizes[1] * math.prod(inputs[1].shape[2:]), "int") if tiled else 4
        tile = (tiled_defines(micro, _mm.tile_runs(info), _mm.BK, _mm.unrolls_tiles(info))
                + (("CINNER", channels_inner(False, sizes[1], _mm.BK)),) if tiled else ())
        defines = tile + window + (
            ("TRANSPOSED", 0), ("HAS_BIAS", int(has_bias)), ("INTEGER", 1), ("WZS", wzs))
        spec = _conv_spec(self.name, tile_name(micro, micro) if tiled else "direct",
                          (dialect_type(inputs[0].dtype), dialect_type(inputs[1].dtype)), has_bias, defines)
        args = tuple([("in", i) for i in range(len(inputs))] + [("out", 0)] + sizes)
        if tiled:
            ntiles = -(-Mg // (16 * micro)) * -(-(NB * P) // (16 * micro)) * G
            groups = max(1, min(ntiles, info.max_work_groups[0], 65535 * 16))
            return Plan([Launch(spec, args, (groups * GROUP_SIZE,), (GROUP_SIZE,))])
        local = local_1d(info)
        return Plan([Launch(spec, args, groups_for(outputs[0].size, local, info), (local,))])


@register
class ConvTranspose(_ConvBase):
    """conv_transpose(X, W[, B]): ONNX ConvTranspose over 1 to 3 spatial dimensions.

    X (N, C, D...), W (C, M/group, k...), B (M,); attributes strides, pads,
    dilations, group, output_padding, output_shape, auto_pad, kernel_shape.
    An output_shape larger than the natural output pads it with zeros (plus the
    bias), as negative pads (the spec's total padding split as for smaller ones).
    """

    name = "conv_transpose"
    transposed = True
    min_pad = -(2**31)  # a negative pad widens the output with zeros (an output_shape past the natural one)
    attr_names = _ConvBase.attr_names | {"output_padding", "output_shape"}

    def check(self, inputs, attrs):
        out = self._common(inputs, attrs)
        x, w = inputs[0].shape, inputs[1].shape
        nd, G = len(x) - 2, out["group"]
        if x[1] % G:
            raise self.error(f"group {G} must divide the input channels ({x[1]})")
        if w[0] != x[1]:
            raise self.error(f"W {w} must have X's {x[1]} input channels first")
        s, d, k = out["strides"], out["dilations"], out["kernel_shape"]
        op = self._ints(attrs, "output_padding", nd, 0, 0)
        out["output_padding"] = op
        natural = [s[i] * (x[2 + i] - 1) + op[i] + d[i] * (k[i] - 1) + 1 for i in range(nd)]
        shape = attrs.get("output_shape")
        pads = list(out["pads"])
        if out["auto_pad"] == "VALID":
            pads = [0] * (2 * nd)
        if shape is not None or out["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
            if shape is not None:
                if any(pads):
                    raise self.error("'pads' and 'output_shape' cannot both be given")
                if isinstance(shape, (list, tuple)) and len(shape) == nd + 2:
                    shape = list(shape)[2:]
                shape = self._ints({"output_shape": shape}, "output_shape", nd, 1, 1)
            else:
                shape = tuple(x[2 + i] * s[i] for i in range(nd))
            for i in range(nd):
                total = natural[i] - shape[i]  # negative: the output is larger, the extra is padding (zeros)
                if out["auto_pad"] == "SAME_UPPER":
                    pads[i], pads[nd + i] = total // 2, total - total // 2
                else:
                    pads[i], pads[nd + i] = total - total // 2, total // 2
        out["pads"] = tuple(pads)
        out["auto_pad"] = "NOTSET"
        for i in range(nd):
            if natural[i] - pads[i] - pads[nd + i] < 1:
                raise self.error(f"pads {list(pads)} leave no output along spatial axis {i}")
        return out

    def out_shape(self, inputs, attrs):
        x, w = inputs[0].shape, inputs[1].shape
        nd = len(x) - 2
        s, d, k, p, op = (attrs["strides"], attrs["dilations"], attrs["kernel_shape"], attrs["pads"],
                          attrs["output_padding"])
        spatial = tuple(s[i] * (x[2 + i] - 1) + op[i] + d[i] * (k[i] - 1) + 1 - p[i] - p[nd + i]
                        for i in range(nd))
        return (x[0], w[1] * attrs["group"]) + spatial

    def reference(self, inputs, attrs):
        x, w = inputs[0], inputs[1]
        dtype, ct = x.dtype, arithmetic(inputs[0].dtype)
        x, w = x.astype(ct), w.astype(ct)
        nd = x.ndim - 2
        G = attrs["group"]
        s, d, k, p, op = (attrs["strides"], attrs["dilations"], attrs["kernel_shape"], attrs["pads"],
                          attrs["output_padding"])
        N, C, Mg = x.shape[0], x.shape[1], w.shape[1]
        spatial_in = x.shape[2:]
        full = [s[i] * (spatial_in[i] - 1) + d[i] * (k[i] - 1) + 1 + op[i] for i in range(nd)]
        yb = np.zeros((N, G * Mg, *full), ct)
        xg = x.reshape(N, G, C // G, *spatial_in)
        wg = w.reshape(G, C // G, Mg, *k)
        with np.errstate(all="ignore"):
            for kpos in np.ndindex(*k):
                contrib = np.einsum("ngc...,gcm->ngm...", xg, wg[(slice(None),) * 3 + kpos])
                sl = tuple(slice(kpos[i] * d[i], kpos[i] * d[i] + s[i] * (spatial_in[i] - 1) + 1, s[i])
                           for i in range(nd))
                yb[(slice(None), slice(None)) + sl] += contrib.reshape(N, G * Mg, *spatial_in)
            y = _window_of(yb, p[:nd], p[nd:])
            if len(inputs) == 3:
                y = y + inputs[2].astype(ct).reshape((1, G * Mg) + (1,) * nd)
        return [np.ascontiguousarray(y).astype(dtype)]


def _window_of(y: np.ndarray, begins: Sequence[int], ends: Sequence[int]) -> np.ndarray:
    """``y`` (N, C, spatial...) cropped by ``begins`` / ``ends`` along its spatial dims, a negative count
    padding that side with zeros instead."""
    if min(*begins, *ends, 0) >= 0:
        return y[(slice(None), slice(None)) + tuple(slice(b, n - e) for b, e, n in zip(begins, ends, y.shape[2:]))]
    shape = y.shape[:2] + tuple(n - b - e for b, e, n in zip(begins, ends, y.shape[2:]))
    out = np.zeros(shape, y.dtype)
    src = tuple(slice(max(b, 0), n - max(e, 0)) for b, e, n in zip(begins, ends, y.shape[2:]))
    dst = tuple(slice(max(-b, 0), m - max(-e, 0)) for b, e, m in zip(begins, ends, shape[2:]))
    out[(slice(None), slice(None)) + dst] = y[(slice(None), slice(None)) + src]
    return out
