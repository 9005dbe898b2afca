"""Matrix products: ``matmul`` (NumPy semantics) and ``gemm`` (ONNX Gemm).

Both run on one tiled shared-memory GEMM kernel written once in the kernel
dialect (``shaders/gemm_tiled.dlk``: 32 x 32, 64 x 64 or 128 x 128 output tiles per
work-group, 16 x 16 work items each computing a 2 x 2, 4 x 4 or 8 x 8 micro-tile, K in
shared slices walked as a ``Pipeline`` says), with
transposes and broadcast batch dimensions expressed as strides, and a direct
kernel (``shaders/gemm_small.dlk``) for matrix-vector and other skinny products.
On CUDA the device's vendor library takes over through ``Device.vendor_op``:
``vendor_contract`` documents what it receives and ``gemm_call`` turns an op call
into plain GEMM terms for it.  Both take an epilogue (``epilogue.py``): a pointwise chain applied to each
output element in the GEMM kernel before its store (the vendor library is not asked for a call with one).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from dataclasses import dataclass
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np

from ...info import DeviceInfo
from ...resources import shader_source
from .. import tiles as _tiles
from ..dialect import TYPES, WORD, KernelSpec, Param, dialect_type
from ..render import MMA_LANGUAGES
from ..op import (ALLOW_TF32, Launch, Op, Plan, TensorType, groups_for, local_1d, register, tf32_attr,
                  float_attr as _float_attr)
from . import epilogue as _epilogue
from .coverage import device_gap
from .epilogue import Epilogue

#: output tile of the tiled kernel (rows, columns) with 4 x 4 micro-tiles, K slice, work items per group
BM, BN, BK, GROUP_SIZE = 64, 64, 16, 256
#: shared memory of the tiled kernel in bytes (float staging, padded rows)
SHARED_BYTES = 4 * BK * ((BM + 4) + (BN + 4))


#: lines of the tiled kernels' bodies that stand for a piece they share: marker -> the file in ``shaders/``
_SHARED_PIECES = {"DL_TILE_LAYOUT": "tile_layout.dlk", "DL_TILE_MULTIPLY": "tile_multiply.dlk",
                  "DL_TILE_ACC": "tile_acc.dlk", "DL_TILE_GATHER": "tile_gather.dlk"}


@functools.lru_cache(maxsize=None)
def kernel_source(name: str) -> str:
    """A kernel body shipped in ``shaders/``, the pieces the tiled kernels share in place of their marker lines
    (read once: plans are made on every eager call)."""
    text = shader_source(name)
    for marker, piece in _SHARED_PIECES.items():
        if f"\n{marker}\n" in text:
            text = text.replace(f"\n{marker}\n", "\n" + shader_source(piece))
    return text


#: micro-tile edge on CPU devices (128 x 128 tiles): a work item's 64 accumulators stay in vector registers there,
#: and each staged slice is read twice as often as with 4 x 4 (PoCL's 512^3 GEMM: 7.8 -> 14.8 GFLOP/s)
CPU_MICRO = 8
#: the least depth (K) and output size (rows x columns of one product) that 128 x 128 tiles pay for on a CPU
#: device: shallower or smaller products spend more on the larger tile's padding than the registers win
CPU_MICRO_DEPTH, CPU_MICRO_OUTPUT = 32, 8192


def micro_tile(info: DeviceInfo, rows: int, cols: int, batch: int, depth: int, elem: str = "float",
               pipelined: bool = False, splits: bool = False) -> int:
    """Micro-tile edge of the tiled kernels for a (rows x depth) @ (depth x cols) product repeated batch
    times.  The edge forced while a plan is measured (``tiles.forcing``) where shared memory takes it; else the
    static rule: 8 (128 x 128 tiles) on CPU devices for products deep and large enough, where shared memory
    takes them, and on GPUs for a GEMM with a GPU pipeline (``pipelined``) giving every compute unit a tile or
    more (H200, 2048^3: 256 tiles over 132 units, 0.49 ms against 0.62 at 64 x 64 on NVIDIA's OpenCL); 2 (32 x 32)
    where 64 x 64 tiles would leave a GPU's compute units idle (fewer than two tiles each) and the caller cannot
    fill them by splitting K instead (``splits``: the tiled convolution, ``conv.conv_split``); else 4 (64 x 64).
    The product's work is noted for the tuner (``tiles.noting``)."""
    _tiles.note(rows * cols * batch * max(depth, 1))
    chosen = _tiles.forced()
    if chosen in _tiles.MICRO_EDGES and info.local_memory >= tiled_shared_bytes(elem, chosen):
        return chosen
    if info.device_type == "cpu":
        large = depth >= CPU_MICRO_DEPTH and rows * cols >= CPU_MICRO_OUTPUT
        return CPU_MICRO if large and info.local_memory >= tiled_shared_bytes(elem, CPU_MICRO) else 4
    units = 2 * max(1, info.compute_units)
    if (pipelined and info.device_type == "gpu" and min(rows, cols) >= 128 and depth >= 128
            and info.local_memory >= tiled_shared_bytes(elem, 8)
            and -(-rows // 128) * -(-cols // 128) * batch >= max(1, info.compute_units)):
        return 8
    tiles = -(-rows // BM) * -(-cols // BN) * batch
    return 2 if info.device_type == "gpu" and tiles < units and not splits else 4


def tile_runs(info: DeviceInfo) -> bool:
    """Whether the tiled kernels lay a work item's micro-tile out as runs of 4 adjacent rows and columns (read from
    shared memory as vectors) rather than 16 apart: on CPU devices and GLSL's compilers, which were faster with
    them (PoCL's 512^3 GEMM 13.1 -> 11.4 ms; the H100's Vulkan driver 4096^3 4.20 -> 3.91 ms, every ResNet-50
    convolution 3-10% faster), not on other GPUs (on NVIDIA's OpenCL most kernels were 5-30% slower)."""
    return info.device_type == "cpu" or info.kernel_language == "glsl"


def tiled_defines(micro: int, runs: bool = False, bk: int = BK, unroll: bool = False,
                  cols: int | None = None) -> tuple[tuple[str, int], ...]:
    """Tile-shape defines of the tiled kernels for a micro-tile edge (its columns ``cols`` where they differ: the
    tiled convolution's ``tiles.WIDE_TILES``), layout (``tile_runs``) and K slice, and whether their fixed loops
    carry the UNROLL hint (``unrolls_tiles``)."""
    cols = micro if cols is None else cols
    return (("TM", micro), ("TN", cols), ("BM", 16 * micro), ("BN", 16 * cols), ("BK", bk), ("RUNS", int(runs)),
            ("UNROLL_TILES", int(unroll)))


def unrolls_tiles(info: DeviceInfo) -> bool:
    """Whether the tiled kernels' fixed loops carry the UNROLL hint on a device: on GPUs, where the kernels were
    measured with it (NVIDIA's OpenCL, ResNet-50's 1x1 convolutions at batch 16 0.39 -> 0.22 ms); not on CPU
    devices, whose compilers took longer over the unrolled loops (the node suite's products and convolutions on
    PoCL and lavapipe 35 -> 30 s) for kernels they run only for integer types or when forced."""
    return info.device_type == "gpu"


def tiled_shared(elem: str, micro: int, bk: int = BK, stages: int = 1, mma: bool = False,
                 cols: int | None = None, words: bool = False) -> tuple[tuple[str, str, int], ...]:
    """Shared-memory staging of the tiled kernels (rows padded by 4 against bank conflicts, keeping them 16-byte
    aligned; ``stages`` slices of ``bk``; B's rows of ``cols`` micro-tile columns where they differ from the edge);
    ``mma``: the MMA form's, slices staged in the element type (A's as rows of ``bk``; rows padded by 8), as 16-byte
    words of 8 where ``words`` (``Pipeline.stage_words``), and each subgroup's float scratch of 16 x 20
    (``tile_layout.dlk``)."""
    cols = micro if cols is None else cols
    if mma:
        stage = 16 * micro * (bk + 8), bk * (16 * cols + 8)
        kind, per = (WORD, 8) if words else (elem, 1)
        return ((kind, "sa", stages * stage[0] // per), (kind, "sb", stages * stage[1] // per),
                ("float", "sc", (GROUP_SIZE // MMA_SUBGROUP) * 16 * 20))
    acc = "f64" if elem == "f64" else "float"
    return ((acc, "sa", stages * bk * (16 * micro + 4)), (acc, "sb", stages * bk * (16 * cols + 4)))


class Pipeline(NamedTuple):
    """How the tiled GEMM kernel (``gemm_tiled.dlk``) walks K and its tiles: the K slice, shared stages, loads
    issued a slice ahead, shared reads as vectors, unchecked loads where the product allows them, bands of tile
    rows, the multiply on the device's matrix units (``mma``, ``takes_mma``) with slices read as 16-byte words
    (``vload``; its optional defines) and staged as them (``stage_words``, with ``vload``), and the micro-tile as
    runs of 4 (``RUNS``, which ``vec`` implies)."""

    bk: int = BK
    stages: int = 1
    prefetch: int = 0
    vec: int = 0
    aligned: int = 0
    swizzle: int = 0
    runs: int = 0
    mma: int = 0
    vload: int = 0
    stage_words: int = 0

    @property
    def defines(self) -> tuple[tuple[str, int], ...]:
        """The kernel's defines past the tile shape's."""
        return (("VEC", self.vec), ("ALIGNED", self.aligned), ("PREFETCH", self.prefetch), ("STAGES", self.stages),
                ("SWIZZLE", self.swizzle), ("MMA", self.mma), ("VLOAD", self.vload),
                ("STAGE_WORDS", self.stage_words))

    @property
    def tag(self) -> str:
        """The pipeline in a kernel's name ("" for the plain one)."""
        if self == Pipeline():
            return ""
        return (f"_k{self.bk}s{self.stages}{'p' if self.prefetch else ''}{'v' if self.vec else ''}"
                f"{'a' if self.aligned else ''}{f'w{self.swizzle}' if self.swizzle else ''}{'x' if self.mma else ''}"
                f"{'u' if self.vload else ''}{'W' if self.stage_words else ''}")

    def takes_runs(self, info: DeviceInfo) -> bool:
        """Whether the micro-tile is laid out as runs of 4 (``tile_runs``): where the device's rule says so, and
        wherever the pipeline asks for runs or reads them as vectors."""
        return tile_runs(info) or bool(self.runs or self.vec)


#: the GPU pipeline of 128 x 128 tiles: K in slices of 8 through two shared stages, loads a slice ahead, micro-tiles
#: as runs read as vectors, loads unchecked where the product allows, bands of 8 tile rows (H200, 4096^3, against
#: the kernels before it: Vulkan 3.92 -> 3.34 ms)
GPU_PIPELINE = Pipeline(bk=8, stages=2, prefetch=1, vec=1, aligned=1, swizzle=8, runs=1)
#: the same for GPUs compiling OpenCL C or CUDA C, whose compilers read the runs as vectors themselves (NVIDIA's
#: OpenCL: 3.79 ms, against 3.93 with LDS4's vectors and 5.00 before)
C_GPU_PIPELINE = GPU_PIPELINE._replace(vec=0)
#: element types the GPU pipeline is for (staged as float)
_PIPELINED = ("float", "f16", "bf16")
#: the matrix-unit shape the tiled kernels' MMA form multiplies with (``DeviceInfo.matrix_units``): float16
#: operands, float32 accumulators, 16 x 16 x 16
MMA_UNIT = ("float16", "float32", 16, 16, 16)
#: the subgroup width the MMA form's layout takes (8 subgroups in a group of ``GROUP_SIZE``)
MMA_SUBGROUP = 32
#: the pipeline of the MMA form at 128 x 128 tiles: K in slices of 32 (two multiplies of 16) through two shared
#: stages, loads a slice ahead, unchecked where the product allows, bands of 8 tile rows (H200, 4096^3: 1.24 ms
#: against 1.71 with slices of 16), slices read as 16-byte words where the operands allow (``gemm_pipeline``) and
#: staged as them (4096^3: 0.830 -> 0.809 ms, 8192 x 8192 x 2048 1.710 -> 1.684); at 64 x 64 tiles, slices of 16
#: or, deep, 64 (``mma_pipeline``)
MMA_PIPELINE = Pipeline(bk=32, stages=2, prefetch=1, aligned=1, swizzle=8, mma=1, vload=1, stage_words=1)
#: the K slice of the MMA form at 64 x 64 tiles (H200, ResNet-50's products at batch 16, 1024 -> 256 and
#: 512 -> 2048 channels: 0.058 and 0.059 ms against 0.071 and 0.075 with slices of 32), where it is not deep
MMA_SMALL_BK = 16
#: the K slice of the MMA form for deep products (``mma_pipeline``), through one stage: each barrier passes four
#: multiplies of 16 a subgroup and fragment.  H200, vulkan:0, float16 products at 64 x 64 tiles against slices of
#: 16 through two stages: 512 x 512 x 4608 0.106 -> 0.053 ms, 2048 x 768 x 3072 0.126 -> 0.090, 4096^3 1.81 -> 1.06
#: (two stages: the same, in twice the shared memory); at 128 x 128 tiles products were as fast as with slices
#: of 32, convolutions faster (``conv.conv_pipeline``)
MMA_DEEP_BK = 64
#: the least depth that takes ``MMA_DEEP_BK``: four slices, so that loads still overlap the multiply (ResNet-50's
#: 1x1 layer of 64 -> 256 channels at 56 x 56, one slice of 64: 0.085 ms against 0.076 in four of 16)
MMA_DEEP_LEAST = 4 * MMA_DEEP_BK


#: the least rows, columns and depth of a product the MMA form takes by itself (``mma_fits``)
MMA_LEAST = 64


def mma_fits(rows: int, cols: int, depth: int) -> bool:
    """Whether a product of rows x depth by depth x cols is large enough for the MMA form to take it by itself:
    ``MMA_LEAST`` or more of each, so that its 64 x 64 tiles and 16-deep slices are mostly full (a precaution: the
    H200's measurements of EfficientNet-B0, whose products and convolutions often have fewer than 64 channels, are
    of this rule together with the static rule's tile edges: float16, batch 16, 4.9 ms against 4.8-4.9 without the
    form; with every product raised to 64 x 64 tiles for the form, 13.0 ms)."""
    return min(rows, cols, depth) >= MMA_LEAST


def mma_pipeline(base: Pipeline, micro: int, deep: bool = False) -> Pipeline:
    """``base`` (an MMA form's pipeline) with the K slice of the tile edge: ``MMA_DEEP_BK`` through one stage where
    the caller says the product is ``deep`` (``deep_slices``), else ``MMA_SMALL_BK`` at micro-tiles of 4."""
    if deep:
        return base._replace(bk=MMA_DEEP_BK, stages=1)
    return base._replace(bk=MMA_SMALL_BK) if micro == 4 else base


def deep_slices(depth: int, channels: int | None = None) -> bool:
    """Whether a product of ``depth`` takes the MMA form's 64-deep slices: ``MMA_DEEP_LEAST`` deep or more, in
    whole slices (for a convolution, whole slices of a group's input ``channels``, so that each lies within one
    tap of the window: ``conv_tiled.dlk``'s CINNER)."""
    whole = depth if channels is None else channels
    return depth >= MMA_DEEP_LEAST and whole > 0 and whole % MMA_DEEP_BK == 0


def takes_mma(info: DeviceInfo, elem: str) -> bool:
    """Whether the tiled kernels multiply float16 (``elem``) on the device's matrix units: where it lists
    ``MMA_UNIT``, has subgroups of ``MMA_SUBGROUP`` and its kernel language has the dialect's matrix macros
    (``render.MMA_LANGUAGES``)."""
    return (elem == "f16" and MMA_UNIT in info.matrix_units and info.subgroup_size == MMA_SUBGROUP
            and info.kernel_language in MMA_LANGUAGES)


def mma_applies(info: DeviceInfo, elem: str, micro: int, large: bool, pipeline: Pipeline | None = None) -> bool:
    """Whether a tiled product or convolution of element type ``elem`` at a micro-tile edge takes the MMA form: the
    device takes it (``takes_mma``), the tiles are 64 x 64 or more, the product is ``large`` (``mma_fits``, or a
    forced pipeline) and shared memory holds the stages and scratch of ``pipeline`` (a forced one; else
    ``MMA_PIPELINE``'s)."""
    p = MMA_PIPELINE if pipeline is None else pipeline
    return (takes_mma(info, elem) and micro >= 4 and large
            and info.local_memory >= tiled_shared_bytes(elem, micro, p.bk, p.stages, True))


def without_mma(pipeline: Pipeline) -> Pipeline:
    """A pipeline asking for the MMA form, as the usual multiply runs it: K slices of 16, no words."""
    return pipeline._replace(mma=0, bk=16, vload=0, stage_words=0) if pipeline.mma else pipeline


_pipeline_state = threading.local()


@contextlib.contextmanager
def forcing_pipeline(pipeline: Pipeline) -> Iterator[None]:
    """Every float product and tiled convolution planned on this thread inside the block takes ``pipeline`` (a
    convolution its K slice, stages, runs, vector reads and MMA form; vector reads where the micro-tile edge is 4 or
    more, unchecked loads where the product's shape allows, the MMA form where the device and tile take it, else K
    slices of 16 on the usual multiply): what tests and benchmarks use to run each form on every device."""
    if (pipeline.bk not in (8, 16, 32, 64) or pipeline.stages not in (1, 2) or pipeline.swizzle < 0
            or (pipeline.bk >= 32 and not pipeline.mma) or (pipeline.mma and (pipeline.bk == 8 or pipeline.vec))
            or (pipeline.vload and not (pipeline.mma and pipeline.prefetch))
            or (pipeline.stage_words and not pipeline.vload)):
        raise ValueError(f"pipeline {pipeline!r}: K slices of 8 or 16 (16, 32 or 64 with mma, which takes no vec; "
                         "vload only with mma and prefetch, stage_words only with vload), 1 or 2 stages, a "
                         "swizzle of 0 or more")
    before = getattr(_pipeline_state, "forced", None)
    _pipeline_state.forced = pipeline
    try:
        yield
    finally:
        _pipeline_state.forced = before


def forced_pipeline() -> Pipeline | None:
    """The pipeline forced on this thread (``forcing_pipeline``), or None."""
    return getattr(_pipeline_state, "forced", None)


def gemm_pipeline(info: DeviceInfo, elem: str, micro: int, M: int, N: int, K: int, words: bool = False) -> Pipeline:
    """The tiled GEMM's pipeline for a float product of M x N x K on a device with a micro-tile edge: the one forced
    on this thread, else ``MMA_PIPELINE`` where the device multiplies float16 on matrix units (``takes_mma``) with
    micro-tiles of 4 or 8 and the product is large enough (``mma_fits``), else ``GPU_PIPELINE`` (GLSL) or
    ``C_GPU_PIPELINE`` on GPUs for 128 x 128 tiles of float and half types, else the plain one; vector reads only
    for micro-tiles of 4 or more staged as float, unchecked loads only where the tiles and slices divide the
    product, the MMA form's 16-byte words only there and where ``words`` (A's rows run along k and B's along n, each
    row and batch a whole number of words, and the device aligns views to 16 bytes).  A forced pipeline takes the
    MMA form wherever the device and tile take it, the product large enough or not; one the device or tile cannot
    take is the same pipeline with K slices of 16 on the usual multiply."""
    p = forced_pipeline()
    mma = mma_applies(info, elem, micro, p is not None or mma_fits(M, N, K), p)
    if p is None:
        if mma:
            p = mma_pipeline(MMA_PIPELINE, micro, micro == 4 and deep_slices(K))
        elif info.device_type != "gpu" or micro != 8 or elem not in _PIPELINED:
            return Pipeline()
        else:
            p = GPU_PIPELINE if info.kernel_language == "glsl" else C_GPU_PIPELINE
    if not mma:
        p = without_mma(p)
    divides = M % (16 * micro) == 0 and N % (16 * micro) == 0 and K % p.bk == 0
    aligned = bool(p.aligned) and divides
    vload = bool(p.vload) and aligned and words and info.view_alignment % 16 == 0
    return p._replace(vec=p.vec if micro >= 4 and elem != "f64" else 0, aligned=int(aligned), vload=int(vload),
                      stage_words=int(vload and bool(p.stage_words)))


def tiled_shared_bytes(elem: str, micro: int, bk: int = BK, stages: int = 1, mma: bool = False,
                       cols: int | None = None) -> int:
    """Bytes of shared memory the tiled kernels stage for an element type and micro-tile edge (and a pipeline's K
    slice, stages and MMA form, and the micro-tile's columns where they differ from its edge)."""
    return sum(count * np.dtype(TYPES[kind]).itemsize
               for kind, _, count in tiled_shared(elem, micro, bk, stages, mma, cols))

_SCALARS = ("M", "N", "K", "s_am", "s_ak", "s_bk", "s_bn", "nbatch", "nb1", "s_a0", "s_a1", "s_b0", "s_b1",
            "off_a", "off_b", "off_y")
#: bytes of the float GEMM kernels' scalar arguments (the ints above, alpha, beta, s_cm, s_cn)
GEMM_SCALAR_BYTES = 4 * (len(_SCALARS) + 4)


def _flag_attr(op: Op, attrs: dict[str, Any], name: str) -> int:
    value = attrs.get(name, 0)
    if isinstance(value, bool):
        return int(value)
    if not isinstance(value, (int, np.integer)) or int(value) not in (0, 1):
        raise op.error(f"attribute {name!r} must be 0 or 1, got {value!r}")
    return int(value)


#: dtypes products compute in float32 (their kernels accumulate in it too)
_NARROW_FLOATS = ("float16", "bfloat16")


def _check_dtypes(op: Op, inputs: Sequence[TensorType]) -> None:
    first = inputs[0].dtype
    if (first.kind not in "fiu" or first.itemsize < 2) and first.name != "bfloat16":
        raise op.error(f"needs floating-point or integer inputs, got {first}")
    for t in inputs[1:]:
        if t.dtype != first:
            raise op.error(f"inputs must share one dtype, got {first} and {t.dtype}")


def _wide(arrays: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.dtype]:
    """float16 and bfloat16 compute in float32 (as the kernels do); everything else in its own dtype."""
    dtype = arrays[0].dtype
    if dtype.name in _NARROW_FLOATS:
        return [a.astype(np.float32) for a in arrays], dtype
    return list(arrays), dtype


# -- the GEMM kernels ---------------------------------------------------------------------------------
def _float_params(has_bias: bool, epilogue: Epilogue | None) -> tuple[Param, ...]:
    """The float GEMM kernels' parameters: a, b, the bias, an epilogue's buffers, y, the sizes and strides, alpha,
    beta, the bias strides, an epilogue's scalars."""
    params = [Param("a", "T", "in"), Param("b", "T", "in")]
    if has_bias:
        params.append(Param("bias", "T", "in"))
    params += list(epilogue.buffers) if epilogue else []
    params.append(Param("y", "T", "out"))
    params += [Param(n, "int", "scalar") for n in _SCALARS]
    params += [Param("alpha", "float", "scalar"), Param("beta", "float", "scalar"),
               Param("s_cm", "int", "scalar"), Param("s_cn", "int", "scalar")]
    params += list(epilogue.scalars) if epilogue else []
    return tuple(params)


def with_epilogue(name: str, epilogue: Epilogue | None) -> tuple[str, tuple[tuple[str, int], ...]]:
    """A kernel body from ``shaders/`` with ``epilogue`` in place of its DL_EPILOGUE line, and the defines that
    switch it on."""
    text = kernel_source(name)
    if not epilogue:
        return text, ()
    return text.replace("\nDL_EPILOGUE\n", "\n" + epilogue.text), (("EPILOGUE", 1),)


@functools.lru_cache(maxsize=256)
def gemm_spec(elem: str, tiled: bool, a_mfast: bool = False, b_nfast: bool = True,
              has_bias: bool = False, micro: int = 4, epilogue: Epilogue | None = None,
              runs: bool = False, pipeline: Pipeline = Pipeline(), unroll: bool = False) -> KernelSpec:
    """The GEMM kernel for element type ``elem`` (tiled or direct; layout, bias, micro-tile (edge and ``runs``,
    ``tile_runs``), pipeline and UNROLL hints (tiled) and epilogue variants: an epilogue's buffers come before y,
    its scalars last)."""
    params = _float_params(has_bias, epilogue)
    tail = f"{'_bias' if has_bias else ''}{f'_ep{epilogue.digest}' if epilogue else ''}"
    if tiled:
        body, extra = with_epilogue("gemm_tiled.dlk", epilogue)
        name = (f"gemm_tiled{micro}{'r' if runs else ''}_{elem}_{'m' if a_mfast else 'k'}{'n' if b_nfast else 'k'}"
                f"{pipeline.tag}{tail}")
        return KernelSpec(name, params, body, elem=elem,
                          shared=tiled_shared(elem, micro, pipeline.bk, pipeline.stages, bool(pipeline.mma),
                                              words=bool(pipeline.stage_words)),
                          local_size=(GROUP_SIZE,), views=("a", "b") if pipeline.vload else (),
                          defines=tiled_defines(micro, runs, pipeline.bk, unroll) + pipeline.defines
                          + (("A_MFAST", int(a_mfast)), ("B_NFAST", int(b_nfast)), ("HAS_BIAS", int(has_bias)),
                             ("INTEGER", 0)) + extra)
    body, extra = with_epilogue("gemm_small.dlk", epilogue)
    return KernelSpec(f"gemm_small_{elem}{tail}", params, body, elem=elem,
                      defines=(("HAS_BIAS", int(has_bias)), ("INTEGER", 0)) + extra)


@functools.lru_cache(maxsize=256)
def register_gemm_spec(elem: str, block: tuple[int, int], b_unit: bool, has_bias: bool = False,
                       epilogue: Epilogue | None = None) -> KernelSpec:
    """The register-blocked GEMM kernel (``gemm_register.dlk``: a ``block`` of (rows, columns) of y per work item,
    no shared memory) for element type ``elem``; ``b_unit``: B's columns are adjacent (``s_bn == 1``)."""
    body, extra = with_epilogue("gemm_register.dlk", epilogue)
    name = (f"gemm_register{block[0]}x{block[1]}_{elem}_{'u' if b_unit else 's'}{'_bias' if has_bias else ''}"
            f"{f'_ep{epilogue.digest}' if epilogue else ''}")
    return KernelSpec(name, _float_params(has_bias, epilogue), body, elem=elem,
                      defines=(("TM", block[0]), ("TN", block[1]), ("B_UNIT", int(b_unit)),
                               ("HAS_BIAS", int(has_bias)), _tiles.REGISTER_DEFINE) + extra)


@functools.lru_cache(maxsize=64)
def integer_gemm_spec(a_type: str, b_type: str, tiled: bool = False, a_mfast: bool = False, b_nfast: bool = True,
                      micro: int = 4, runs: bool = False, unroll: bool = False) -> KernelSpec:
    """The GEMM kernel (tiled or direct) with exact int32 accumulation of zero-point-shifted integer operands
    (``unroll``: the tiled kernel's UNROLL hints, ``unrolls_tiles``)."""
    params = [Param("a", a_type), Param("b", b_type), Param("za", a_type), Param("zb", b_type),
              Param("y", "int", "out")]
    params += [Param(n, "int", "scalar") for n in _SCALARS + ("s_za", "s_zb")]
    if tiled:
        return KernelSpec(f"gemm_tiled{micro}{'r' if runs else ''}_integer_{a_type}_{b_type}_{'m' if a_mfast else 'k'}"
                          f"{'n' if b_nfast else 'k'}", tuple(params), kernel_source("gemm_tiled.dlk"), elem="int",
                          shared=integer_shared(micro), local_size=(GROUP_SIZE,),
                          defines=tiled_defines(micro, runs, BK, unroll)
                          + (("A_MFAST", int(a_mfast)), ("B_NFAST", int(b_nfast)), ("HAS_BIAS", 0), ("INTEGER", 1)))
    return KernelSpec(f"gemm_small_integer_{a_type}_{b_type}", tuple(params), kernel_source("gemm_small.dlk"),
                      elem="int", defines=(("HAS_BIAS", 0), ("INTEGER", 1)))


def integer_shared(micro: int) -> tuple[tuple[str, str, int], ...]:
    """Shared-memory staging of the tiled kernels' INTEGER forms (int tiles, padded as the float ones)."""
    return tuple(("int", name, count) for _, name, count in tiled_shared("float", micro))


def tiled_fits(info: DeviceInfo) -> bool:
    """True when the device takes the tiled kernel's work-group size and shared memory."""
    return (info.max_work_group_size >= GROUP_SIZE and info.max_work_item_sizes[0] >= GROUP_SIZE
            and info.local_memory >= SHARED_BYTES)


def _merge_batch(dims: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Drop size-1 batch dimensions and merge neighbours that address memory as one: (size, stride_a, stride_b)."""
    out: list[tuple[int, int, int]] = []
    for size, sa, sb in dims:
        if size == 1:
            continue
        if out:
            psize, psa, psb = out[-1]
            if psa == sa * size and psb == sb * size:
                out[-1] = (psize * size, sa, sb)
                continue
        out.append((size, sa, sb))
    return out


def gemm_steps(info: DeviceInfo, elem: str, M: int, N: int, K: int, s_am: int, s_ak: int, s_bk: int, s_bn: int,
               batch: Sequence[tuple[int, int, int]] = (), alpha: float = 1.0, beta: float = 0.0,
               bias: tuple[int, int, int] | None = None, a_arg: Any = ("in", 0), b_arg: Any = ("in", 1),
               y_arg: Any = ("out", 0), epilogue: Epilogue | None = None,
               epilogue_args: Sequence[Any] = ()) -> list[Launch]:
    """Launches computing y = alpha * A @ B (+ beta * bias) for strided, batched A and B.

    ``batch`` lists batch dimensions outermost first as (size, stride in A, stride in B),
    0 strides broadcasting; y is contiguous (batch..., M, N).  ``bias`` is
    (input index, row stride, column stride).  ``epilogue`` (with its buffers' ``epilogue_args``) is applied to
    each element before its store.
    """
    dims = _merge_batch(list(batch))
    # a batch that only A has, over whole matrices of A, is more rows of one product
    while bias is None and dims and dims[-1][2] == 0 and dims[-1][1] == M * s_am:
        M *= dims.pop()[0]
    if M * N == 0:
        return []
    work = M * N * max(K, 1) * math.prod(d[0] for d in dims)
    tail = (float(alpha), float(beta), bias[1] if bias else 0, bias[2] if bias else 0)
    tail += epilogue.values if epilogue else ()
    buffers = [a_arg, b_arg] + ([("in", bias[0])] if bias else []) + list(epilogue_args) + [y_arg]
    strides = (s_am, s_ak, s_bk, s_bn)
    if register_kernels(info):
        _tiles.note(work)
        block = register_block(M, N)
        spec = register_gemm_spec(elem, block, s_bn == 1, bias is not None, epilogue)
        return _batched_launches(info, spec, buffers, tail, M, N, K, strides, dims, block=block)
    tiled = tiled_fits(info) and min(M, N) >= 16 and work >= 1 << 16
    a_mfast = s_am == 1 and s_ak != 1
    b_nfast = s_bn == 1 or s_bk != 1
    nbatch = math.prod(d[0] for d in dims[-2:])
    micro = micro_tile(info, M, N, nbatch, K, elem, elem in _PIPELINED) if tiled else 4
    words = s_ak == 1 and s_bn == 1 and all(v % 8 == 0 for v in (s_am, s_bk, *(s for d in dims for s in d[1:])))
    pipeline = gemm_pipeline(info, elem, micro, M, N, K, words) if tiled else Pipeline()
    runs = tiled and pipeline.takes_runs(info)
    spec = gemm_spec(elem, tiled, a_mfast, b_nfast, bias is not None, micro, epilogue, runs, pipeline,
                     tiled and unrolls_tiles(info))
    return _batched_launches(info, spec, buffers, tail, M, N, K, strides, dims, tiled, micro)


def register_block(M: int, N: int) -> tuple[int, int]:
    """The (rows, columns) block of y a work item of the register-blocked GEMM computes: 8 x 8 (64 accumulators,
    eight 8-wide vector multiply-adds a step), narrower where y has fewer rows or columns."""
    return (8 if M >= 8 else 4 if M >= 4 else 1), (8 if N >= 8 else 4 if N >= 4 else 1)


def register_kernels(info: DeviceInfo) -> bool:
    """Whether float products and convolutions run on the register-blocked kernels (``gemm_register.dlk``,
    ``conv_register.dlk``, ``conv_rows.dlk``) rather than the tiled ones: the shape forced on this thread
    (``tiles.forcing``), else on CPU devices, where the tiled kernels' shared-memory staging and barriers cost more
    than they save (PoCL: MobileNetV2's 1x1 products 4-10x faster, lavapipe 2-3x)."""
    chosen = _tiles.forced()
    return chosen == _tiles.REGISTER if chosen is not None else info.device_type == "cpu"


#: work-group size of the register-blocked kernels where the launch gives every compute unit four groups of it
REGISTER_GROUP = 16


def register_local(info: DeviceInfo, items: int) -> int:
    """A 1-D work-group size for ``items`` work items of a register-blocked kernel: ``REGISTER_GROUP``, or the
    device's SIMD width (its subgroup size; 1 where it states none) where that would leave a compute unit fewer than
    four groups.  Two sizes only: a CPU driver compiles a kernel once per work-group size it is launched with (PoCL
    at the first launch, Vulkan a pipeline each), so a size per launch multiplied a model's first run (an OCR
    classifier's 3 -> 7.6 s on PoCL); a group narrower than lavapipe's 8 lanes left them idle."""
    enough = items >= REGISTER_GROUP * 4 * max(1, info.compute_units)
    return local_1d(info, REGISTER_GROUP if enough else max(1, min(info.subgroup_size or 1, REGISTER_GROUP)))


def integer_gemm_steps(info: DeviceInfo, a_type: str, b_type: str, M: int, N: int, K: int, s_am: int, s_ak: int,
                       s_bk: int, s_bn: int, batch: Sequence[tuple[int, int, int]], s_za: int,
                       s_zb: int) -> list[Launch]:
    """Launches computing the int32 y = (A - za) @ (B - zb) of integer operands (inputs a, b, za, zb: 0-3),
    strided and batched as for ``gemm_steps``; the zero points are read at ``m * s_za`` and ``n * s_zb``."""
    dims = _merge_batch(list(batch))
    if M * N == 0:
        return []
    nbatch = math.prod(d[0] for d in dims[-2:])
    tiled = tiled_fits(info) and min(M, N) >= 16 and M * N * max(K, 1) * math.prod(d[0] for d in dims) >= 1 << 16
    micro = micro_tile(info, M, N, nbatch, K, "int") if tiled else 4
    spec = integer_gemm_spec(a_type, b_type, tiled, s_am == 1 and s_ak != 1, s_bn == 1 or s_bk != 1, micro,
                             tiled and tile_runs(info), tiled and unrolls_tiles(info))
    return _batched_launches(info, spec, [("in", 0), ("in", 1), ("in", 2), ("in", 3), ("out", 0)], (s_za, s_zb),
                             M, N, K, (s_am, s_ak, s_bk, s_bn), dims, tiled, micro)


def _batched_launches(info: DeviceInfo, spec: KernelSpec, buffers: Sequence[Any], tail: tuple, M: int, N: int,
                      K: int, strides: tuple[int, int, int, int], dims: list[tuple[int, int, int]], tiled: bool = False,
                      micro: int = 4, block: tuple[int, int] | None = None) -> list[Launch]:
    """One launch of a GEMM kernel per index of the batch dimensions past the two it walks itself (``block``: the
    register-blocked kernel's)."""
    outer, inner = dims[:-2], dims[-2:]
    while len(inner) < 2:
        inner.insert(0, (1, 0, 0))
    (nb0, s_a0, s_b0), (nb1, s_a1, s_b1) = inner
    nbatch = nb0 * nb1
    if block is not None:
        blocks = -(-M // block[0]) * -(-N // block[1]) * nbatch
        local = (register_local(info, blocks),)
        global_size = groups_for(blocks, local[0], info)
    elif tiled:
        ntiles = -(-M // (16 * micro)) * -(-N // (16 * micro)) * nbatch
        groups = max(1, min(ntiles, info.max_work_groups[0], 65535 * 16))
        global_size, local = (groups * GROUP_SIZE,), (GROUP_SIZE,)
    else:
        local1 = local_1d(info)
        global_size, local = groups_for(nbatch * M * N, local1, info), (local1,)
    steps = []
    for index in np.ndindex(*[d[0] for d in outer]):
        off_a = sum(i * d[1] for i, d in zip(index, outer))
        off_b = sum(i * d[2] for i, d in zip(index, outer))
        off_y = int(np.ravel_multi_index(index, [d[0] for d in outer])) * nbatch * M * N if outer else 0
        args = (*buffers, M, N, K, *strides, nbatch, nb1, s_a0, s_a1, s_b0, s_b1, off_a, off_b, off_y, *tail)
        steps.append(Launch(spec, args, global_size, local))
    return steps


# -- matmul -------------------------------------------------------------------------------------------
def _matmul_shapes(op: Op, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], int, int, int,
                                                                               tuple[int, ...]]:
    """(batch shape, M, N, K, output shape) of a NumPy matmul, or InvalidArgument."""
    if len(a) == 0 or len(b) == 0:
        raise op.error(f"operands must have at least one dimension, got shapes {a} and {b}")
    a2 = (1, a[0]) if len(a) == 1 else a
    b2 = (b[0], 1) if len(b) == 1 else b
    M, K = a2[-2:]
    K2, N = b2[-2:]
    if K != K2:
        raise op.error(f"shapes {a} and {b} do not line up: {K} columns against {K2} rows")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise op.error(f"batch dimensions of {a} and {b} do not broadcast") from None
    out = batch + ((M,) if len(a) > 1 else ()) + ((N,) if len(b) > 1 else ())
    return batch, M, N, K, out


def _then(first: Any, then: Any) -> Any:
    """A call of ``first`` and then ``then`` (``first`` alone where ``then`` is None)."""
    if then is None:
        return first

    def both() -> None:
        first()
        then()
    return both


@register
class MatMul(Op):
    """matmul(a, b[, *extra], epilogue=(), epilogue_inputs=0): NumPy's matmul (1-D operands promoted and
    squeezed; batch dimensions broadcast), then the epilogue (``epilogue.py``) on each element."""

    name = "matmul"
    min_inputs = 2
    max_inputs = 2 + _epilogue.MAX_EPILOGUE_INPUTS
    kernel_dtypes = frozenset({"float32", "float16", "float64"})

    def check(self, inputs, attrs):
        extra = set(attrs) - {"epilogue", "epilogue_inputs", ALLOW_TF32}
        if extra:
            raise self.error(f"unknown attribute(s) {sorted(extra)}; it takes an epilogue and {ALLOW_TF32!r} only")
        own, extras = _epilogue.split(self, inputs, attrs)
        if len(own) != 2:
            raise self.error(f"takes 2 inputs before the epilogue's, got {len(own)}")
        _check_dtypes(self, own)
        out = _matmul_shapes(self, own[0].shape, own[1].shape)[4]
        return {**_epilogue.check(self, TensorType(out, own[0].dtype), extras, attrs), **tf32_attr(self, attrs)}

    def infer(self, inputs, attrs):
        out = _matmul_shapes(self, inputs[0].shape, inputs[1].shape)[4]
        return [TensorType(out, inputs[0].dtype)]

    def reference(self, inputs, attrs):
        (a, b), dtype = _wide(inputs[:2])
        with np.errstate(all="ignore"):
            y = np.asarray(np.matmul(a, b), dtype=dtype)
        return [_epilogue.apply_reference(y, inputs[2:], attrs)]

    def reference_into(self, inputs, outputs, attrs):
        a, b = inputs[:2]
        y = outputs[0]
        if a.dtype.name in _NARROW_FLOATS or a.ndim < 2 or b.ndim < 2 or not y.size:
            return super().reference_into(inputs, outputs, attrs)  # (reference applies the epilogue)
        with np.errstate(all="ignore"):
            np.matmul(a, b, out=y)
        _epilogue.apply(y, inputs[2:], attrs)
        return None

    def bind_into(self, inputs, outputs, attrs):
        a, b = inputs[:2]
        y = outputs[0]
        if a.dtype.name in _NARROW_FLOATS or a.ndim < 2 or b.ndim < 2 or not y.size:
            return super().bind_into(inputs, outputs, attrs)
        return _then(functools.partial(np.matmul, a, b, out=y), _epilogue.bind(y, inputs[2:], attrs))

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and attrs.get("epilogue"):
            own, extras = _epilogue.split(self, inputs, attrs)
            why = _epilogue.unsupported(self.infer(own, attrs)[0], extras, attrs, info, 3, GEMM_SCALAR_BYTES)
        return why

    def plan(self, inputs, outputs, attrs, info):
        dims, M, N, K = _batch_dims(self, inputs[0].shape, inputs[1].shape)
        elem = dialect_type(inputs[0].dtype)
        own, extras = _epilogue.split(self, inputs, attrs)
        code = _epilogue.code(outputs[0], extras, attrs)
        return Plan(gemm_steps(info, elem, M, N, K, K, 1, N, 1, dims, epilogue=code,
                               epilogue_args=[("in", len(own) + j) for j in range(len(extras))]))


def _batch_dims(op: Op, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[list[tuple[int, int, int]], int, int, int]:
    """The batch dimensions of a NumPy matmul of contiguous ``a`` and ``b`` as ``gemm_steps`` takes them (size,
    stride in A, stride in B; 0 where broadcast), and M, N, K."""
    batch, M, N, K, _ = _matmul_shapes(op, a, b)
    a2 = (1, a[0]) if len(a) == 1 else a
    b2 = (b[0], 1) if len(b) == 1 else b
    rank = len(batch)
    ab, bb = (1,) * (rank - len(a2) + 2) + a2[:-2], (1,) * (rank - len(b2) + 2) + b2[:-2]
    sa, sb = M * K, K * N  # stride of each batch dimension, innermost first
    strides_a, strides_b = [], []
    for d in reversed(range(rank)):
        strides_a.append(0 if ab[d] == 1 else sa)
        strides_b.append(0 if bb[d] == 1 else sb)
        sa *= ab[d]
        sb *= bb[d]
    dims = [(batch[d], strides_a[rank - 1 - d], strides_b[rank - 1 - d]) for d in range(rank)]
    return dims, M, N, K


#: integer operand types of matmul_integer and conv_integer
INTEGER_OPERANDS = ("int8", "uint8", "int16", "uint16")


def zero_point_stride(op: Op, zp: TensorType, n: int, what: str) -> int:
    """0 for a zero point of one element, 1 for one of ``n`` (per row, column or channel); InvalidArgument
    naming the op otherwise."""
    if zp.size == 1 and len(zp.shape) <= 1:
        return 0
    if zp.shape == (n,):
        return 1
    raise op.error(f"{what} must be a scalar or have shape ({n},), got {zp.shape}")


@register
class MatMulInteger(Op):
    """matmul_integer(a, b, a_zero_point, b_zero_point): int32 ``(a - a_zero_point) @ (b - b_zero_point)``
    (ONNX MatMulInteger), accumulated exactly.

    a and b are 8- or 16-bit integers (NumPy matmul shapes: 1-D operands, broadcast batches); each zero
    point has its operand's dtype and is a scalar, or per row of a (shape (M,)) / per column of b ((N,)).
    """

    name = "matmul_integer"
    min_inputs = 4
    max_inputs = 4

    def check(self, inputs, attrs):
        if attrs:
            raise self.error(f"unknown attribute(s) {sorted(attrs)}; it takes none")
        a, b, za, zb = inputs
        for t, what in ((a, "a"), (b, "b")):
            if t.dtype.name not in INTEGER_OPERANDS:
                raise self.error(f"{what} must be one of {list(INTEGER_OPERANDS)}, got {t.dtype}")
        for z, t, what in ((za, a, "a_zero_point"), (zb, b, "b_zero_point")):
            if z.dtype != t.dtype:
                raise self.error(f"{what} must have its operand's dtype {t.dtype}, got {z.dtype}")
        _, M, N, _, _ = _matmul_shapes(self, a.shape, b.shape)
        zero_point_stride(self, za, M, "a_zero_point")
        zero_point_stride(self, zb, N, "b_zero_point")
        return {}

    def infer(self, inputs, attrs):
        return [TensorType.of(_matmul_shapes(self, inputs[0].shape, inputs[1].shape)[4], np.int32)]

    def reference(self, inputs, attrs):
        a, b, za, zb = inputs
        fa = a.astype(np.float64) - za.astype(np.float64).reshape((-1, 1) if za.size > 1 else ())
        fb = b.astype(np.float64) - zb.astype(np.float64).reshape((-1,) if zb.size > 1 else ())
        return [np.rint(np.matmul(fa, fb)).astype(np.int32)]  # exact: products and sums below 2**53

    def unsupported(self, inputs, attrs, info):
        return device_gap(self, [*inputs, *self.infer(inputs, attrs)], info)

    def plan(self, inputs, outputs, attrs, info):
        a, b, za, zb = inputs
        dims, M, N, K = _batch_dims(self, a.shape, b.shape)
        s_za = zero_point_stride(self, za, M, "a_zero_point")
        s_zb = zero_point_stride(self, zb, N, "b_zero_point")
        return Plan(integer_gemm_steps(info, dialect_type(a.dtype), dialect_type(b.dtype), M, N, K, K, 1, N, 1,
                                       dims, s_za, s_zb))


# -- gemm ----------------------------------------------------------------------------------------------
@register
class Gemm(Op):
    """gemm(A, B[, C][, *extra], alpha=1, beta=1, transA=0, transB=0, epilogue=(), epilogue_inputs=0): ONNX Gemm,
    Y = alpha * A' @ B' + beta * C, then the epilogue (``epilogue.py``) on each element.

    A' is A transposed when transA, B' likewise; C broadcasts to (M, N) one way.
    """

    name = "gemm"
    min_inputs = 2
    max_inputs = 3 + _epilogue.MAX_EPILOGUE_INPUTS
    kernel_dtypes = frozenset({"float32", "float16", "float64"})

    def check(self, inputs, attrs):
        extra = set(attrs) - {"alpha", "beta", "transA", "transB", "epilogue", "epilogue_inputs", ALLOW_TF32}
        if extra:
            raise self.error(f"unknown attribute(s) {sorted(extra)}; it takes ['alpha', 'beta', 'transA', 'transB'"
                             f", {ALLOW_TF32!r}] and an epilogue")
        inputs, extras = _epilogue.split(self, inputs, attrs)
        if len(inputs) not in (2, 3):
            raise self.error(f"takes 2 or 3 inputs before the epilogue's, got {len(inputs)}")
        _check_dtypes(self, inputs)
        out = {"alpha": _float_attr(self, attrs, "alpha", 1.0), "beta": _float_attr(self, attrs, "beta", 1.0),
               "transA": _flag_attr(self, attrs, "transA"), "transB": _flag_attr(self, attrs, "transB")}
        a, b = inputs[0].shape, inputs[1].shape
        if len(a) != 2 or len(b) != 2:
            raise self.error(f"A and B must be 2-D, got shapes {a} and {b}")
        M, K = a[::-1] if out["transA"] else a
        K2, N = b[::-1] if out["transB"] else b
        if K != K2:
            raise self.error(f"A' is {M}x{K} and B' is {K2}x{N}: inner dimensions differ")
        if len(inputs) == 3:
            c = inputs[2].shape
            if len(c) > 2 or any(s not in (1, want) for s, want in zip(c[::-1], (N, M))):
                raise self.error(f"C of shape {c} does not broadcast to ({M}, {N})")
        return {**out, **_epilogue.check(self, TensorType((M, N), inputs[0].dtype), extras, attrs),
                **tf32_attr(self, attrs)}

    @staticmethod
    def _mnk(inputs, attrs) -> tuple[int, int, int]:
        a, b = inputs[0].shape, inputs[1].shape
        M, K = a[::-1] if attrs["transA"] else a
        N = b[0] if attrs["transB"] else b[1]
        return M, N, K

    def infer(self, inputs, attrs):
        M, N, _ = self._mnk(inputs, attrs)
        return [TensorType((M, N), inputs[0].dtype)]

    def reference(self, inputs, attrs):
        n = len(inputs) - attrs.get("epilogue_inputs", 0)
        extras, inputs = inputs[n:], inputs[:n]
        arrays, dtype = _wide(inputs)
        a = arrays[0].T if attrs["transA"] else arrays[0]
        b = arrays[1].T if attrs["transB"] else arrays[1]
        kind = a.dtype.type
        with np.errstate(all="ignore"):
            y = np.matmul(a, b)
            if attrs["alpha"] != 1:
                y *= kind(attrs["alpha"])
            if len(arrays) == 3:
                y += arrays[2] if attrs["beta"] == 1 else kind(attrs["beta"]) * arrays[2]
        M, N, _ = self._mnk([TensorType.of(x.shape, x.dtype) for x in inputs], attrs)
        y = np.asarray(np.broadcast_to(y, (M, N)), dtype=dtype)
        return [_epilogue.apply_reference(y, extras, attrs)]

    def reference_into(self, inputs, outputs, attrs):
        y = outputs[0]
        if inputs[0].dtype.name in _NARROW_FLOATS or not y.size:
            return super().reference_into(inputs, outputs, attrs)  # (reference applies the epilogue)
        n = len(inputs) - attrs.get("epilogue_inputs", 0)
        with np.errstate(all="ignore"):
            self._product_into(inputs[:n], y, attrs)
        _epilogue.apply(y, inputs[n:], attrs)
        return None

    def bind_into(self, inputs, outputs, attrs):
        y = outputs[0]
        if inputs[0].dtype.name in _NARROW_FLOATS or not y.size:
            return super().bind_into(inputs, outputs, attrs)
        n = len(inputs) - attrs.get("epilogue_inputs", 0)
        own = tuple(inputs[:n])
        return _then(lambda: self._product_into(own, y, attrs), _epilogue.bind(y, inputs[n:], attrs))

    @staticmethod
    def _product_into(inputs: Sequence[np.ndarray], y: np.ndarray, attrs: dict[str, Any]) -> None:
        """alpha * A' B' (+ beta * C) into ``y``."""
        a = inputs[0].T if attrs["transA"] else inputs[0]
        b = inputs[1].T if attrs["transB"] else inputs[1]
        kind = a.dtype.type
        np.matmul(a, b, out=y)
        if attrs["alpha"] != 1:
            y *= kind(attrs["alpha"])
        if len(inputs) == 3:
            y += inputs[2] if attrs["beta"] == 1 else kind(attrs["beta"]) * inputs[2]

    def unsupported(self, inputs, attrs, info):
        why = super().unsupported(inputs, attrs, info)
        if why is None and attrs.get("epilogue"):
            own, extras = _epilogue.split(self, inputs, attrs)
            why = _epilogue.unsupported(self.infer(own, attrs)[0], extras, attrs, info, len(own) + 1,
                                        GEMM_SCALAR_BYTES)
        return why

    def plan(self, inputs, outputs, attrs, info):
        inputs, extras = _epilogue.split(self, inputs, attrs)
        M, N, K = self._mnk(inputs, attrs)
        s_am, s_ak = (1, M) if attrs["transA"] else (K, 1)
        s_bk, s_bn = (1, K) if attrs["transB"] else (N, 1)
        bias = None
        if len(inputs) == 3:
            c = (1,) * (2 - len(inputs[2].shape)) + inputs[2].shape
            bias = (2, 0 if c[0] == 1 else c[1], 0 if c[1] == 1 else 1)
        elem = dialect_type(inputs[0].dtype)
        code = _epilogue.code(outputs[0], extras, attrs)
        return Plan(gemm_steps(info, elem, M, N, K, s_am, s_ak, s_bk, s_bn, alpha=attrs["alpha"],
                               beta=attrs["beta"], bias=bias, epilogue=code,
                               epilogue_args=[("in", len(inputs) + j) for j in range(len(extras))]))


# -- vendor libraries -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class GemmCall:
    """An op call in plain GEMM terms, for a vendor library.

    ``y[batch..., M, N] = alpha * op(A) @ op(B) + beta * C`` where ``a_shape``/``b_shape``
    are the stored shapes (``trans_a``: A is stored K x M), batch dimensions
    broadcast NumPy-style (matmul only), and ``c_shape`` (gemm only, None when
    absent) broadcasts one way to (M, N).  ``out_shape`` is the output as stored.
    """

    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    trans_a: bool
    trans_b: bool
    alpha: float
    beta: float
    c_shape: tuple[int, ...] | None
    dtype: np.dtype


def gemm_call(name: str, inputs: Sequence[TensorType], outputs: Sequence[TensorType],
              attrs: dict[str, Any]) -> GemmCall:
    """Describe a ``matmul`` or ``gemm`` call (inputs, outputs, checked attrs as vendor_op gets them)."""
    if name == "matmul":
        return GemmCall(inputs[0].shape, inputs[1].shape, outputs[0].shape, False, False, 1.0, 0.0, None,
                        inputs[0].dtype)
    if name == "gemm":
        return GemmCall(inputs[0].shape, inputs[1].shape, outputs[0].shape, bool(attrs["transA"]),
                        bool(attrs["transB"]), float(attrs["alpha"]), float(attrs["beta"]),
                        inputs[2].shape if len(inputs) == 3 else None, inputs[0].dtype)
    raise ValueError(f"gemm_call: {name!r} is not a matrix product")


def vendor_contract() -> str:
    """The contract of ``Device.vendor_op`` for the matrix-product ops (returned as text; also this docstring).

    ``Device.vendor_op(name)`` returns None (use the op's kernels) or a callable
    ``fn(inputs, outputs, attrs, in_buffers, out_buffers, wait) -> Event``:

    * ``inputs`` / ``outputs``: TensorTypes (shape, dtype) of the call, C-contiguous;
      ``attrs``: the op's checked attributes (defaults filled in: gemm always has
      ``alpha``, ``beta``, ``transA``, ``transB``; matmul has none).
    * ``in_buffers`` / ``out_buffers``: Buffers of this device, in the op's input
      and output order (a Buffer may be a view: address = ``handle.ptr + offset``);
      they may be larger than the tensor (pooled); use only the first
      ``size * itemsize`` bytes.  Inputs and outputs never overlap.
    * ``wait``: events the work must follow; the function must not block on them
      but order its work after them (on CUDA: ``stream.wait_event`` on each
      native event not yet done, on the device's stream).
    * It queues the work in order on the device (the device's own stream) and
      returns an Event of this device that completes when the outputs are
      written; later steps of the plan wait on that event.  It is called under
      no lock: submit through ``Device._submit`` so deferred waits and the
      device's in-order backlog are respected.
    * Empty outputs never reach it; empty K (inner dimension 0) does, and must
      give ``beta * C`` (gemm) or zeros.
    * Semantics: matmul is ``numpy.matmul``; gemm is ONNX Gemm.  ``gemm_call``
      turns either into a GemmCall; the dtype is float32 or float16 (float16
      should accumulate in float32).
    * The runner asks ``vendor_op(op.name)`` for every op on every call
      (``plan_for``): answer fast, and None for anything it does not handle.
    """
    return vendor_contract.__doc__ or ""
