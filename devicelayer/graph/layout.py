"""Device-private layouts between neighbouring vendor steps of a plan.

A vendor op may hold a tensor in a layout of its own (on the host, oneDNN's
channels-last) where it writes the tensor and every reader is a vendor op of
that layout on the same device: the plan asks each of them to skip the
conversion at that end (``with_layout``).  A tensor that anything else reads
(another op, another device, the caller) stays in the graph's layout.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..kernels.runner import set_vendor, vendor_of


def _private(step: Any) -> Any:
    """The vendor op of a node step that offers a private layout, else None."""
    if step.kind != "node":
        return None
    fn = vendor_of(step.op_plan)
    return fn if getattr(fn, "private_layout", None) and callable(getattr(fn, "with_layout", None)) else None


def negotiate(steps: Sequence[Any], outputs: set[int]) -> int:
    """Agree private layouts between the node steps of a plan (``outputs``: ids of the graph's outputs);
    returns how many tensors stay in a private layout."""
    readers: dict[int, list[tuple[Any, int]]] = {}
    for s in steps:
        if s.kind == "node":
            for i, v in enumerate(s.node.inputs):
                readers.setdefault(id(v), []).append((s, i))
        elif s.value is not None:  # a copy to another device or an output fetched: reads the graph's layout
            readers.setdefault(id(s.value), []).append((s, -1))
    vendors = {id(s): _private(s) for s in steps}
    in_private: dict[int, set[int]] = {}
    out_private: set[int] = set()
    for s in steps:
        fn = vendors[id(s)]
        if fn is None or len(s.node.outputs) != 1 or id(s.node.outputs[0]) in outputs:
            continue
        reads = readers.get(id(s.node.outputs[0]), [])
        if reads and all(r.device is s.device and vendors[id(r)] is not None
                         and vendors[id(r)].private_layout == fn.private_layout
                         and i in vendors[id(r)].layout_inputs for r, i in reads):
            out_private.add(id(s))
            for r, i in reads:
                in_private.setdefault(id(r), set()).add(i)
    for s in steps:
        if id(s) in out_private or id(s) in in_private:
            layout = vendors[id(s)].with_layout(frozenset(in_private.get(id(s), ())), id(s) in out_private)
            set_vendor(s.op_plan, layout)
    return len(out_private)
