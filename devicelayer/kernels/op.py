"""Op: one operation's math written once — NumPy reference, shape/dtype inference, device kernels."""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from .. import cpus, lifecycle
from ..errors import InvalidArgument, UnsupportedOp
from ..info import DeviceInfo
from ..threads import DaemonPool
from .render import BFLOAT16_LANGUAGES
from .dialect import KernelSpec, Param


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype of a tensor."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))  # exact, and ~20x faster than np.prod on a tuple

    @staticmethod
    def of(shape: Sequence[int], dtype: Any) -> "TensorType":
        return TensorType(tuple(int(s) for s in shape), np.dtype(dtype))


@dataclass(frozen=True)
class Launch:
    """One kernel launch of an op: ``args`` name tensors (``("in", i)``, ``("out", j)``, ``("tmp", k)``) or give scalars."""

    spec: KernelSpec
    args: tuple[Any, ...]
    global_size: tuple[int, ...]
    local_size: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Alias:
    """Output ``output`` is input ``input`` seen with another shape (no copy)."""

    output: int
    input: int


@dataclass(frozen=True)
class Flag:
    """A check the plan's kernels make on input values (an index in range): ``Plan.temps[temp]`` is a 1-D integer
    tensor of ``FLAG_SIZE`` elements that the plan's first step zeroes; a kernel that meets a bad value ``v``
    writes 1 into element 0 and ``v`` into element 1 (of several bad values, any one).  Once the plan's steps have
    completed, whoever ran them reads the tensor and raises ``flag_error`` when element 0 is non-zero; the outputs
    are then not to be used."""

    temp: int
    #: the InvalidArgument message (naming the op); ``{value}`` stands for the bad value the kernel wrote
    message: str


#: elements of a Flag's scratch tensor: (raised, value)
FLAG_SIZE = 2


def flag_error(flag: Flag, contents: np.ndarray) -> InvalidArgument | None:
    """The InvalidArgument a Flag's scratch tensor (read back after the plan ran) reports; None when clear."""
    contents = np.asarray(contents).reshape(-1)
    if not contents.size or not contents[0]:
        return None
    return InvalidArgument(flag.message.format(value=int(contents[1]) if contents.size > 1 else "?"))


@dataclass
class Plan:
    """How an op runs on a device: steps in order, scratch tensors they use, checks they flag (``Flag``)."""

    steps: list[Launch | Alias]
    temps: list[TensorType] = field(default_factory=list)
    flags: list[Flag] = field(default_factory=list)


