"""Control flow: If, Loop and Scan.

Where the walk knows enough when the graph is specialised, the subgraph is
inlined: If's taken branch (its condition a constant, or read at run time, which
splits the plan there), every iteration of a Loop whose trip count and condition
are known, every step of a Scan (the sequence length is a shape).  Where it does
not (a loop condition computed from data, a body that itself needs run-time
values, very long loops), the node runs as a driver between two segments: the
subgraph is a model of its own, compiled once into a plan, and run per iteration
with the loop-carried values staying on the device.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import GraphError, UnsupportedOp
from ...graph.dynamic import InputSpec
from ..walk import NeedDriver, Program, subgraph_reads, walk
from .base import converter, reshape

#: the most body nodes an inlined Loop or Scan may add (iterations times body size); beyond, it runs as a driver
MAX_INLINE_NODES = 4096


class _Stop(Exception):
    """An inlined subgraph could not be walked to its end (it needs run-time values): run it as a driver."""


def inline(ctx: Any, graph: Any, tag: str, bound: dict[str, Any]) -> list[Any]:
    """Walk a subgraph's nodes into the current graph with its formal inputs bound to ``bound``; its outputs.
    _Stop where the subgraph needs a cut."""
    node, node_name = ctx.node, ctx.node_name
    from ..model import _initializers

    ctx.env.update(_initializers(graph))
    ctx.env.update(bound)
    program = Program(graph.node, [o.name for o in graph.output], prefix=f"{node_name}/{tag}/")
    try:
        cut = walk(ctx, program, 0)
    finally:
        ctx.node, ctx.node_name = node, node_name
    if cut is not None:
        raise _Stop(str(cut.reason))
    return [ctx.env[o.name] for o in graph.output]


def _scalar_value(x: np.ndarray, what: str) -> Any:
    if x.size != 1:
        raise GraphError(f"{what} must hold one value, got shape {x.shape}")
    return x.reshape(-1)[0].item()


# -- If ------------------------------------------------------------------------------------------------------------
@converter("If")
def _if(ctx, attrs):
    cond = bool(_scalar_value(ctx.need_const(0, "the If condition"), "the If condition"))
    branch = attrs["then_branch"] if cond else attrs["else_branch"]
    tag = "then" if cond else "else"
    try:
        return inline(ctx, branch, tag, {})
    except _Stop:
        raise NeedDriver(SubgraphDriver(ctx, branch, tag, "if"), _driver_inputs(ctx, [branch]),
                         f"the {tag} branch runs as a plan of its own") from None


# -- Loop ----------------------------------------------------------------------------------------------------------
@converter("Loop")
def _loop(ctx, attrs):
    body = attrs["body"]
    n_carried = len(ctx.node.input) - 2
    trip = ctx.const(0)
    cond = ctx.const(1)
    given_trip, given_cond = ctx.has(0), ctx.has(1)
    known = (not given_trip or trip is not None) and (not given_cond or cond is not None)
    if known:
        m = int(_scalar_value(trip, "the trip count M")) if given_trip else None
        c = bool(_scalar_value(cond, "the loop condition")) if given_cond else True
        if m is not None and m * max(len(body.node), 1) <= MAX_INLINE_NODES:
            try:
                return _unrolled_loop(ctx, body, m, c, n_carried)
            except _Stop:
                pass
    raise NeedDriver(SubgraphDriver(ctx, body, "body", "loop"), _driver_inputs(ctx, [body]),
                     "the loop body runs as a plan of its own, once per iteration")


def _unrolled_loop(ctx: Any, body: Any, m: int, cond: bool, n_carried: int) -> list[Any]:
    """Every iteration of a Loop inlined, while the condition stays known; _Stop when it becomes data."""
    carried = [ctx.raw(2 + j) for j in range(n_carried)]
    scans: list[list[Any]] = []
    i = 0
    while i < m and cond:
        bound = {body.input[0].name: np.array(i, np.int64), body.input[1].name: np.array(cond, bool)}
        bound.update({body.input[2 + j].name: carried[j] for j in range(n_carried)})
        outs = inline(ctx, body, f"iter{i}", bound)
        c = outs[0]
        if not isinstance(c, np.ndarray):
            raise _Stop("the loop condition is computed from data")
        cond = bool(_scalar_value(c, "the loop condition"))
        carried = outs[1:1 + n_carried]
        step = outs[1 + n_carried:]
        if not scans:
            scans = [[] for _ in step]
        for acc, y in zip(scans, step):
            acc.append(y)
        i += 1
    n_scan = len(body.output) - 1 - n_carried
    finals = [_stack(ctx, acc, 0, f"scan{k}", body.output[1 + n_carried + k]) for k, acc in
              enumerate(scans or [[] for _ in range(n_scan)])]
    return carried + finals


def _stack(ctx: Any, parts: Sequence[Any], axis: int, suffix: str, info: Any) -> Any:
    """``parts`` stacked along a new ``axis`` (an empty scan output: shape (0,) of the declared type)."""
    if not parts:
        from ..loader import np_dtype

        tt = info.type.tensor_type
        return np.zeros((0,), np_dtype(tt.elem_type) if tt.elem_type else np.float32)
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.stack(parts, axis=axis)
    rank = len(parts[0].shape)
    axis = axis + rank + 1 if axis < 0 else axis
    ups = [reshape(ctx, p, tuple(p.shape[:axis]) + (1,) + tuple(p.shape[axis:]), f"{suffix}_{k}")
           for k, p in enumerate(parts)]
    if len(ups) == 1:
        return ups[0]
    return ctx.op("concat", ups, suffix, axis=axis)


# -- Scan ----------------------------------------------------------------------------------------------------------
@converter("Scan")
def _scan(ctx, attrs):
    if ctx.opset < 9:
        return _scan8(ctx, attrs)
    body = attrs["body"]
    m = int(attrs["num_scan_inputs"])
    ins = [ctx.raw(i) for i in range(len(ctx.node.input))]
    n = len(ins) - m
    if n < 0:
        raise GraphError(f"Scan has {len(ins)} inputs, fewer than num_scan_inputs={m}")
    axes = [int(a) for a in attrs.get("scan_input_axes", [0] * m)]
    dirs = [int(d) for d in attrs.get("scan_input_directions", [0] * m)]
    k_out = len(body.output) - n
    out_axes = [int(a) for a in attrs.get("scan_output_axes", [0] * k_out)]
    out_dirs = [int(d) for d in attrs.get("scan_output_directions", [0] * k_out)]
    if len(axes) != m or len(dirs) != m or len(out_axes) != k_out or len(out_dirs) != k_out:
        raise GraphError("Scan: the scan_* attributes must give one value per scan input / output")
    scanned = ins[n:]
    axes = [a + len(x.shape) if a < 0 else a for a, x in zip(axes, scanned)]
    lengths = {x.shape[a] for a, x in zip(axes, scanned)}
    if len(lengths) > 1:
        raise GraphError(f"Scan: the scan inputs have different lengths {sorted(lengths)}")
    steps = lengths.pop() if lengths else 0
    if steps * max(len(body.node), 1) > MAX_INLINE_NODES:
        raise NeedDriver(ScanDriver(ctx, body, n, axes, dirs, out_axes, out_dirs),
                         _driver_inputs(ctx, [body]), "the scan body runs as a plan of its own, once per step")
    states = ins[:n]
    per_step: list[list[Any]] = [[] for _ in range(k_out)]
    try:
        for t in range(steps):
            bound = {body.input[j].name: states[j] for j in range(n)}
            for j, (x, a, d) in enumerate(zip(scanned, axes, dirs)):
                pos = steps - 1 - t if d else t
                bound[body.input[n + j].name] = _take(ctx, x, a, pos, f"step{t}_in{j}")
            outs = inline(ctx, body, f"step{t}", bound)
            states = outs[:n]
            for acc, y in zip(per_step, outs[n:]):
                acc.append(y)
    except _Stop:
        raise NeedDriver(ScanDriver(ctx, body, n, axes, dirs, out_axes, out_dirs), _driver_inputs(ctx, [body]),
                         "the scan body runs as a plan of its own, once per step") from None
    finals = []
    for k, (acc, a, d) in enumerate(zip(per_step, out_axes, out_dirs)):
        finals.append(_stack(ctx, acc[::-1] if d else acc, a, f"scan{k}", body.output[n + k]))
    return states + finals


def _scan8(ctx: Any, attrs: dict[str, Any]) -> list[Any]:
    """Scan of opset 8: every input has a batch axis 0 (the scan axis of a scan input is 1), the body runs per
    batch entry; sequence_lens, when given, must be the full length (ragged batches are refused)."""
    body = attrs["body"]
    ins = [ctx.raw(i) for i in range(1, len(ctx.node.input))]
    m = int(attrs["num_scan_inputs"])
    n = len(ins) - m
    dirs = [int(d) for d in attrs.get("directions", [0] * m)]
    if n < 0 or len(dirs) != m:
        raise GraphError(f"Scan: {len(ins)} inputs after sequence_lens for num_scan_inputs={m} and {len(dirs)} "
                         "directions")
    batch = ins[0].shape[0] if ins else 0
    steps = ins[n].shape[1] if m else 0
    if ctx.has(0):
        lens = ctx.need_const(0, "Scan's sequence_lens")
        if np.any(lens != steps):
            raise UnsupportedOp(f"Scan of opset 8 with sequence_lens {lens.tolist()} shorter than the {steps} steps")
    if batch * steps * max(len(body.node), 1) > MAX_INLINE_NODES:
        raise UnsupportedOp(f"Scan of opset 8 over {batch} x {steps} steps (more than inlining allows)")
    k_out = len(body.output) - n
    finals: list[list[Any]] = [[] for _ in range(n)]
    scans: list[list[Any]] = [[] for _ in range(k_out)]
    for b in range(batch):
        states = [_take(ctx, x, 0, b, f"b{b}_state{j}") for j, x in enumerate(ins[:n])]
        per_step: list[list[Any]] = [[] for _ in range(k_out)]
        for s in range(steps):
            bound = {body.input[j].name: states[j] for j in range(n)}
            for j, (x, d) in enumerate(zip(ins[n:], dirs)):
                row = _take(ctx, x, 0, b, f"b{b}_s{s}_row{j}")
                bound[body.input[n + j].name] = _take(ctx, row, 0, steps - 1 - s if d else s, f"b{b}_s{s}_in{j}")
            try:
                outs = inline(ctx, body, f"b{b}_step{s}", bound)
            except _Stop as stop:
                raise UnsupportedOp(f"Scan of opset 8 whose body needs run-time values ({stop})") from None
            states = outs[:n]
            for acc, y in zip(per_step, outs[n:]):
                acc.append(y)
        for acc, st in zip(finals, states):
            acc.append(st)
        for k, acc in enumerate(per_step):
            scans[k].append(_stack(ctx, acc, 0, f"b{b}_scan{k}", body.output[n + k]))
    return ([_stack(ctx, acc, 0, f"state{j}", body.output[j]) for j, acc in enumerate(finals)]
            + [_stack(ctx, acc, 0, f"scan{k}", body.output[n + k]) for k, acc in enumerate(scans)])


def _take(ctx: Any, x: Any, axis: int, index: int, suffix: str) -> Any:
    """``x[..., index, ...]`` along ``axis`` (the axis dropped)."""
    if isinstance(x, np.ndarray):
        return np.take(x, index, axis=axis)
    return ctx.op("gather", [x, np.array(index, np.int64)], suffix, axis=axis)


# -- drivers -------------------------------------------------------------------------------------------------------
def _driver_inputs(ctx: Any, graphs: Sequence[Any]) -> list[str]:
    """What a driver reads: the node's inputs and the outer names its subgraphs read."""
    names = [n for n in ctx.node.input if n]
    for g in graphs:
        names += sorted(n for n in subgraph_reads(g) if n in ctx.env and n not in names)
    return names


