"""GLSL -> SPIR-V (libshaderc in process when it loads, else ``glslc``), an on-disk SPIR-V cache, and reflection.

Nothing here touches a Vulkan device: it is the compiler half of the Vulkan backend.
"""

from __future__ import annotations

import collections
import ctypes
import hashlib
import os
import re
import shlex
import shutil
import struct
import subprocess
import tempfile
import threading
from array import array
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from devicelayer import lifecycle
from devicelayer.diskcache import cache_dir, write as write_cache
from devicelayer.errors import CompileError, InvalidArgument
from devicelayer.signature import Arg

SPIRV_MAGIC = 0x07230203
TARGET_ENV = "vulkan1.2"


def is_spirv(source) -> bool:
    """True when ``source`` is bytes starting with the SPIR-V magic number (either byte order)."""
    if not isinstance(source, (bytes, bytearray, memoryview)) or len(source) < 20:
        return False
    return struct.unpack_from("<I", bytes(source[:4]))[0] in (SPIRV_MAGIC, 0x03022307)


#: first bytes of a SPIR-V cache file; then sha256(key + SPIR-V), then the SPIR-V
CACHE_MAGIC = b"DLSPIRV1"
_CACHE_HEAD = len(CACHE_MAGIC) + 32


def _cache_read(path: Path, key: str) -> bytes | None:
    """The SPIR-V cached at ``path`` for ``key``; None when absent, truncated, corrupted or written for another key."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    spirv = data[_CACHE_HEAD:]
    if data[:len(CACHE_MAGIC)] != CACHE_MAGIC or len(spirv) % 4 or not is_spirv(spirv):
        return None
    if hashlib.sha256(key.encode() + spirv).digest() != data[len(CACHE_MAGIC):_CACHE_HEAD]:
        return None
    return spirv


def _cache_write(path: Path, key: str, spirv: bytes) -> None:
    """Write the cache file whole or not at all (an unwritable cache only costs time: ``diskcache.write``)."""
    write_cache(path, CACHE_MAGIC + hashlib.sha256(key.encode() + spirv).digest() + spirv)


# -- libshaderc (in process) ------------------------------------------------------------------------
_SHADERC_CDEF = """
typedef struct shaderc_compiler* shaderc_compiler_t;
typedef struct shaderc_compile_options* shaderc_compile_options_t;
typedef struct shaderc_compilation_result* shaderc_compilation_result_t;
shaderc_compiler_t shaderc_compiler_initialize(void);
shaderc_compile_options_t shaderc_compile_options_initialize(void);
void shaderc_compile_options_release(shaderc_compile_options_t options);
void shaderc_compile_options_add_macro_definition(shaderc_compile_options_t options,
    const char* name, size_t name_length, const char* value, size_t value_length);
void shaderc_compile_options_set_optimization_level(shaderc_compile_options_t options, int level);
void shaderc_compile_options_set_target_env(shaderc_compile_options_t options, int target, uint32_t version);
shaderc_compilation_result_t shaderc_compile_into_spv(const shaderc_compiler_t compiler,
    const char* source_text, size_t source_text_size, int shader_kind,
    const char* input_file_name, const char* entry_point_name,
    const shaderc_compile_options_t additional_options);