class Op:
    """Base of every op.  Subclasses set ``name`` and override the methods below."""

    name: str = ""
    #: element dtypes the device kernels handle
    kernel_dtypes: frozenset[str] = frozenset({"float32", "float16"})
    min_inputs: int = 1
    max_inputs: int = 1
    #: output 0 is input 0 with another shape: an Alias step on every device (no copy, no kernel)
    alias: bool = False
    #: the op checks values of its inputs (indices in range): its NumPy implementation raises InvalidArgument and
    #: its device plans carry ``Flag``s, so a caller waits for the op before trusting its outputs
    checks_values: bool = False
    #: each output element is a function of the input elements at its own index alone (inputs of the output's
    #: shape, or broadcast from one element): any element order works, so a plan may run it on tensors held
    #: in a device-private layout (``graph/layout.py``)
    pointwise: bool = False
    #: its NumPy form (``reference_into``/``bind_into``) may be given input 0 as its output, the same array: each
    #: element is read before it is written (one ufunc over the arrays), so a bound host call needs no copy
    in_place: bool = False

    def error(self, message: str) -> InvalidArgument:
        """An InvalidArgument naming the op."""
        return InvalidArgument(f"{self.name}: {message}")

    def check(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> dict[str, Any]:
        """Validate inputs and attributes; return the attributes with defaults filled in."""
        return dict(attrs)

    def infer(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> list[TensorType]:
        """Output types for these inputs (attributes already checked)."""
        raise NotImplementedError

    def reference(self, inputs: Sequence[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
        """NumPy implementation; computes in the inputs' dtype (float64 inputs give the reference)."""
        raise NotImplementedError

    def reference_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                       attrs: dict[str, Any]) -> None:
        """``reference`` written into ``outputs`` (C-ordered arrays of the output types, sharing no memory with
        the inputs); ops override it to compute in place of the copy."""
        for out, result in zip(outputs, self.reference(inputs, attrs)):
            if out.size:
                out[...] = result

    def bind_into(self, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                  attrs: dict[str, Any]) -> Callable[[], None]:
        """``reference_into`` on these arrays as a call of no arguments, made once and called many times (a
        recorded host launch): ops override it to decide once what each call would decide again.  The call
        is made with NumPy's floating-point errors ignored (the host sets that once for a recorded stretch)."""
        return functools.partial(self.reference_into, inputs, outputs, attrs)

    def plan(self, inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: dict[str, Any],
             info: DeviceInfo) -> Plan:
        """Device kernels for these types on a device like ``info``."""
        raise UnsupportedOp(f"{self.name} has no device kernel")

    def unsupported(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> str | None:
        """Why this op cannot run on the device (None when it can)."""
        for t in inputs:
            name = t.dtype.name
            if name not in info.dtypes:
                return f"{info.id} has no {name}"
        if info.kernel_language == "python":
            return None
        first = inputs[0].dtype.name if inputs else "float32"
        if not kernel_takes(self.kernel_dtypes, first, info):
            return f"{self.name} has no {info.kernel_language} kernel for {first}"
        return None

    def prepare(self, inputs: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[dict[str, Any], list[TensorType]]:
        """Check arity, attributes and infer outputs: the one entry point for callers."""
        if not self.min_inputs <= len(inputs) <= self.max_inputs:
            want = (str(self.min_inputs) if self.min_inputs == self.max_inputs
                    else f"{self.min_inputs} to {self.max_inputs}")
            raise self.error(f"takes {want} inputs, got {len(inputs)}")
        attrs = self.check(inputs, attrs)
        return attrs, self.infer(inputs, attrs)


def kernel_takes(kernel_dtypes: frozenset[str], dtype: str, info: DeviceInfo) -> bool:
    """Whether kernels made for ``kernel_dtypes`` take ``dtype`` on the device: bfloat16 runs the float16
    kernels (storage, float arithmetic) where the kernel language has a bfloat16 type."""
    return dtype in kernel_dtypes or (dtype == "bfloat16" and "float16" in kernel_dtypes
                                      and info.kernel_language in BFLOAT16_LANGUAGES)


def float_attr(op: Op, attrs: dict[str, Any], name: str, default: float) -> float:
    """A finite number attribute of ``op`` (``default`` when absent); InvalidArgument naming the op otherwise."""
    value = attrs.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise op.error(f"attribute {name!r} must be a number, got {value!r}")
    if not math.isfinite(float(value)):
        raise op.error(f"attribute {name!r} must be finite, got {value!r}")
    return float(value)


def activation_attr(op: Op, attrs: dict[str, Any], after: str) -> str | None:
    """The fused ``activation`` attribute of ``op``: "relu" (applied last, after ``after``) or None when absent;
    InvalidArgument naming the op otherwise."""
    activation = attrs.get("activation")
    if isinstance(activation, bytes):
        activation = activation.decode(errors="replace")
    if activation not in (None, "relu"):
        raise op.error(f"attribute 'activation' must be 'relu' (applied after {after}) or absent, "
                       f"got {activation!r}")
    return activation


#: the attribute letting a float32 product or convolution run TF32 (10-bit mantissa products, float32 sums) on
#: devices with such units (CUDA's tensor cores); kernels and devices without them compute IEEE float32 anyway
ALLOW_TF32 = "allow_tf32"


def tf32_attr(op: Op, attrs: dict[str, Any]) -> dict[str, Any]:
    """The checked ``allow_tf32`` attribute: ``{"allow_tf32": True}`` where set, ``{}`` where absent or False;
    InvalidArgument naming the op for anything but a bool."""
    value = attrs.get(ALLOW_TF32, False)
    if not isinstance(value, (bool, np.bool_)):
        raise op.error(f"attribute {ALLOW_TF32!r} must be True or False, got {value!r}")
    return {ALLOW_TF32: True} if value else {}


OPS: dict[str, Op] = {}


def register(cls: type[Op]) -> type[Op]:
    """Class decorator: add an op to the registry under ``cls.name``."""
    op = cls()
    if not op.name or op.name in OPS:
        raise ValueError(f"op name {op.name!r} missing or taken")
    OPS[op.name] = op
    return cls


def get(name: str) -> Op:
    """The registered op called ``name`` (the op library is registered on first use)."""
    if name not in OPS:
        from . import ops as _library  # noqa: F401  (registers every op)
    try:
        return OPS[name]
    except KeyError:
        raise UnsupportedOp(f"no op named {name!r}") from None


def add_flag(plan: Plan, dtype: Any, message: str, info: DeviceInfo) -> tuple[tuple[str, int], str]:
    """Give ``plan`` a Flag (a scratch tensor of integer ``dtype``, zeroed by a launch put first in its steps);
    returns the launch argument that names the scratch tensor and its dialect type (what ``raise_flag`` takes)."""
    dtype = np.dtype(dtype)
    ft = {"int32": "int", "int64": "i64"}.get(dtype.name)
    if ft is None:
        raise ValueError(f"a flag holds int32 or int64, not {dtype}")
    plan.temps.append(TensorType((FLAG_SIZE,), dtype))
    temp = len(plan.temps) - 1
    plan.flags.append(Flag(temp, message))
    spec = KernelSpec(f"flag_clear_{ft}", (Param("flag", ft, "out"),),
                      f"    if (GID(0) < {FLAG_SIZE}) flag[GID(0)] = CAST({ft}, 0);", elem=ft)
    plan.steps.insert(0, Launch(spec, (("tmp", temp),), (local_1d(info, 64),), (local_1d(info, 64),)))
    return ("tmp", temp), ft


def raise_flag(value: str, ftype: str, buffer: str = "flag") -> str:
    """Dialect statement setting Flag ``buffer`` (dialect type ``ftype``) for the bad value ``value``."""
    return f"{{ {buffer}[0] = CAST({ftype}, 1); {buffer}[1] = CAST({ftype}, {value}); }}"


def groups_for(n: int, local: int, info: DeviceInfo) -> tuple[int]:
    """A 1-D global size covering ``n`` items with grid-stride loops, within the device's group limit."""
    groups = max(1, min(-(-n // local), info.max_work_groups[0], 65535 * 16))
    return (groups * local,)


def local_1d(info: DeviceInfo, want: int = 256) -> int:
    """A 1-D work-group size the device takes."""
    return max(1, min(want, info.max_work_group_size, info.max_work_item_sizes[0]))


HostKernel = Callable[..., None]


#: threads ``parallel`` spreads work over (the CPUs this process may use)
HOST_THREADS = cpus.count()
#: bytes of work below which ``parallel`` stays on the calling thread (a hand-off costs ~10-20 us)
PARALLEL_MIN_BYTES = 1 << 22
#: daemon threads (made on first use): the interpreter's exit does not wait for a host kernel given up on
_helpers: DaemonPool | None = None
_helpers_lock = threading.Lock()


def _reinit_after_fork() -> None:
    """In a forked child: a fresh lock (a thread of the parent may have held it at the fork)."""
    global _helpers_lock
    _helpers_lock = threading.Lock()


lifecycle.in_forked_child(_reinit_after_fork)


def splits(n: int, nbytes: int) -> bool:
    """Whether ``parallel`` spreads ``n`` items of ``nbytes`` over helper threads (else it calls once, here)."""
    return min(HOST_THREADS, n, nbytes // PARALLEL_MIN_BYTES) > 1


def bound_parallel(fn: Callable[[int, int], Any], n: int, nbytes: int) -> Callable[[], None]:
    """``parallel(fn, n, nbytes)`` as a call made once (a recorded host launch): ``fn(0, n)`` itself where the
    work would not be split."""
    return functools.partial(parallel, fn, n, nbytes) if splits(n, nbytes) else functools.partial(fn, 0, n)


#: set in a thread while it runs a piece of a ``parallel`` call: a ``parallel`` call inside one runs in place (its
#: pieces queued behind the outer ones on the same helpers would wait for threads that wait for them)
_in_piece = threading.local()


def _piece(fn: Callable[[int, int], Any], a: int, b: int) -> Any:
    _in_piece.active = True
    try:
        return fn(a, b)
    finally:
        _in_piece.active = False


def parallel(fn: Callable[[int, int], Any], n: int, nbytes: int) -> None:
    """Call ``fn(start, stop)`` over contiguous pieces covering ``range(n)``, the pieces at once on helper
    threads when the work (``nbytes`` touched in all) is large enough to gain (NumPy releases the GIL); called
    from inside a piece, it runs in place."""
    global _helpers
    parts = min(HOST_THREADS, n, nbytes // PARALLEL_MIN_BYTES)
    if parts <= 1 or getattr(_in_piece, "active", False):
        fn(0, n)
        return
    if _helpers is None:
        with _helpers_lock:
            if _helpers is None:
                _helpers = DaemonPool(HOST_THREADS - 1, "devicelayer-host-helper", initializer=cpus.use_every_cpu)
    bounds = [n * i // parts for i in range(parts + 1)]
    futures = [_helpers.submit(_piece, fn, a, b) for a, b in zip(bounds[1:-1], bounds[2:])]
    try:
        _piece(fn, bounds[0], bounds[1])
    finally:
        for f in futures:
            f.result()