class SubgraphDriver:
    """Runs a node's subgraph as a plan of its own between two segments: an If branch once, a Loop body once per
    iteration (carried values stay on the device; scan outputs are stacked on the host)."""

    def __init__(self, ctx: Any, graph: Any, tag: str, kind: str) -> None:
        self.owner, self.graph, self.kind = ctx.owner, graph, kind
        self.node = ctx.node
        self.name = f"{ctx.node_name}/{tag}"
        outer = sorted(n for n in subgraph_reads(graph) if n in ctx.env)
        # what the walk knows on the host is fixed for this specialisation; the rest comes in at run time
        self.constants = {n: ctx.env[n] for n in outer if isinstance(ctx.env[n], np.ndarray)}
        self.runtime = [n for n in outer if n not in self.constants]
        self.plan: Any = None

    def _plan(self, values: dict[str, Any], parent: Any) -> Any:
        if self.plan is None:
            from ..model import OnnxModel

            constants, runtime = self.constants, self.runtime
            specs = [InputSpec(i.name, None, None, "optional") for i in self.graph.input]
            specs += [InputSpec(n, None, None, "optional") for n in runtime]
            model = OnnxModel.subgraph(self.graph, self.owner, specs, constants, self.name)
            self.plan = model.compile(parent.devices, **parent.options)
        return self.plan

    def __call__(self, values: dict[str, Any], parent: Any) -> list[Any]:
        plan = self._plan(values, parent)
        outer = {n: values[n] for n in self.runtime}
        if self.kind == "if":
            out = plan.run(outer)
            return [out[o.name] for o in self.graph.output]
        node, body = self.node, self.graph
        trip = parent.host_value(values[node.input[0]], "the trip count M") if node.input[0] else None
        m = int(_scalar_value(trip, "the trip count M")) if trip is not None else None
        c_in = parent.host_value(values[node.input[1]], "the loop condition") \
            if len(node.input) > 1 and node.input[1] else None
        cond = bool(_scalar_value(c_in, "the loop condition")) if c_in is not None else True
        n_carried = len(node.input) - 2
        carried = [values[node.input[2 + j]] if node.input[2 + j] else None for j in range(n_carried)]
        scans: list[list[np.ndarray]] = []
        previous: dict[str, Any] = {}
        i = 0
        while (m is None or i < m) and cond:
            feeds = {body.input[0].name: np.array(i, np.int64), body.input[1].name: np.array(cond, bool), **outer}
            feeds.update({body.input[2 + j].name: carried[j] for j in range(n_carried)})
            out = plan.run(feeds)
            _free_unused(previous, out.values())  # the last iteration's Tensors, now read
            previous = out
            cond = bool(_scalar_value(parent.host_value(out[body.output[0].name], "the loop condition"),
                                      "the loop condition"))
            carried = [out[o.name] for o in body.output[1:1 + n_carried]]
            step = [parent.host_value(out[o.name], "a scan output") for o in body.output[1 + n_carried:]]
            if not scans:
                scans = [[] for _ in step]
            for acc, y in zip(scans, step):
                acc.append(y)
            i += 1
        _free_unused(previous, carried)
        n_scan = len(body.output) - 1 - n_carried
        finals = [np.stack(acc) if acc else _empty(body.output[1 + n_carried + k])
                  for k, acc in enumerate(scans or [[] for _ in range(n_scan)])]
        return carried + finals

    def release(self) -> None:
        if self.plan is not None:
            self.plan.release()


