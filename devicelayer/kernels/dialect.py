"""The portable kernel dialect: one kernel body, rendered to CUDA C, OpenCL C and GLSL compute.

A body is C that all three languages share (declarations, ``for``, ``if``,
``?:``, arithmetic, ``return``, indexing ``x[i]``) plus these names:

| dialect | meaning |
| --- | --- |
| ``GID(d)``, ``LID(d)``, ``GROUP(d)``, ``LSIZE(d)``, ``NGROUPS(d)`` | global / local id, group id, group size, group count in dimension ``d`` (0-2), as ``int`` |
| ``BARRIER()`` | work-group barrier over shared memory |
| ``FOR_EACH(i, n)`` | grid-stride loop: ``i`` runs over ``0..n-1`` spread across every work item launched |
| ``UNROLL`` | before a loop of constant trip count: unroll it fully (a hint: ``#pragma unroll``, GLSL's ``[[unroll]]``), so that an array it indexes stays in registers |
| ``CAST(type, v)`` | conversion |
| ``VEC4``, ``LDS4(arr, i)`` | a vector of 4 floats (components ``.x``, ``.y``, ``.z``, ``.w``); 4 floats of a shared ``float`` array read as one, ``i`` a multiple of 4 (shared arrays are 16-byte aligned) |
| ``T``, ``ACC`` | the kernel's element type and its compute type (``float`` for half) |
| ``TO_ACC(v)``, ``FROM_ACC(v)`` | element type to compute type and back |
| ``char``, ``uchar``, ``i16``, ``u16``, ``i64``, ``u64``, ``f16``, ``f64``, ``bf16`` | sized types (``int``, ``uint``, ``float`` as usual); a bool tensor is a ``uchar`` buffer of 0 and 1; ``bf16`` (bfloat16, computed in ``float`` as half is) where the language has it (``render.BFLOAT16_LANGUAGES``) |
| ``dl_exp``, ``dl_log``, ``dl_sqrt``, ``dl_rsqrt``, ``dl_tanh``, ``dl_erf``, ``dl_abs``, ``dl_pow``, ``dl_floor``, ``dl_ceil``, ``dl_sin``, ``dl_cos``, ``dl_tan``, ``dl_asin``, ``dl_acos``, ``dl_atan``, ``dl_sinh``, ``dl_cosh``, ``dl_asinh``, ``dl_acosh``, ``dl_atanh``, ``dl_round`` (half to even), ``dl_div`` (division rounded as IEEE where ``/`` may not be), ``dl_trunc``, ``dl_sign``, ``dl_fmod``, ``dl_max``, ``dl_min``, ``dl_isnan``, ``dl_isinf``, ``DL_INF``, ``DL_NAN`` | float math (``dl_max``/``dl_min`` propagate NaN like NumPy); ``render.lacks`` says which a language has no ``f64`` form of |

Integer ``/`` and ``%`` behave as in C only for non-negative operands: GLSL
leaves negative operands undefined, and drivers differ.  Guard or rewrite
(``c < 0 ? (n - 1) - ((-c - 1) % n) : c % n``).

Shared memory is declared in the spec (``shared``), not in the body: GLSL
needs it at global scope.  Its arrays hold a dialect type, or ``WORD``:
16-byte words (``uvec4``, ``uint4``) that a kernel stores and reads whole.
Parameters are buffers first, then scalars, in launch order; GLSL gets
buffers as bindings 0.. and scalars as push constants.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: dialect type name -> NumPy dtype
TYPES = {"float": "float32", "f16": "float16", "f64": "float64", "int": "int32", "uint": "uint32",
         "i64": "int64", "u64": "uint64", "char": "int8", "uchar": "uint8", "i16": "int16", "u16": "uint16",
         "bf16": "bfloat16"}
#: NumPy dtype name -> dialect type name (bool buffers are bytes holding 0 or 1: OpenCL kernels may not take
#: ``bool*`` and GLSL's bool has no storage layout)
FROM_DTYPE = {**{v: k for k, v in TYPES.items()}, "bool": "uchar"}
#: the shared-memory type of 16-byte words (4 x uint32: ``uvec4``, ``uint4``), which a kernel stores and reads whole
WORD = "u32x4"


@dataclass(frozen=True)
class Param:
    """A kernel parameter: a buffer (``access`` "in", "out" or "inout") or a scalar (``access`` "scalar")."""

    name: str
    type: str
    access: str = "in"

    @property
    def is_buffer(self) -> bool:
        return self.access != "scalar"


@dataclass(frozen=True)
class KernelSpec:
    """One kernel in the dialect: parameters, body, shared memory, compile-time constants."""

    name: str
    params: tuple[Param, ...]
    body: str
    elem: str = "float"  # what T stands for
    shared: tuple[tuple[str, str, int], ...] = ()  # (type, name, count): a type of TYPES or WORD
    local_size: tuple[int, ...] = (64,)
    defines: tuple[tuple[str, int | float | str], ...] = ()
    #: input buffers the body also reads as 16-byte words, through ``<name>_v4`` (the same memory as an array of
    #: 4 x uint32: ``uvec4``, ``uint4``; element i of the word array is bytes 16 i to 16 i + 15 of the buffer)
    views: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        seen_scalar = False
        inputs = {p.name for p in self.params if p.access == "in"}
        for name in self.views:
            if name not in inputs:
                raise ValueError(f"{self.name}: a view of {name!r}, which is not an input buffer")
        for p in self.params:
            if p.access not in ("in", "out", "inout", "scalar"):
                raise ValueError(f"{self.name}: parameter {p.name} has access {p.access!r}")
            if p.is_buffer and seen_scalar:
                raise ValueError(f"{self.name}: buffers must come before scalars ({p.name})")
            seen_scalar = seen_scalar or not p.is_buffer
            resolved = self.elem if p.type == "T" else p.type
            if resolved not in TYPES:
                raise ValueError(f"{self.name}: parameter {p.name} has unknown type {p.type!r}")

    def resolve(self, type_name: str) -> str:
        """A parameter's type with ``T`` replaced by the element type."""
        return self.elem if type_name == "T" else type_name

    def dtypes_used(self) -> set[str]:
        """NumPy dtype names the kernel touches (decides the extensions a language needs)."""
        used = {TYPES[self.resolve(p.type)] for p in self.params} | {TYPES[self.elem]}
        used |= {TYPES[self.resolve(t)] for t, _, _ in self.shared if t != WORD}
        body = self.body
        for name, dtype in TYPES.items():
            if f"{name} " in body or f"({name})" in body or f"{name}(" in body or f"{name}," in body:
                used.add(dtype)
        return used

    def signature(self) -> str:
        """The launch signature, as ``Device.compile(signature=...)`` takes it.

        Buffers are ``void*``: a kernel of the library moves or reads the bits of whatever its op's types say
        (a copy kernel moves float32 as ``uint``, a bool tensor is read as ``uchar``, a bitcast tensor shares the
        buffer of another dtype), and the op's own type inference has checked them."""
        parts = []
        for p in self.params:
            parts.append(f"void* {p.name}" if p.is_buffer else f"{TYPES[self.resolve(p.type)]} {p.name}")
        return ", ".join(parts)


def dialect_type(dtype: np.dtype | str) -> str:
    """The dialect type name for a NumPy dtype."""
    try:
        return _DIALECT_TYPES[dtype]  # (asked thousands of times a compile; a dtype's name is slow to make)
    except (KeyError, TypeError):
        pass
    name = np.dtype(dtype).name
    if name not in FROM_DTYPE:
        raise ValueError(f"dtype {name} has no kernel type")
    if isinstance(dtype, (np.dtype, str)):
        _DIALECT_TYPES[dtype] = FROM_DTYPE[name]
    return FROM_DTYPE[name]


_DIALECT_TYPES: dict = {}