void shaderc_result_release(shaderc_compilation_result_t result);
size_t shaderc_result_get_length(const shaderc_compilation_result_t result);
int shaderc_result_get_compilation_status(const shaderc_compilation_result_t);
const char* shaderc_result_get_bytes(const shaderc_compilation_result_t result);
const char* shaderc_result_get_error_message(const shaderc_compilation_result_t result);
"""

_lock = threading.Lock()
_shaderc = None  # (ffi, lib, compiler) | False
#: why libshaderc is not used (None while untried or when it loaded)
shaderc_unavailable_reason: str | None = None
_glslc_version: str | None = None


def _reinit_after_fork() -> None:
    """In a forked child: a fresh lock (a thread of the parent may have held it at the fork)."""
    global _lock
    _lock = threading.Lock()


lifecycle.in_forked_child(_reinit_after_fork)


def _load_shaderc():
    """Load libshaderc; on Debian 12 it is under-linked (undefined glslang/SPIRV-Tools symbols) and fails."""
    global _shaderc, shaderc_unavailable_reason
    if _shaderc is not None:
        return _shaderc or None
    errors = []
    try:
        import cffi
        sffi = cffi.FFI()
        sffi.cdef(_SHADERC_CDEF)
        for dep in [p for p in os.environ.get("DEVICELAYER_SHADERC_DEPS", "").split(os.pathsep) if p]:
            try:
                ctypes.CDLL(dep, mode=ctypes.RTLD_GLOBAL)
            except OSError as exc:
                errors.append(str(exc))
        slib = None
        for name in ("libshaderc_shared.so.1", "libshaderc_shared.so", "libshaderc.so.1", "libshaderc.so",
                     "libshaderc_shared.dylib", "shaderc_shared.dll"):
            try:  # the loader first: cffi searches for a name it cannot open with ldconfig, gcc and ld (processes)
                ctypes.CDLL(name)
            except OSError as exc:
                errors.append(f"cannot load library {name!r}: {exc}")
                continue
            try:
                slib = sffi.dlopen(name)
                break
            except OSError as exc:
                errors.append(str(exc).split(".  Additionally")[0])
        comp = slib.shaderc_compiler_initialize() if slib is not None else None
        _shaderc = (sffi, slib, comp) if comp is not None and comp != sffi.NULL else False
    except Exception as exc:  # cffi missing or broken
        errors.append(repr(exc))
        _shaderc = False
    if not _shaderc:
        useful = [e for e in errors if "undefined symbol" in e or "cannot open" not in e]
        shaderc_unavailable_reason = "; ".join(useful or errors) or "libshaderc not found"
    return _shaderc or None


def _macros(options) -> tuple[dict[str, str], list[str]]:
    """Split compiler options into -D macros and the rest."""
    defines, rest = {}, []
    for opt in options:
        if opt.startswith("-D") and len(opt) > 2:
            name, _, value = opt[2:].partition("=")
            defines[name] = value
        else:
            rest.append(opt)
    return defines, rest


def compiler_version() -> str:
    """The compiler that ``compile_glsl`` will use, with its version (part of the SPIR-V cache key)."""
    global _glslc_version
    with _lock:
        if os.environ.get("DEVICELAYER_GLSL_COMPILER", "") != "glslc" and _load_shaderc() is not None:
            return "libshaderc"
        if _glslc_version is None:
            glslc = shutil.which("glslc")
            if glslc is None:
                _glslc_version = ""
            else:
                try:
                    out = subprocess.run([glslc, "--version"], capture_output=True, text=True, timeout=60).stdout
                except (OSError, subprocess.SubprocessError):
                    out = ""
                _glslc_version = "glslc " + " ".join(out.split("\n")[:3])
        return _glslc_version


def compile_glsl(source: str, options=(), filename: str = "kernel.comp") -> bytes:
    """GLSL compute source -> SPIR-V, cached on disk by sha256(source, options, compiler version).

    A cache file that is truncated, corrupted or not ours is ignored and written again.

    Options are glslc options (``-DNAME=VALUE``, ``-O0``...); libshaderc takes only ``-D`` and ``-O0``.
    Raises CompileError with the compiler's log.
    """
    options = tuple(options)
    version = compiler_version()
    key = hashlib.sha256("\0".join((source, *options, version, TARGET_ENV)).encode()).hexdigest()
    path = cache_dir() / "spirv" / f"{key}.spv"
    cached = _cache_read(path, key)
    if cached is not None:
        return cached
    if version == "libshaderc":
        spirv = _compile_shaderc(source, options, filename)
    elif version:
        spirv = _compile_glslc(source, options, filename)
    else:
        raise CompileError("no GLSL compiler: libshaderc does not load "
                           f"({shaderc_unavailable_reason}) and glslc is not on PATH")
    _cache_write(path, key, spirv)
    return spirv


def _compile_shaderc(source: str, options, filename: str) -> bytes:
    sffi, slib, comp = _shaderc
    defines, rest = _macros(options)
    unknown = [o for o in rest if o not in ("-O", "-O0", "-Os")]
    if unknown:
        raise InvalidArgument(f"compile: options {unknown} are not understood by libshaderc (only -D, -O, -O0)")
    opts = slib.shaderc_compile_options_initialize()
    try:
        for k, v in defines.items():
            kb, vb = k.encode(), v.encode()
            slib.shaderc_compile_options_add_macro_definition(opts, kb, len(kb), vb, len(vb))
        slib.shaderc_compile_options_set_target_env(opts, 0, (1 << 22) | (2 << 12))
        slib.shaderc_compile_options_set_optimization_level(opts, 0 if "-O0" in rest else 2)
        src = source.encode()
        res = slib.shaderc_compile_into_spv(comp, src, len(src), 2, filename.encode(), b"main", opts)
    finally:
        slib.shaderc_compile_options_release(opts)
    try:
        status = slib.shaderc_result_get_compilation_status(res)
        msg = slib.shaderc_result_get_error_message(res)
        log = sffi.string(msg).decode("utf-8", "replace") if msg != sffi.NULL else ""
        if status != 0:
            raise CompileError("GLSL compile failed (libshaderc)", log or f"status {status}")
        return bytes(sffi.buffer(slib.shaderc_result_get_bytes(res), slib.shaderc_result_get_length(res)))
    finally:
        slib.shaderc_result_release(res)


def _compile_glslc(source: str, options, filename: str) -> bytes:
    glslc = shutil.which("glslc")
    with tempfile.TemporaryDirectory(prefix="devicelayer-glsl") as td:
        src_path = os.path.join(td, filename)
        out_path = os.path.join(td, "out.spv")
        with open(src_path, "w") as fh:
            fh.write(source)
        cmd = [glslc, "-fshader-stage=compute", f"--target-env={TARGET_ENV}", *options,
               "-o", out_path, src_path]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            raise CompileError(f"running glslc failed: {exc}") from exc
        if p.returncode != 0:
            log = (p.stderr + p.stdout).replace(td + os.sep, "").strip()
            raise CompileError(f"GLSL compile failed (glslc {shlex.join(options)})".rstrip(), log)
        with open(out_path, "rb") as fh:
            return fh.read()


_KERNEL_PRAGMA = re.compile(r"^\s*#\s*pragma\s+kernel\s+([A-Za-z_]\w*)\s*$", re.M)


def declared_kernels(source: str) -> list[str]:
    """Kernel names a GLSL source declares with ``#pragma kernel NAME`` (GLSL ignores unknown pragmas)."""
    return _KERNEL_PRAGMA.findall(source)


