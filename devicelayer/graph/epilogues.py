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


def attach(nodes: Sequence[Node], types: Mapping[int, TensorType], outputs: set[int],
           readers: Mapping[int, list[Node]], placement: Placement, taken: set[int],
           found: list[Replacement]) -> list[Replacement]:
    """``found`` with each pointwise group (or lone fusable node) that alone reads a product's result merged
    into it as an epilogue replacement (see the module)."""
    group_of = {id(m): r for r in found if r.kind == "elementwise" for m in r.members}
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
        group = group_of.get(id(users[0]))
        if group is not None:
            members = list(group.members)
            if group.attrs["outputs"] != (len(members) - 1,):
                continue
        elif (len(users) == 1 and id(users[0]) not in taken and id(users[0]) not in claimed
              and fusable(users[0].op) and len(users[0].outputs) == 1):
            members = [users[0]]
        else:
            continue
        ids = {id(m) for m in members}
        device = placement.of(node)
        if any(id(u) not in ids for u in users) or placement.of(members[0]) is not device:
            continue
        chain = _chain(members, product)
        if chain is None:
            continue
        extras, steps = chain
        ins = [types[id(v)] for v in node.inputs]
        op = get(node.op)
        all_in = ins + [types[id(v)] for v in extras]
        try:
            attrs, outs = op.prepare(all_in, {**node.attrs, "epilogue": steps, "epilogue_inputs": len(extras)})
        except DeviceLayerError:
            continue
        last = members[-1].outputs[0]
        if outs[0] != types[id(last)] or op.unsupported(all_in, attrs, device.info) is not None:
            continue
        if _vendor_takes(device, node, ins, types[id(product)], node.attrs) and \
                not _vendor_takes_epilogue(device, node, all_in, outs, attrs):
            continue
        if group is not None:
            result = [r for r in result if r is not group]
        result.append(Replacement("epilogue", [node, *members], node.op, attrs, [*node.inputs, *extras], [last],
                                  device))
        claimed |= ids | {id(node)}
    return result


__all__ = ["attach", "PRODUCERS"]
