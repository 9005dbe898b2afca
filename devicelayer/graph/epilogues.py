"""Epilogue fusion: a pointwise chain after a matrix product becomes that product's epilogue.

``attach`` takes the fusion pass's replacements and, for each ``matmul`` or ``gemm`` whose result only a pointwise
group (or one fusable node) on its device reads, makes product and chain one node of the product's op with the
chain as its ``epilogue`` (``kernels/ops/epilogue.py``): one kernel launch where there were two.  It does so only
where the chain writes its last step alone, the result keeps the product's shape and dtype, the product with the
epilogue runs on the device, and no vendor library would take the product there unless it applies that epilogue
in the same call (``prefers_epilogue``: cuBLASLt's bias row, summand and ReLU); otherwise a vendor-library product
keeps the chain as the fused kernel after it (on the host, NumPy's product, which runs the small ones, is the op's
own).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..errors import DeviceLayerError
from ..kernels.op import TensorType, get
from ..kernels.ops.fused import fusable
from .ir import Node, Value
from .patterns import Replacement
from .placement import Placement

#: ops that take an epilogue
PRODUCERS = ("matmul", "gemm")
#: ops that only give a dense tensor another shape: a product read through one still takes the chain after it
VIEWS = ("reshape", "flatten", "squeeze", "unsqueeze")


def _vendor_takes(device: Any, node: Node, ins: Sequence[TensorType], out: TensorType,
                  attrs: Mapping[str, Any]) -> bool:
    """Whether the device's vendor library would run ``node`` as written (the host's too: there a product large
    enough for oneDNN stays on oneDNN's team, where NumPy's would wake BLAS's threads between its calls)."""
    vendor = device.vendor_op(node.op)
    accepts = getattr(vendor, "accepts", None)
    return vendor is not None and (accepts is None or bool(accepts(ins, [out], dict(attrs))))


def _vendor_takes_epilogue(device: Any, node: Node, ins: Sequence[TensorType], outs: Sequence[TensorType],
                           attrs: Mapping[str, Any]) -> bool:
    """Whether the device's vendor library, taking ``node``, would rather take it with the epilogue in ``attrs``
    too (an op with ``prefers_epilogue`` whose ``accepts`` takes the call: cuBLASLt adds a bias row, a summand and a
    ReLU in the product's own launch)."""
    vendor = device.vendor_op(node.op)
    accepts = getattr(vendor, "accepts", None)
    return bool(getattr(vendor, "prefers_epilogue", False)) and accepts is not None and \
        bool(accepts(ins, list(outs), dict(attrs)))


def _chain(members: Sequence[Node], product: Value) -> tuple[list[Value], tuple] | None:
    """(extra inputs, epilogue steps) of pointwise ``members`` (in order) reading ``product``; None where the
    product is not read or a member has more than one output."""
    made = {id(m.outputs[0]): k for k, m in enumerate(members) if len(m.outputs) == 1}
    if len(made) != len(members):
        return None
    extras: list[Value] = []
    for m in members:
        for v in m.inputs:
            if v is not product and id(v) not in made and all(v is not u for u in extras):
                extras.append(v)
    slot = {id(product): 0, **{id(v): 1 + j for j, v in enumerate(extras)}}
    n_in = 1 + len(extras)
    steps = tuple((m.op, dict(m.attrs), tuple(slot[id(v)] if id(v) in slot else n_in + made[id(v)]
                                              for v in m.inputs)) for m in members)
    return extras, steps


def folded_shape(shape: tuple[int, ...], view: tuple[int, ...], product: tuple[int, ...]) -> tuple[int, ...] | None:
    """The shape an operand of ``shape``, broadcast against a product's result seen as ``view``, takes to give the
    same elements against the result's own ``product`` shape: the product's shape where it is the view's, its
    trailing dims where it varies only along the trailing dims both shapes share; None otherwise."""
    if tuple(shape) == tuple(view):
        return tuple(product)
    shared = 0
    while shared < min(len(view), len(product)) and view[-1 - shared] == product[-1 - shared]:
        shared += 1
    if any(d != 1 for d in shape[:max(0, len(shape) - shared)]):
        return None
    return tuple(shape[max(0, len(shape) - shared):])


def _through_view(node: Node, users: list[Node], readers: Mapping[int, list[Node]], outputs: set[int],
                  placement: Placement, blocked: set[int]) -> Node | None:
    """The view node (``VIEWS``) that alone reads ``node``'s result, on its device and free to take; else None."""
    if len(users) != 1 or users[0].op not in VIEWS or id(users[0]) in blocked:
        return None
    view = users[0]
    if id(view.outputs[0]) in outputs or placement.of(view) is not placement.of(node):
        return None
    return view if readers.get(id(view.outputs[0])) else None