# -- reflection ----------------------------------------------------------------------------------------
@dataclass
class Binding:
    set: int
    binding: int
    kind: str          # "storage" or "uniform"
    readonly: bool
    name: str
    dtype: np.dtype | None


@dataclass
class PushConstant:
    offset: int
    fmt: str           # struct format of the member ("i", "f", "3f"...)
    size: int
    name: str
    dtype: np.dtype | None
    count: int = 1


@dataclass
class Reflection:
    entry_point: str
    entry_points: list[str]
    local_size: tuple[int, int, int]
    local_size_spec_ids: tuple[int | None, int | None, int | None]
    bindings: list[Binding] = field(default_factory=list)
    push_constants: list[PushConstant] = field(default_factory=list)
    push_constant_size: int = 0

    def signature(self) -> tuple[Arg, ...]:
        """Buffers in binding order, then push-constant members in offset order."""
        args = [Arg(b.name or f"binding{b.binding}", "buffer", b.dtype) for b in self.bindings]
        for pc in self.push_constants:
            args.append(Arg(pc.name, "scalar", pc.dtype) if pc.count == 1 and pc.dtype is not None
                        else Arg(pc.name, "any"))
        return tuple(args)


def _lit_string(ws, start) -> str:
    b = bytearray()
    for w in ws[start:]:
        b += struct.pack("<I", w)
        if b"\0" in b:
            break
    return b.split(b"\0", 1)[0].decode("utf-8", "replace")


