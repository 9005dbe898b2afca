"""fused_elementwise: a chain of the library's pointwise ops computed as one kernel.

The attribute ``steps`` lists the chain in order: each step is ``(op, attrs, operands)``, an op of the library
that ``fusable`` takes (a Unary or Binary op, where, prelu, cast), its checked attributes, and its operands as
indices: below the number of inputs an input of the fused op, above it the result of an earlier step.
``outputs`` names the steps whose results are written (each of the broadcast shape of every step).

On a kernel device the chain becomes one kernel rendered from the members' own dialect statements (``Unary
.statement``, ``Binary.compute``, ``cast.conversion``): each input is loaded once at its broadcast offset, each
step's value stays in a register of its own dtype, and only the outputs are stored.  Each step keeps its
element type (``T``, ``ACC``) in its own scope, so float16 rounds between steps as the ops alone do.  On the host
the chain runs the members' NumPy forms on cache-sized blocks of the output, the temporaries reused from block
to block (and blocks spread over the helper threads).
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any, Sequence

import numpy as np

from ...errors import DeviceLayerError
from ...info import DeviceInfo
from ..dialect import KernelSpec, Param, dialect_type
from ..render import WIDE_LANGUAGES
from ..op import OPS, Launch, Op, Plan, TensorType, get, groups_for, local_1d, parallel, register
from .binary import (INT_MAX, MAX_RANK, Binary, Prelu, Where, broadcast_shape, broadcast_strides, collapse,
                     contiguous_strides, unravel)
from .cast import Cast, conversion
from .elementwise import Clip, Unary
from .numeric import KERNEL_DTYPES

#: output elements of one host block (a few arrays of it stay in a core's cache)
HOST_BLOCK = 1 << 15
#: buffers (inputs and outputs) one fused kernel takes
MAX_BUFFERS = 12
#: bytes of scalar arguments every device takes (Vulkan's guaranteed push-constant size)
MAX_SCALAR_BYTES = 128
#: ops whose dialect statements the fused kernel composes
FUSABLE_KINDS = (Unary, Binary, Where, Prelu, Cast)
#: the fewest output elements a work item computes several of (``wide_elements``)
WIDE_MIN = 1 << 14


def fusable(op_name: str) -> bool:
    """Whether op ``op_name`` can be a step of a fused_elementwise chain."""
    op = OPS.get(op_name)
    return op is not None and op.pointwise and isinstance(op, FUSABLE_KINDS)


def _float_literal(x: float) -> str:
    """A float32 dialect literal of ``x`` (as a float32 scalar argument would hold it)."""
    v = np.float32(x)
    if np.isnan(v):
        return "DL_NAN"
    if np.isinf(v):
        return "DL_INF" if v > 0 else "(-DL_INF)"
    return f"({float(v)!r}f)"


def _member(op: Op, ins: Sequence[TensorType], attrs: dict[str, Any]) -> tuple[str, str, list[float]]:
    """(element type T of the step, its dialect statements reading ``p<j>[o<j>]`` and writing ``y[i]``, the
    float scalars ``a`` and ``b`` of a Unary step)."""
    if isinstance(op, Unary):
        values = [attrs[name] for name, _ in op.params] + list(op.constants) + [0.0, 0.0]
        code = op.statement(ins[0].dtype).replace("x[i]", "p0[o0]")
        return dialect_type(ins[0].dtype), code, [float(values[0]), float(values[1])]
    if isinstance(op, Cast):
        src, dst = ins[0].dtype, attrs["to"]
        return dialect_type(src), f"y[i] = {conversion('p0[o0]', src, dst)};", []
    if isinstance(op, Where):
        return dialect_type(ins[1].dtype), op.compute(ins, attrs), []
    if isinstance(op, (Binary, Prelu)):
        return dialect_type(ins[0].dtype), op.compute(ins, attrs), []
    raise ValueError(f"{op.name} is not an op fused_elementwise takes")


def _scope(elem: str) -> str:
    """Preprocessor lines giving a step its element type: ``T``, ``ACC``, ``TO_ACC``, ``FROM_ACC``."""
    acc = "f64" if elem == "f64" else "float"
    return (f"#undef T\n#define T {elem}\n#undef ACC\n#define ACC {acc}\n"
            "#undef TO_ACC\n#define TO_ACC(v) CAST(ACC, v)\n#undef FROM_ACC\n#define FROM_ACC(v) CAST(T, v)\n")


def compose(inputs: Sequence[TensorType], steps: Sequence[tuple], types: Sequence[TensorType]
            ) -> tuple[list[str], list[tuple[Param, Any]]]:
    """Dialect lines computing a chain's ``steps`` (checked, with result ``types``) from registers ``dl_x<j>``
    holding ``inputs``: step k's value lands in a register ``dl_v<k>`` of its own dtype, each step in its own
    element-type scope (which the lines leave set to the last step's); and the float64 scalar arguments the lines
    read, as (parameter, value)."""
    n_in = len(inputs)
    body: list[str] = []
    scalars: list[tuple[Param, Any]] = []
    reg = [f"dl_x{j}" for j in range(n_in)] + [f"dl_v{k}" for k in range(len(steps))]
    known = list(inputs) + list(types)
    for k, (name, attrs, operands) in enumerate(steps):
        op = get(name)
        ins = [known[j] for j in operands]
        elem, code, ab = _member(op, ins, attrs)
        for j, operand in enumerate(operands):
            code = code.replace(f"p{j}[o{j}]", reg[operand])
        code = code.replace("y[i]", reg[n_in + k])
        if isinstance(op, Unary):
            if isinstance(op, Clip):  # unbounded ends: the dialect's infinities (float64: its largest)
                big = float(np.finfo(np.float64).max) if elem == "f64" else math.inf
                ab = [max(attrs["min"], -big), min(attrs["max"], big)]
            for letter, value in zip("ab", ab):
                if re.search(rf"\b{letter}\b", code) is None:
                    continue
                if elem == "f64":
                    scalars.append((Param(f"dl_{letter}{k}", "f64", "scalar"), value))
                    value_code = f"dl_{letter}{k}"
                else:
                    value_code = _float_literal(value)
                code = re.sub(rf"\b{letter}\b", value_code, code)
        body.append(f"        {dialect_type(types[k].dtype)} dl_v{k};\n        {{\n{_scope(elem)}"
                    f"        {code.strip()}\n        }}\n")
    return body, scalars


def wide_elements(inputs: Sequence[TensorType], outputs: Sequence[TensorType], info: DeviceInfo) -> int:
    """Elements a work item of the fused kernel computes: on a language whose wide accesses move several at once
    (``render.WIDE_LANGUAGES``) and outputs of ``WIDE_MIN`` elements or more, as many of the widest tensor's as fill
    16 bytes (at most 8); else 1."""
    if info.kernel_language not in WIDE_LANGUAGES or outputs[0].size < WIDE_MIN:
        return 1
    widest = max(t.dtype.itemsize for t in (*inputs, *outputs))
    return max(1, min(8, 16 // widest))


def wide_plan(op: Op, inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: dict[str, Any],
              info: DeviceInfo) -> Plan | None:
    """A lone Unary or Binary op's plan as a fused kernel of one step where that kernel computes a run of elements a
    work item (``wide_elements``): its same-shaped operands and its result move 16 bytes at a time; None where it
    would compute one element a work item (the op's own kernel is as fast) or cannot run on ``info``."""
    if not fusable(op.name) or wide_elements(inputs, outputs, info) == 1:
        return None
    chain = {"steps": ((op.name, attrs, tuple(range(len(inputs)))),), "outputs": (0,)}
    fused = get("fused_elementwise")
    if fused.unsupported(inputs, chain, info) is not None:
        return None
    return fused.plan(inputs, outputs, chain, info)


class _Kernel:
    """The fused kernel's spec, launch arguments (after the buffers) and what it needs of a device; ``wide``:
    elements each work item computes (its same-shaped inputs and its outputs moved by WIDE_LOAD and WIDE_STORE)."""

    def __init__(self, inputs: Sequence[TensorType], steps: Sequence[tuple], outputs: Sequence[int],
                 types: Sequence[TensorType], wide: int = 1) -> None:
        n_in = len(inputs)
        full = types[outputs[0]].shape
        self.size = types[outputs[0]].size
        walks = [broadcast_strides(t.shape, full) for t in inputs]
        dense = contiguous_strides(full)
        strided = [j for j, w in enumerate(walks) if [s for s, d in zip(w, full) if d != 1] !=
                   [s for s, d in zip(dense, full) if d != 1]]
        sizes, strides = collapse(full, [walks[j] for j in strided]) if strided else ([], [])
        self.rank = len(sizes)
        names = [f"dl_d{d}" for d in range(self.rank)]
        stride_names = [[f"dl_s{j}_{d}" for d in range(self.rank)] for j in strided]
        offsets = {j: f"dl_o{j}" for j in strided}
        out_types = [dialect_type(types[s].dtype) for s in outputs]
        if wide > 1:  # a run of ``wide`` elements a work item: same-shaped inputs and the outputs moved at once
            body = [f"    FOR_EACH(dl_q, dl_nq) {{\n        int dl_i0 = dl_q * {wide};\n"]
            body += [f"        WIDE_LOAD({dialect_type(t.dtype)}, {wide}, dl_in{j}, dl_i0, dl_n, dl_w{j})\n"
                     for j, t in enumerate(inputs) if j not in offsets]
            body += [f"        WIDE_DECL({t}, {wide}, dl_r{k})\n" for k, t in enumerate(out_types)]
            body.append(f"        UNROLL for (int dl_u = 0; dl_u < {wide}; ++dl_u) {{\n"
                        "        int i = dl_i0 + dl_u < dl_n ? dl_i0 + dl_u : dl_n - 1;\n")
        else:
            body = ["    FOR_EACH(i, dl_n) {\n"]
        body += [f"        int {offsets[j]} = 0;\n" for j in strided]
        body.append(unravel("i", names, stride_names, [offsets[j] for j in strided]))
        for j, t in enumerate(inputs):
            at = f"WIDE(dl_w{j}, dl_u)" if wide > 1 and j not in offsets else f"dl_in{j}[{offsets.get(j, 'i')}]"
            body.append(f"        {dialect_type(t.dtype)} dl_x{j} = {at};\n")
        scalars: list[tuple[Param, Any]] = [(Param("dl_n", "int", "scalar"), self.size)]
        if wide > 1:
            scalars.append((Param("dl_nq", "int", "scalar"), -(-self.size // wide)))
        scalars += [(Param(n, "int", "scalar"), s) for n, s in zip(names, sizes)]
        scalars += [(Param(n, "int", "scalar"), s) for ns, w in zip(stride_names, strides) for n, s in zip(ns, w)]
        lines, chain_scalars = compose(inputs, steps, types)
        body += lines
        scalars += chain_scalars
        for k, s in enumerate(outputs):
            body.append(f"        WIDE(dl_r{k}, dl_u) = dl_v{s};\n" if wide > 1 else f"        dl_out{k}[i] = dl_v{s};\n")
        if wide > 1:
            body.append("        }\n")
            body += [f"        WIDE_STORE({t}, {wide}, dl_out{k}, dl_i0, dl_n, dl_r{k})\n"
                     for k, t in enumerate(out_types)]
        body.append("    }")
        self.items = -(-self.size // wide)
        params = [Param(f"dl_in{j}", dialect_type(t.dtype), "in") for j, t in enumerate(inputs)]
        params += [Param(f"dl_out{k}", t, "out") for k, t in enumerate(out_types)]
        params += [p for p, _ in scalars]
        text = "".join(body)
        digest = hashlib.sha1((text + repr(params)).encode()).hexdigest()[:16]
        self.spec = KernelSpec(f"fused_{digest}", tuple(params), text, elem="float")
        self.scalars = [v for _, v in scalars]
        self.scalar_bytes = sum(8 if p.type in ("f64", "i64", "u64") else 4 for p, _ in scalars)
        self.buffers = n_in + len(outputs)


@register
class FusedElementwise(Op):
    """fused_elementwise(*inputs, steps=..., outputs=...): a chain of pointwise ops as one kernel (see the
    module); the graph's fusion pass makes these nodes."""

    name = "fused_elementwise"
    pointwise = True
    min_inputs = 1
    max_inputs = 32
    kernel_dtypes = KERNEL_DTYPES

    def __init__(self) -> None:
        self._dtypes: dict[tuple, tuple[Any, list[np.dtype]]] = {}

    # -- types ------------------------------------------------------------------------------------------------
    def step_types(self, inputs: Sequence[TensorType], steps: Sequence[tuple],
                   checked: list[dict[str, Any]] | None = None) -> list[TensorType]:
        """The type of every step's result for these input types (each step's checked attributes appended to
        ``checked`` where given); InvalidArgument naming the step that refuses."""
        known = list(inputs)
        for k, (name, attrs, operands) in enumerate(steps):
            try:
                step_attrs, outs = get(name).prepare([known[j] for j in operands], dict(attrs))
            except DeviceLayerError as exc:
                raise self.error(f"step {k} ({name}): {exc}") from None
            if len(outs) != 1:
                raise self.error(f"step {k} ({name}) has {len(outs)} outputs; a step has one")
            known.append(outs[0])
            if checked is not None:
                checked.append(step_attrs)
        return known[len(inputs):]

    def check(self, inputs, attrs):
        extra = set(attrs) - {"steps", "outputs"}
        if extra or "steps" not in attrs or "outputs" not in attrs:
            raise self.error("takes the attributes 'steps' and 'outputs'"
                             + (f"; unknown {sorted(extra)}" if extra else ""))
        steps = []
        try:
            for k, (name, step_attrs, operands) in enumerate(attrs["steps"]):
                operands = tuple(int(j) for j in operands)
                if not fusable(name):
                    raise self.error(f"step {k}: {name!r} is not a pointwise op it takes")
                if any(not 0 <= j < len(inputs) + k for j in operands):
                    raise self.error(f"step {k} ({name}) reads operands {operands}; it may read the "
                                     f"{len(inputs)} inputs and the steps before it")
                steps.append((name, dict(step_attrs), operands))
        except (TypeError, ValueError):
            raise self.error("'steps' must be a sequence of (op, attributes, operand indices)") from None
        if not steps:
            raise self.error("needs at least one step")
        try:
            outputs = tuple(int(s) for s in attrs["outputs"])
        except (TypeError, ValueError):
            raise self.error(f"'outputs' must be step indices, got {attrs['outputs']!r}") from None
        if not outputs or len(set(outputs)) != len(outputs) or any(not 0 <= s < len(steps) for s in outputs):
            raise self.error(f"'outputs' must be distinct indices of the {len(steps)} steps, got {outputs}")
        checked: list[dict[str, Any]] = []
        types = self.step_types(inputs, steps, checked)
        full = broadcast_shape(self, [t.shape for t in (*inputs, *types)])
        for s in outputs:
            if types[s].shape != full:
                raise self.error(f"output step {s} has shape {types[s].shape}; outputs have the chain's shape "
                                 f"{full}")
        return {"steps": tuple((name, a, operands) for (name, _, operands), a in zip(steps, checked)),
                "outputs": outputs}

    def infer(self, inputs, attrs):
        types = self.step_types(inputs, attrs["steps"])
        return [types[s] for s in attrs["outputs"]]

    # -- the host -------------------------------------------------------------------------------------------------
    def _evaluate(self, values: list[np.ndarray], steps: Sequence[tuple], written: dict[int, np.ndarray],
                  dtypes: Sequence[np.dtype], scratch: dict[int, np.ndarray] | None, reference: bool) -> list:
        """Run the steps on ``values``: results into ``written`` (step -> array) where given, else into ``scratch``
        (step -> flat buffer, made on first use) or new arrays; returns every value."""
        for k, (name, attrs, operands) in enumerate(steps):
            op = get(name)
            ins = [values[j] for j in operands]
            if reference:
                values.append(op.reference(ins, attrs)[0])
                continue
            target = written.get(k)
            if target is None:
                shape = np.broadcast_shapes(*(x.shape for x in ins))
                n = math.prod(shape)
                buf = scratch.get(k) if scratch is not None else None
                if buf is None or buf.size < n:
                    buf = np.empty(max(n, HOST_BLOCK if scratch is not None else n), dtypes[k])
                    if scratch is not None:
                        scratch[k] = buf
                target = buf[:n].reshape(shape)
            if target.size:
                op.reference_into(ins, [target], attrs)
            values.append(target)
        return values

    def reference(self, inputs, attrs):
        values = self._evaluate(list(inputs), attrs["steps"], {}, (), None, True)
        full = np.broadcast_shapes(*(np.shape(v) for v in values))
        return [np.broadcast_to(values[len(inputs) + s], full).copy() for s in attrs["outputs"]]

    def _step_dtypes(self, inputs: Sequence[np.ndarray], steps: Sequence[tuple]) -> list[np.dtype]:
        key = (id(steps), tuple(x.dtype.str for x in inputs))
        hit = self._dtypes.get(key)
        if hit is None or hit[0] is not steps:  # (the id of a steps tuple that has since gone)
            types = self.step_types([TensorType((), x.dtype) for x in inputs], steps)
            hit = self._dtypes[key] = (steps, [t.dtype for t in types])
        return hit[1]

    def reference_into(self, inputs, outputs, attrs):
        steps, outs = attrs["steps"], attrs["outputs"]
        full = outputs[0].shape
        size = outputs[0].size
        if not size:
            return None
        dtypes = self._step_dtypes(inputs, steps)
        rank = len(full)
        if rank == 0 or size <= HOST_BLOCK:
            self._evaluate(list(inputs), steps, dict(zip(outs, outputs)), dtypes, None, False)
            return None
        padded = [x.reshape((1,) * (rank - x.ndim) + x.shape) for x in inputs]
        axis = next(a for a in range(rank) if math.prod(full[a + 1:]) <= HOST_BLOCK)
        rows = max(1, HOST_BLOCK // max(1, math.prod(full[axis + 1:])))
        per = -(-full[axis] // rows)
        outer = full[:axis]
        blocks = math.prod(outer) * per

        def work(lo: int, hi: int) -> None:
            scratch: dict[int, np.ndarray] = {}
            for b in range(lo, hi):
                o, seg = divmod(b, per)
                index = tuple(int(i) for i in np.unravel_index(o, outer)) if outer else ()
                start, stop = seg * rows, min(full[axis], seg * rows + rows)

                def cut(x: np.ndarray) -> np.ndarray:
                    lead = tuple(i if n > 1 else 0 for i, n in zip(index, x.shape))
                    return x[lead + ((slice(start, stop) if x.shape[axis] > 1 else slice(0, 1)),)]
                self._evaluate([cut(x) for x in padded], steps, {s: cut(y) for s, y in zip(outs, outputs)},
                               dtypes, scratch, False)
        nbytes = sum(x.nbytes for x in inputs) + outputs[0].nbytes * (len(steps) + len(outputs))
        parallel(work, blocks, nbytes)
        return None

    def bind_into(self, inputs, outputs, attrs):
        """A chain of one block or less (a small model's, where each NumPy call's fixed cost is most of the time):
        each step bound once (``Op.bind_into``) to its operands and to a temporary of its own, made here."""
        steps, outs = attrs["steps"], attrs["outputs"]
        size = outputs[0].size
        if not size or not outputs[0].ndim or size > HOST_BLOCK:
            return super().bind_into(inputs, outputs, attrs)
        dtypes = self._step_dtypes(inputs, steps)
        written = dict(zip(outs, outputs))
        values, calls = list(inputs), []
        for k, (name, step_attrs, operands) in enumerate(steps):
            ins = [values[j] for j in operands]
            target = written.get(k)
            if target is None:
                target = np.empty(np.broadcast_shapes(*(x.shape for x in ins)), dtypes[k])
            if target.size:
                calls.append(get(name).bind_into(ins, [target], step_attrs))
            values.append(target)
        calls = tuple(calls)

        def chain() -> None:
            for call in calls:
                call()
        return chain

    # -- kernel devices ---------------------------------------------------------------------------------------------
    def unsupported(self, inputs: Sequence[TensorType], attrs: dict[str, Any], info: DeviceInfo) -> str | None:
        steps, outs = attrs["steps"], attrs["outputs"]
        try:
            types = self.step_types(inputs, steps)
        except DeviceLayerError as exc:
            return str(exc)
        known = list(inputs) + types
        for k, (name, step_attrs, operands) in enumerate(steps):
            why = get(name).unsupported([known[j] for j in operands], step_attrs, info)
            if why is None and types[k].dtype.name not in info.dtypes:
                why = f"{info.id} has no {types[k].dtype.name}"
            if why is not None:
                return f"step {k} ({name}): {why}"
        if info.kernel_language == "python":
            return None
        if any(t.size > INT_MAX for t in known):
            return "tensors of more than 2**31 - 1 elements exceed the kernels' int32 indexing"
        kernel = _Kernel(inputs, steps, outs, types)
        if kernel.rank > MAX_RANK:
            return f"the broadcast needs {kernel.rank} dimensions; the kernel takes {MAX_RANK}"
        if kernel.buffers > MAX_BUFFERS:
            return f"{kernel.buffers} tensors; the kernel takes {MAX_BUFFERS}"
        if kernel.scalar_bytes > MAX_SCALAR_BYTES:
            return f"its scalars take {kernel.scalar_bytes} bytes; every device takes {MAX_SCALAR_BYTES}"
        return None

    def plan(self, inputs, outputs, attrs, info):
        steps, outs = attrs["steps"], attrs["outputs"]
        kernel = _Kernel(inputs, steps, outs, self.step_types(inputs, steps), wide_elements(inputs, outputs, info))
        args = [("in", j) for j in range(len(inputs))] + [("out", k) for k in range(len(outs))] + kernel.scalars
        local = local_1d(info)
        return Plan([Launch(kernel.spec, tuple(args), groups_for(kernel.items, local, info), (local,))])


__all__ = ["FusedElementwise", "fusable", "compose", "wide_plan", "FUSABLE_KINDS"]