def _pattern_unit(users: list[Node], patterns_of: Mapping[int, Replacement]) -> tuple[Replacement, Node] | None:
    """The pointwise pattern (GELU) whose members are all of ``users``' pattern, with a node standing for it."""
    r = patterns_of.get(id(users[0]))
    if r is None or not fusable(r.op) or len(r.outputs) != 1 or any(patterns_of.get(id(u)) is not r for u in users):
        return None
    return r, Node(f"{r.kind}#stand-in", r.op, list(r.inputs), list(r.outputs), dict(r.attrs))


def attach(nodes: Sequence[Node], types: Mapping[int, TensorType], outputs: set[int],
           readers: Mapping[int, list[Node]], placement: Placement, taken: set[int],
           found: list[Replacement]) -> list[Replacement]:
    """``found`` with each pointwise group, pointwise pattern (GELU) or lone fusable node that alone reads a
    product's result (directly, or through a view that alone reads it: ``VIEWS``) merged into it as an epilogue
    replacement (see the module).  Through a view the chain runs on the product's own shape, its other operands
    given that shape (``folded_shape``), and the result takes the view's shape after: ``extra["input_shapes"]`` and
    ``extra["output_shape"]`` of the replacement, which ``fuse.contract`` makes reshapes."""
    group_of = {id(m): r for r in found if r.kind == "elementwise" for m in r.members}
    patterns_of = {id(m): r for r in found if r.kind not in ("elementwise", "epilogue") for m in r.members}
    claimed = {id(m) for r in found for m in r.members}
    result = list(found)
    for node in nodes:
        if (node.op not in PRODUCERS or id(node) in taken or id(node) in claimed or len(node.outputs) != 1
                or node.attrs.get("epilogue")):
            continue
        product = node.outputs[0]
        users = readers.get(id(product), [])
        if id(product) in outputs or not users:
            continue
        view = _through_view(node, users, readers, outputs, placement, taken | claimed)
        read = view.outputs[0] if view is not None else product
        if view is not None:
            users = readers[id(read)]
        device = placement.of(node)
        group = group_of.get(id(users[0]))
        # (a pattern joins on kernel devices: the host runs its op as one oneDNN call, which as a product's post-op
        # would not treat NaN and infinities as the op does)
        pattern = None if group is not None or device.info.kernel_language == "python" else \
            _pattern_unit(users, patterns_of)
        if group is not None:
            members = list(group.members)
            if group.attrs["outputs"] != (len(members) - 1,):
                continue
        elif pattern is not None:
            members = [pattern[1]]
        elif (len(users) == 1 and id(users[0]) not in taken and id(users[0]) not in claimed
              and fusable(users[0].op) and len(users[0].outputs) == 1):
            members = [users[0]]
        else:
            continue
        ids = {id(m) for m in members} | ({id(m) for m in pattern[0].members} if pattern else set())
        if any(id(u) not in ids for u in users) or (pattern[0].device if pattern else placement.of(members[0])) \
                is not device:
            continue
        chain = _chain(members, read)
        if chain is None:
            continue
        extras, steps = chain
        last = members[-1].outputs[0]
        extra_types = [types[id(v)] for v in extras]
        shapes: dict[int, tuple[int, ...]] = {}
        if view is not None:
            if id(last) in outputs:  # (a graph output's reshape would be a copy each run)
                continue
            folded = [folded_shape(t.shape, types[id(read)].shape, types[id(product)].shape) for t in extra_types]
            # (a graph input's reshape would be a copy each run too)
            if any(f is None or (f != t.shape and v.producer is None and v.constant is None)
                   for f, t, v in zip(folded, extra_types, extras)):
                continue
            shapes = {len(node.inputs) + j: f for j, (f, t) in enumerate(zip(folded, extra_types)) if f != t.shape}
            extra_types = [TensorType(f, t.dtype) for f, t in zip(folded, extra_types)]
        ins = [types[id(v)] for v in node.inputs]
        op = get(node.op)
        all_in = ins + extra_types
        try:
            attrs, outs = op.prepare(all_in, {**node.attrs, "epilogue": steps, "epilogue_inputs": len(extras)})
        except DeviceLayerError:
            continue
        want = types[id(last)] if view is None else TensorType(types[id(product)].shape, types[id(last)].dtype)
        if outs[0] != want or (view is not None and types[id(last)].shape != types[id(read)].shape) or \
                op.unsupported(all_in, attrs, device.info) is not None:
            continue
        if _vendor_takes(device, node, ins, types[id(product)], node.attrs) and \
                not _vendor_takes_epilogue(device, node, all_in, outs, attrs):
            continue
        if group is not None:
            result = [r for r in result if r is not group]
        if pattern is not None:
            result = [r for r in result if r is not pattern[0]]
            members = list(pattern[0].members)
        taken_members = [node, *([view] if view is not None else []), *members]
        r = Replacement("epilogue", taken_members, node.op, attrs, [*node.inputs, *extras], [last], device)
        if view is not None:
            r.extra["input_shapes"] = shapes
            r.extra["output_shape"] = types[id(read)].shape
        result.append(r)
        claimed |= {id(m) for m in taken_members}
    return result


__all__ = ["attach", "folded_shape", "PRODUCERS", "VIEWS"]