def reflect_spirv(code: bytes, entry: str | None = None) -> Reflection:
    """Entry point, local size (literal or spec ids), storage-buffer bindings and push constants of a compute shader.

    ``entry``: the OpEntryPoint to describe; when absent from the module, the only GLCompute one.
    Raises InvalidArgument for malformed SPIR-V, CompileError for a missing entry point.
    """
    words = array("I")
    words.frombytes(bytes(code[: len(code) // 4 * 4]))
    if len(words) < 5:
        raise InvalidArgument("SPIR-V module is too short")
    if words[0] != SPIRV_MAGIC:
        words.byteswap()
        if words[0] != SPIRV_MAGIC:
            raise InvalidArgument("not SPIR-V (bad magic number)")
    names, member_names = {}, {}
    deco = collections.defaultdict(dict)
    mdeco = collections.defaultdict(dict)
    types, consts, spec, composites = {}, {}, {}, {}
    variables, entries, modes = [], [], collections.defaultdict(dict)
    i, n = 5, len(words)
    while i < n:
        wc, op = words[i] >> 16, words[i] & 0xFFFF
        if wc == 0:
            raise InvalidArgument("malformed SPIR-V (zero word count)")
        ops = words[i + 1: i + wc]
        if op == 5:
            names[ops[0]] = _lit_string(ops, 1)
        elif op == 6:
            member_names[(ops[0], ops[1])] = _lit_string(ops, 2)
        elif op == 15:
            entries.append((ops[0], ops[1], _lit_string(ops, 2)))
        elif op in (16, 331):
            modes[ops[0]][ops[1]] = list(ops[2:])
        elif op == 71:
            deco[ops[0]][ops[1]] = list(ops[2:])
        elif op == 72:
            mdeco[(ops[0], ops[1])][ops[2]] = list(ops[3:])
        elif op == 21:
            types[ops[0]] = ("int", ops[1], ops[2])
        elif op == 22:
            types[ops[0]] = ("float", ops[1])
        elif op == 20:
            types[ops[0]] = ("bool",)
        elif op == 23:
            types[ops[0]] = ("vector", ops[1], ops[2])
        elif op == 28:
            types[ops[0]] = ("array", ops[1], ops[2])
        elif op == 29:
            types[ops[0]] = ("rtarray", ops[1])
        elif op == 30:
            types[ops[0]] = ("struct", list(ops[1:]))
        elif op == 32:
            types[ops[0]] = ("pointer", ops[1], ops[2])
        elif op == 43:
            consts[ops[1]] = ops[2]
        elif op in (48, 49):
            spec[ops[1]] = 1 if op == 48 else 0
        elif op == 50:
            spec[ops[1]] = ops[2]
        elif op in (44, 51):
            composites[ops[1]] = list(ops[2:])
        elif op == 59:
            variables.append((ops[0], ops[1], ops[2]))
        elif op == 54:  # OpFunction: the globals are done
            break
        i += wc

    gl = [(eid, nm) for model, eid, nm in entries if model == 5]  # GLCompute
    if not gl:
        raise CompileError("the SPIR-V module has no GLCompute entry point")
    chosen = [g for g in gl if g[0] and g[1] == entry]
    if not chosen:
        if len(gl) > 1:
            raise CompileError(f"the SPIR-V module has no entry point {entry!r} (it has {[nm for _, nm in gl]})")
        chosen = gl
    eid, ename = chosen[0]

    local = [1, 1, 1]
    spec_ids: list[int | None] = [None, None, None]
    m = modes.get(eid, {})
    if 17 in m:  # LocalSize
        local = list(m[17][:3])
    if 38 in m:  # LocalSizeId
        for d, cid in enumerate(m[38][:3]):
            if cid in spec:
                local[d] = spec[cid]
                spec_ids[d] = deco[cid].get(1, [None])[0]
            else:
                local[d] = consts.get(cid, 1)
    for cid, parts in composites.items():
        if deco.get(cid, {}).get(11) == [25]:  # BuiltIn WorkgroupSize
            for d, pid in enumerate(parts[:3]):
                if pid in spec:
                    local[d] = spec[pid]
                    spec_ids[d] = deco[pid].get(1, [None])[0]
                elif pid in consts:
                    local[d] = consts[pid]

    def dtype_of(tid):
        t = types.get(tid, ("?",))
        if t[0] == "int":
            return np.dtype(f"{'i' if t[2] else 'u'}{t[1] // 8}")
        if t[0] == "float":
            return np.dtype(f"f{t[1] // 8}")
        if t[0] == "vector":
            return dtype_of(t[1])
        return None

    def scalar_fmt(tid):
        t = types[tid]
        if t[0] == "int":
            code = {8: "b", 16: "h", 32: "i", 64: "q"}[t[1]]
            return (code if t[2] else code.upper()), t[1] // 8, 1
        if t[0] == "float":
            return {16: "e", 32: "f", 64: "d"}[t[1]], t[1] // 8, 1
        if t[0] == "bool":
            return "I", 4, 1
        if t[0] == "vector":
            c, s, _ = scalar_fmt(t[1])
            return c * t[2], s * t[2], t[2]
        raise InvalidArgument(f"push-constant member of type {t[0]} is not supported (scalars and vectors only)")

    refl = Reflection(ename, [nm for _, nm in gl], tuple(local), tuple(spec_ids))
    pc_size = 0
    for ptype, vid, sc in variables:
        pt = types.get(ptype)
        if not pt or pt[0] != "pointer":
            continue
        pointee = pt[2]
        if types.get(pointee, ("",))[0] in ("array", "rtarray") and sc in (2, 12):
            raise InvalidArgument(f"arrays of buffers are not supported ({names.get(vid, vid)})")
        sdeco = deco.get(pointee, {})
        st = types.get(pointee, ("",))
        members = st[1] if st[0] == "struct" else []
        if sc == 12 or (sc == 2 and 3 in sdeco):  # StorageBuffer, or Uniform + BufferBlock
            d = deco.get(vid, {})
            ro = 24 in d or bool(members and all(24 in mdeco.get((pointee, k), {}) for k in range(len(members))))
            dt = None
            if members:
                last = types.get(members[-1], ("",))
                if last[0] in ("rtarray", "array"):
                    dt = dtype_of(last[1])
                elif len(members) == 1:
                    dt = dtype_of(members[0])
            name = names.get(vid) or names.get(pointee, "")
            place = (d.get(34, [0])[0], d.get(33, [0])[0])
            if any((b.set, b.binding) == place for b in refl.bindings):
                continue  # (another block on a binding already met: a view of the same buffer)
            refl.bindings.append(Binding(*place, "storage", ro, name, dt))
        elif sc == 2:
            d = deco.get(vid, {})
            refl.bindings.append(Binding(d.get(34, [0])[0], d.get(33, [0])[0], "uniform", True,
                                         names.get(vid) or names.get(pointee, ""), None))
        elif sc == 9:  # PushConstant
            for k, mt in enumerate(members):
                off = mdeco.get((pointee, k), {}).get(35, [0])[0]
                fmt, size, count = scalar_fmt(mt)
                refl.push_constants.append(PushConstant(off, fmt, size, member_names.get((pointee, k), f"m{k}"),
                                                        dtype_of(mt), count))
                pc_size = max(pc_size, off + size)
    refl.bindings.sort(key=lambda b: (b.set, b.binding))
    refl.push_constants.sort(key=lambda p: p.offset)
    refl.push_constant_size = (pc_size + 3) // 4 * 4
    return refl