class ScanDriver(SubgraphDriver):
    """Runs a Scan's body as a plan of its own once per step (the scan inputs sliced on the host)."""

    def __init__(self, ctx: Any, body: Any, n: int, axes: list[int], dirs: list[int], out_axes: list[int],
                 out_dirs: list[int]) -> None:
        super().__init__(ctx, body, "body", "scan")
        self.n, self.axes, self.dirs, self.out_axes, self.out_dirs = n, axes, dirs, out_axes, out_dirs

    def __call__(self, values: dict[str, Any], parent: Any) -> list[Any]:
        plan = self._plan(values, parent)
        node, body, n = self.node, self.graph, self.n
        outer = {k: values[k] for k in self.runtime}
        states = [values[node.input[j]] for j in range(n)]
        scanned = [parent.host_value(values[node.input[n + j]], "a scan input")
                   for j in range(len(node.input) - n)]
        steps = scanned[0].shape[self.axes[0]] if scanned else 0
        per_step: list[list[np.ndarray]] = [[] for _ in range(len(body.output) - n)]
        previous: dict[str, Any] = {}
        for t in range(steps):
            feeds = {body.input[j].name: states[j] for j in range(n)}
            for j, (x, a, d) in enumerate(zip(scanned, self.axes, self.dirs)):
                feeds[body.input[n + j].name] = np.ascontiguousarray(np.take(x, steps - 1 - t if d else t, axis=a))
            out = plan.run({**feeds, **outer})
            _free_unused(previous, out.values())
            previous = out
            states = [out[o.name] for o in body.output[:n]]
            for acc, o in zip(per_step, body.output[n:]):
                acc.append(parent.host_value(out[o.name], "a scan output"))
        _free_unused(previous, states)
        finals = []
        for acc, a, d, o in zip(per_step, self.out_axes, self.out_dirs, body.output[n:]):
            finals.append(np.stack(acc[::-1] if d else acc, axis=a) if acc else _empty(o))
        return states + finals


def _empty(info: Any) -> np.ndarray:
    from ..loader import np_dtype

    tt = info.type.tensor_type
    return np.zeros((0,), np_dtype(tt.elem_type) if tt.elem_type else np.float32)


def _free_unused(out: dict[str, Any], keep: Any) -> None:
    """Free the Tensors one iteration made, except those in ``keep`` (values, or lists of them)."""
    from ...tensors import Tensor

    def leaves(xs: Any) -> list[Any]:
        return [e for x in xs for e in (x if isinstance(x, list) else [x])]

    kept = {id(t) for t in leaves(keep) if isinstance(t, Tensor)}
    for x in leaves(out.values()):
        if isinstance(x, Tensor) and id(x) not in kept and x.buffer.base is None and not x.buffer.freed:
            x.device.pool.free(x.buffer, wait=[x.ready])

