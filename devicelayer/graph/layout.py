"""Device-private layouts between the steps of a plan.

A vendor op may hold a tensor in a layout of its own (on the host, oneDNN's
channels-last).  A tensor stays in that layout where the vendor op writing it
offers the layout and every reader on the same device takes it: a vendor op of
that layout at an input it accepts there (``layout_input``), or a pointwise op
(``Op.pointwise``) whose same-shaped inputs all are in that layout and whose
output stays in it too.  Pointwise ops need no change (element order does not
matter to them); vendor ops are told which ends skip the conversion
(``with_layout``).  A vendor op may offer its layout for some calls only
(``offers_layout(inputs, outputs, attrs)``: where it runs faster so).  A
tensor that anything else reads (another op, another device, the caller) is
in the graph's layout.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ..kernels.op import OPS
from ..kernels.runner import set_vendor, vendor_of


def _private(step: Any, types: Mapping[int, Any]) -> Any:
    """The vendor op of a node step that offers a private layout for this call, else None."""
    if step.kind != "node":
        return None
    fn = vendor_of(step.op_plan)
    ok = getattr(fn, "private_layout", None) and callable(getattr(fn, "with_layout", None))
    if not (ok and callable(getattr(fn, "layout_input", None))):
        return None
    offers = getattr(fn, "offers_layout", None)
    if offers is not None and not offers([types[id(v)] for v in step.node.inputs],
                                         [types[id(v)] for v in step.node.outputs], step.node.attrs):
        return None
    return fn


def _pointwise_inputs(step: Any, types: Mapping[int, Any]) -> list[int] | None:
    """The inputs of a pointwise node step that share its output's shape (the rest broadcast from one element);
    None where the step is not such a node."""
    if step.kind != "node" or len(step.node.outputs) != 1:
        return None
    op = OPS.get(step.node.op)
    if op is None or not op.pointwise:
        return None
    shape = types[id(step.node.outputs[0])].shape
    ins = [types[id(v)] for v in step.node.inputs]
    same = [i for i, t in enumerate(ins) if t.shape == shape]
    if not same or any(t.shape != shape and t.size != 1 for t in ins):
        return None
    return same


def negotiate(steps: Sequence[Any], outputs: set[int], types: Mapping[int, Any]) -> int:
    """Agree private layouts between the node steps of a plan (``outputs``: ids of the graph's outputs; ``types``:
    each value's type by id); returns how many tensors are held in a private layout."""
    readers: dict[int, list[tuple[Any, int]]] = {}
    for s in steps:
        if s.kind == "node":
            for i, v in enumerate(s.node.inputs):
                readers.setdefault(id(v), []).append((s, i))
        elif s.value is not None:  # a copy to another device or an output fetched: reads the graph's layout
            readers.setdefault(id(s.value), []).append((s, -1))
    vendors = {id(s): _private(s, types) for s in steps}
    pointwise = {id(s): _pointwise_inputs(s, types) for s in steps}
    out_of = {id(s): id(s.node.outputs[0]) for s in steps if s.kind == "node" and len(s.node.outputs) == 1}
    # the candidates, in step order: a private vendor op's output, or a pointwise op's whose same-shaped inputs
    # are all candidates of one layout (it carries theirs)
    layout: dict[int, str] = {}
    producer: dict[int, Any] = {}
    for s in steps:
        if id(s) not in out_of or out_of[id(s)] in outputs:
            continue
        fn, same = vendors[id(s)], pointwise[id(s)]
        if fn is not None:
            found = fn.private_layout
        elif same is not None:
            kinds = {layout.get(id(s.node.inputs[i])) for i in same}
            found = kinds.pop() if len(kinds) == 1 else None
        else:
            found = None
        if found is not None:
            layout[out_of[id(s)]] = found
            producer[out_of[id(s)]] = s

    def keeps(v: int) -> bool:
        """Whether every reader of candidate ``v`` takes it in its layout (given the other candidates)."""
        s, kind = producer[v], layout[v]
        if pointwise[id(s)] is not None and vendors[id(s)] is None:
            if any(layout.get(id(s.node.inputs[i])) != kind for i in pointwise[id(s)]):
                return False
        for r, i in readers.get(v, []):
            if i < 0 or r.device is not s.device:
                return False
            fn = vendors[id(r)]
            if fn is not None and fn.private_layout == kind and fn.layout_input(i):
                continue
            if fn is None and pointwise[id(r)] is not None and i in pointwise[id(r)] \
                    and layout.get(out_of[id(r)]) == kind:
                continue
            return False
        return bool(readers.get(v))

    changed = True
    while changed:  # drop candidates until every one left is consistent (a greatest fixed point)
        changed = False
        for v in list(layout):
            if not keeps(v):
                del layout[v]
                changed = True
    in_private: dict[int, set[int]] = {}
    for v in layout:
        for r, i in readers[v]:
            in_private.setdefault(id(r), set()).add(i)
    for s in steps:
        fn = vendors[id(s)]
        out_private = id(s) in out_of and out_of[id(s)] in layout
        if fn is not None and (out_private or id(s) in in_private):
            set_vendor(s.op_plan, fn.with_layout(frozenset(in_private.get(id(s), ())), out_private))
    return len(layout)
