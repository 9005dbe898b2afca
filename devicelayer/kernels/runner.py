"""Running an op on a device: compile its kernels (cached), bind tensors, launch in order.

``execute`` is what the graph executor calls with buffers it planned;
``run`` is the eager form on Tensors.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import lifecycle
from ..device import Device, Program
from ..errors import EventError, InvalidArgument, UnsupportedOp
from ..events import CompletedEvent, Event
from ..memory import Buffer
from ..recording import Recording
from ..tensors import Tensor
from .op import FLAG_SIZE, Alias, Launch, Op, Plan, TensorType, flag_error, get
from .render import render

_lock = threading.Lock()
_programs: dict[tuple[int, Any], Program] = {}
_host_kernels: dict[tuple, Any] = {}


def _reinit_after_fork() -> None:
    """In a forked child: a fresh lock, and no programs (those cached are the parent's devices', kept here)."""
    global _lock, _programs
    lifecycle.keep_forever(_programs)
    _lock = threading.Lock()
    _programs = {}


lifecycle.in_forked_child(_reinit_after_fork)


def program_for(device: Device, spec) -> Program:
    """The compiled program of a KernelSpec on ``device`` (rendered and compiled once)."""
    key = (id(device), spec)
    prog = _programs.get(key)
    if prog is None or prog.released:
        source = render(spec, device.info.kernel_language, "float64" in device.info.dtypes)
        prog = device.compile(source, spec.name, signature=spec.signature())
        with _lock:
            _programs[key] = prog
    return prog


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.dtype):
        return value.str
    return value


def _host_program(device: Device, op: Op, ins: Sequence[TensorType], outs: Sequence[TensorType],
                  attrs: dict[str, Any]) -> Program:
    """A Python kernel running the op's NumPy implementation (devices whose language is Python).

    The op writes its results straight into the output buffers (``Op.reference_into``), unless an output
    shares memory with an input (an eager call given such ``out=``): then they are computed apart and copied.
    """
    key = (id(device), op.name, tuple(ins), tuple(outs), _freeze(attrs))
    prog = _host_kernels.get(key)
    if prog is not None and not prog.released:
        return prog
    n_in = len(ins)
    in_views = [(t.size * t.dtype.itemsize, t.dtype, t.shape) for t in ins]
    out_views = [(t.size * t.dtype.itemsize, t.dtype, t.shape) for t in outs]

    def bind_launch(*arrays: np.ndarray) -> Callable[[], None]:
        """The op on these arrays as a call of no arguments: views and the implementation chosen once."""
        values = [a[:n].view(dt).reshape(shape) for a, (n, dt, shape) in zip(arrays, in_views)]
        results = [a[:n].view(dt).reshape(shape) for a, (n, dt, shape) in zip(arrays[n_in:], out_views)]
        if any(np.may_share_memory(r, v) for r in results for v in values):
            def apart() -> None:
                for r, value in zip(results, op.reference(values, attrs)):
                    if r.size:
                        r[...] = value
            return apart
        return op.bind_into(values, results, attrs)

    def kernel(*arrays: np.ndarray) -> None:
        bind_launch(*arrays)()

    kernel.bind_launch = bind_launch  # type: ignore[attr-defined]  # (the host binds a launch once: HostDevice._bind)
    kernel.ignores_fp_errors = True  # type: ignore[attr-defined]  # NumPy's float errors are the op's results
    prog = device.compile(kernel, op.name.replace(".", "_"))
    with _lock:
        _host_kernels[key] = prog
    return prog


def plan_for(op: Op, device: Device, ins: Sequence[TensorType], outs: Sequence[TensorType],
             attrs: dict[str, Any], constants: Mapping[int, np.ndarray] | None = None) -> Plan:
    """The op's steps on ``device``; UnsupportedOp when it cannot run there.

    ``constants`` (input index -> array) names inputs whose values never change (a plan's initializers): a
    vendor op with ``specialize`` may prepare them once.
    """
    why = op.unsupported(ins, attrs, device.info)
    if why is not None:
        raise UnsupportedOp(f"{op.name} on {device.id}: {why}")
    if op.alias:
        return op.plan(ins, outs, attrs, device.info)
    vendor = device.vendor_op(op.name)
    if attrs.get("epilogue") and not getattr(vendor, "takes_epilogue", False):
        vendor = None  # (the op's kernel applies it)
    accepts = getattr(vendor, "accepts", None)
    if vendor is not None and (accepts is None or accepts(ins, outs, attrs)):
        specialize = getattr(vendor, "specialize", None)
        if constants and specialize is not None:
            vendor = specialize(ins, outs, attrs, constants)
        return Plan([_VendorStep(vendor)])
    if device.info.kernel_language == "python":
        return Plan([_HostStep()])
    return op.plan(ins, outs, attrs, device.info)


def vendor_of(plan: Plan) -> Any:
    """The vendor op of a plan that is one vendor-library step, else None."""
    return plan.steps[0].fn if len(plan.steps) == 1 and isinstance(plan.steps[0], _VendorStep) else None


def set_vendor(plan: Plan, fn: Any) -> None:
    """Replace the vendor op of a one-step vendor plan (``vendor_of``)."""
    plan.steps[0] = _VendorStep(fn)


class _HostStep:
    """Marker step: run the NumPy implementation as one host kernel."""


class _VendorStep:
    """A step done by the device's vendor library (``Device.vendor_op``)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn


def programs(op: Op, device: Device, plan: Plan, ins: Sequence[TensorType], outs: Sequence[TensorType],
             attrs: dict[str, Any]) -> list[Program | None]:
    """Compile every kernel of ``plan`` now; the list lines up with ``plan.steps`` (None where no kernel)."""
    progs: list[Program | None] = []
    for step in plan.steps:
        if isinstance(step, _HostStep):
            progs.append(_host_program(device, op, ins, outs, attrs))
        elif isinstance(step, Launch):
            progs.append(program_for(device, step.spec))
        else:
            progs.append(None)
    return progs


def _work(op: Op, device: Device, plan: Plan, ins: Sequence[TensorType], outs: Sequence[TensorType],
          attrs: dict[str, Any], in_bufs: Sequence[Buffer], out_bufs: Sequence[Buffer | None],
          temp_bufs: Sequence[Buffer], compiled: Sequence[Any] | None) -> list[tuple]:
    """The plan's work with these buffers, in order: ("launch", program, args, global, local) or ("call", fn)."""
    work: list[tuple] = []
    for k, step in enumerate(plan.steps):
        if isinstance(step, _HostStep):
            prog = compiled[k] if compiled is not None else _host_program(device, op, ins, outs, attrs)
            work.append(("launch", prog, [*in_bufs, *out_bufs], 1, None))
        elif isinstance(step, Launch):
            prog = compiled[k] if compiled is not None else program_for(device, step.spec)
            args = []
            for a in step.args:
                if type(a) is tuple:
                    kind, index = a
                    args.append(in_bufs[index] if kind == "in" else out_bufs[index] if kind == "out"
                                else temp_bufs[index])
                else:
                    args.append(a)
            work.append(("launch", prog, args, step.global_size, step.local_size))
        elif isinstance(step, _VendorStep):
            work.append(("call", step.fn))
        # Alias: the output is the input's storage; nothing to do
    return work


def execute(op: Op, device: Device, plan: Plan, ins: Sequence[TensorType], outs: Sequence[TensorType],
            attrs: dict[str, Any], in_bufs: Sequence[Buffer], out_bufs: Sequence[Buffer | None],
            temp_bufs: Sequence[Buffer], wait: Sequence[Event], compiled: Sequence[Any] | None = None) -> Event:
    """Launch ``plan`` with these buffers after ``wait``; returns the event of the last step.

    ``compiled`` (from ``programs``) skips the compile-cache lookups of prepared plans.
    """
    event: Event | None = None
    waits = list(wait)
    for w in _work(op, device, plan, ins, outs, attrs, in_bufs, out_bufs, temp_bufs, compiled):
        if w[0] == "launch":
            event = device.launch(w[1], w[2], w[3], w[4], wait=waits)
        else:
            event = w[1](ins, outs, attrs, in_bufs, out_bufs, waits)
        waits = [event]  # in order on the device; the explicit wait keeps it true across devices too
    return event if event is not None else CompletedEvent(f"{op.name} (no work)", device=device)


def record(recording: Recording, op: Op, plan: Plan, ins: Sequence[TensorType], outs: Sequence[TensorType],
           attrs: dict[str, Any], in_bufs: Sequence[Buffer], out_bufs: Sequence[Buffer],
           temp_bufs: Sequence[Buffer], compiled: Sequence[Any] | None, label: str) -> None:
    """Record ``plan`` with these buffers into ``recording`` (each item labelled ``label``)."""
    for w in _work(op, recording.device, plan, ins, outs, attrs, in_bufs, out_bufs, temp_bufs, compiled):
        if w[0] == "launch":
            recording.launch(w[1], w[2], w[3], w[4], label=label)
        else:
            recording.call(w[1], (ins, outs, attrs, in_bufs, out_bufs), [*in_bufs, *out_bufs, *temp_bufs], label)


def check_values(op: Op, device: Device, plan: Plan, temp_bufs: Sequence[Buffer], event: Event) -> None:
    """For an op that ``checks_values``: wait for ``event`` (its last step) and raise the InvalidArgument it
    reports, naming the op and the bad value: the one a host step raised, or the one a Flag of ``plan`` was set
    for (its scratch tensor read back from ``temp_bufs``)."""
    try:
        event.wait()
    except EventError as exc:
        cause = exc.__cause__
        while cause is not None and not isinstance(cause, InvalidArgument):
            cause = cause.__cause__
        if cause is not None:
            raise InvalidArgument(str(cause)) from exc
        raise
    for flag in plan.flags:
        t = plan.temps[flag.temp]
        contents = np.zeros(FLAG_SIZE, t.dtype)
        device.pool.download(temp_bufs[flag.temp].view(0, contents.nbytes), contents, wait=[event]).wait()
        error = flag_error(flag, contents)
        if error is not None:
            raise error


def run(name: str, inputs: Sequence[Tensor], out: Sequence[Tensor] | Tensor | None = None,
        **attrs: Any) -> list[Tensor]:
    """Run op ``name`` on the device holding ``inputs``; returns output Tensors (``out`` to write given ones: a
    sequence, or one Tensor for an op of one output)."""
    op = get(name)
    if isinstance(out, Tensor):
        out = [out]
    elif out is not None and not isinstance(out, (list, tuple)):
        raise InvalidArgument(f"{name}: out= takes a Tensor or a list of Tensors, got {type(out).__name__}")
    if not inputs:
        raise InvalidArgument(f"{name}: needs at least one input tensor")
    for t in inputs:
        if not isinstance(t, Tensor):
            raise InvalidArgument(f"{name}: inputs must be Tensors, got {type(t).__name__}")
    device = inputs[0].device
    for t in inputs[1:]:
        if t.device is not device:
            raise InvalidArgument(f"{name}: inputs live on {device.id} and {t.device.id}; transfer first")
    ins = [TensorType(t.shape, t.dtype) for t in inputs]
    attrs, outs = op.prepare(ins, attrs)
    plan = plan_for(op, device, ins, outs, attrs)
    aliases = {s.output: s.input for s in plan.steps if isinstance(s, Alias)}
    if out is not None:
        if len(out) != len(outs):
            raise InvalidArgument(f"{name}: out= has {len(out)} tensors, the op has {len(outs)} outputs")
        for o, t in zip(out, outs):
            if not isinstance(o, Tensor) or o.device is not device or o.shape != t.shape or o.dtype != t.dtype:
                raise InvalidArgument(f"{name}: out= tensor must be {t.shape} {t.dtype} on {device.id}")
        results = list(out)
    else:
        results = []
        for j, t in enumerate(outs):
            if j in aliases:
                src = inputs[aliases[j]]
                results.append(Tensor(src.buffer, t.shape, t.dtype, src.ready))
            else:
                nbytes = max(t.size * t.dtype.itemsize, t.dtype.itemsize)
                results.append(Tensor(device.pool.allocate(nbytes, t.dtype), t.shape, t.dtype))
    if any(t.size == 0 for t in outs) or any(t.size == 0 for t in ins):
        done = CompletedEvent(f"{name} (empty)", device=device)
        for r, t in zip(results, outs):
            if t.size == 0:
                r.ready = done
        if all(t.size == 0 for t in outs):
            return results
    temps = [device.pool.allocate(max(t.size * t.dtype.itemsize, t.dtype.itemsize), t.dtype) for t in plan.temps]
    event = execute(op, device, plan, ins, outs, attrs, [t.buffer for t in inputs],
                    [r.buffer for r in results], temps, [t.ready for t in inputs])
    try:
        if op.checks_values or plan.flags:
            check_values(op, device, plan, temps, event)
    except (InvalidArgument, EventError):
        for j, r in enumerate(results):
            if out is None and j not in aliases:
                device.pool.free(r.buffer, wait=[event])
        raise
    finally:
        for tmp in temps:
            device.pool.free(tmp, wait=[event])
    if out is not None:  # an Alias output given as out= gets the input's bytes copied in
        for j, i in aliases.items():
            nbytes = outs[j].size * outs[j].dtype.itemsize
            dst, src = results[j].buffer, inputs[i].buffer
            if nbytes and not (dst.root is src.root and dst.offset == src.offset):
                event = device.pool.copy(dst.view(0, nbytes, np.uint8), src.view(0, nbytes, np.uint8),
                                         wait=[event, inputs[i].ready, results[j].ready])
    for j, r in enumerate(results):
        if j not in aliases or out is not None:
            r.ready = event
    return results
