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

Layouts whose name ends in "channels-last" hold an (N, C, spatial...) tensor's
bytes as the dense (N, spatial..., C) array; knowing that, the plan also
carries them through two kinds of step no vendor op runs:

- a pointwise op whose other inputs broadcast along axes the layout does not
  reorder (a squeeze-and-excitation gate or a per-channel scale (N, C, 1, 1),
  a per-position mask (N, 1, H, W)): it runs on the shapes as the bytes lie,
  (N, spatial..., C), each such operand's axes moved alike (its bytes unchanged);
- a transpose between (N, C, spatial...) and (N, spatial..., C) (ConvNeXt's
  blocks around their LayerNorm and channel MLP): where its channels-last end
  is held channels-last, both ends are the same bytes and it becomes an alias.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ..kernels.op import OPS, Alias, Plan, TensorType
from ..kernels.runner import set_vendor, vendor_of

#: the suffix of private layouts that hold (N, C, spatial...) as the dense (N, spatial..., C)
CHANNELS_LAST = "channels-last"


def _channels_last(kind: str | None) -> bool:
    return kind is not None and kind.endswith(CHANNELS_LAST)


def _aligned(shape: Sequence[int], rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def bytes_agree(shape: Sequence[int], rank: int) -> bool:
    """Whether an operand of ``shape`` broadcast against a rank-``rank`` (N, C, spatial...) tensor reads the same
    elements in channels-last order: its channel axis or all its spatial axes are of one element."""
    s = _aligned(shape, rank)
    return len(s) == rank and (s[1] == 1 or all(n == 1 for n in s[2:]))


def last_shape(shape: Sequence[int], rank: int) -> tuple[int, ...]:
    """The shape an operand of a rank-``rank`` (N, C, spatial...) call has with its channel axis moved last."""
    s = _aligned(shape, rank)
    return (s[0], *s[2:], s[1])


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


def _bridges(step: Any, types: Mapping[int, Any]) -> frozenset[str]:
    """For a transpose of 3-5 dimensions: "to-last" where it moves (N, C, spatial...) to (N, spatial..., C),
    "from-last" where it moves them back (for 3 dimensions one perm is both); else empty."""
    if step.kind != "node" or step.node.op != "transpose":
        return frozenset()
    rank = len(types[id(step.node.inputs[0])].shape)
    perm = tuple(step.node.attrs.get("perm", range(rank - 1, -1, -1)))
    if not 3 <= rank <= 5:
        return frozenset()
    return frozenset(name for name, p in (("to-last", (0, *range(2, rank), 1)),
                                          ("from-last", (0, rank - 1, *range(1, rank - 1)))) if perm == p)


def _pointwise_inputs(step: Any, types: Mapping[int, Any]) -> tuple[list[int], bool] | None:
    """The inputs of a pointwise node step that share its output's shape, and whether any other input broadcasts
    from more than one element (along axes a channels-last layout leaves in order: ``bytes_agree``); None where
    the step is not such a node."""
    if step.kind != "node" or len(step.node.outputs) != 1:
        return None
    op = OPS.get(step.node.op)
    if op is None or not op.pointwise:
        return None
    shape = types[id(step.node.outputs[0])].shape
    ins = [types[id(v)] for v in step.node.inputs]
    same = [i for i, t in enumerate(ins) if t.shape == shape]
    wide = [t for t in ins if t.shape != shape and t.size != 1]
    if not same or (wide and not (3 <= len(shape) <= 5 and all(bytes_agree(t.shape, len(shape)) for t in wide))):
        return None
    return same, bool(wide)


def _last_types(step: Any, types: Mapping[int, Any]) -> tuple[list[Any], list[Any]]:
    """A pointwise step's input and output types as a channels-last layout holds its bytes (``last_shape``); inputs
    of one element stay as they are."""
    rank = len(types[id(step.node.outputs[0])].shape)

    def moved(t: Any) -> Any:
        return t if t.size == 1 else TensorType(last_shape(t.shape, rank), t.dtype)
    return [moved(types[id(v)]) for v in step.node.inputs], [moved(types[id(v)]) for v in step.node.outputs]


def negotiate(steps: Sequence[Any], outputs: set[int], types: Mapping[int, Any],
              replan: Callable[[Any, list[Any], list[Any]], Any] | None = None) -> int:
    """Agree private layouts between the node steps of a plan (``outputs``: ids of the graph's outputs; ``types``:
    each value's type by id; ``replan(step, ins, outs)``: the step's op planned for other types, which lets
    pointwise steps with broadcast operands run channels-last); returns how many tensors are held in a private
    layout. Steps that run on other types than their values' get ``Step.types``; transposes that become aliases
    get an alias plan."""
    readers: dict[int, list[tuple[Any, int]]] = {}
    for s in steps:
        if s.kind == "node":
            for i, v in enumerate(s.node.inputs):
                readers.setdefault(id(v), []).append((s, i))
        elif s.value is not None:  # a copy to another device or an output fetched: reads the graph's layout
            readers.setdefault(id(s.value), []).append((s, -1))
    bridges = {id(s): _bridges(s, types) for s in steps}
    # (a transpose that can be an alias is never a vendor's private-layout call: the alias costs nothing)
    vendors = {id(s): None if bridges[id(s)] else _private(s, types) for s in steps}
    pointwise = {id(s): _pointwise_inputs(s, types) for s in steps}
    if replan is None:
        pointwise = {k: p if p is None or not p[1] else None for k, p in pointwise.items()}
    out_of = {id(s): id(s.node.outputs[0]) for s in steps if s.kind == "node" and len(s.node.outputs) == 1}
    kind_on: dict[int, str] = {}  # device id -> the channels-last layout its vendor ops offer
    for s in steps:
        fn = vendors[id(s)]
        if fn is not None and _channels_last(fn.private_layout):
            kind_on.setdefault(id(s.device), fn.private_layout)
    # the candidates, in step order: a private vendor op's output, a transpose's from channels-last order (its
    # device's channels-last layout), or a pointwise op's whose same-shaped inputs are all candidates of one
    # layout (it carries theirs; with broadcast operands, a channels-last one only)
    layout: dict[int, str] = {}
    producer: dict[int, Any] = {}
    for s in steps:
        if id(s) not in out_of or out_of[id(s)] in outputs:
            continue
        fn, found = vendors[id(s)], None
        if fn is not None:
            found = fn.private_layout
        elif "from-last" in bridges[id(s)] and id(s.node.inputs[0]) not in layout:
            found = kind_on.get(id(s.device))  # (one of 3 dimensions whose input may be held: that way first)
        elif pointwise[id(s)] is not None:
            same, wide = pointwise[id(s)]
            kinds = {layout.get(id(s.node.inputs[i])) for i in same}
            found = kinds.pop() if len(kinds) == 1 else None
            found = None if wide and not _channels_last(found) else found
        if found is not None:
            layout[out_of[id(s)]] = found
            producer[out_of[id(s)]] = s

    def keeps(v: int) -> bool:
        """Whether every reader of candidate ``v`` takes it in its layout (given the other candidates)."""
        s, kind = producer[v], layout[v]
        if vendors[id(s)] is None and bridges[id(s)]:  # (the input in the graph's layout: the same bytes)
            if id(s.node.inputs[0]) in layout:
                return False
        elif vendors[id(s)] is None and pointwise[id(s)] is not None:
            if any(layout.get(id(s.node.inputs[i])) != kind for i in pointwise[id(s)][0]):
                return False
        for r, i in readers.get(v, []):
            if i < 0 or r.device is not s.device:
                return False
            fn = vendors[id(r)]
            if fn is not None and fn.private_layout == kind and fn.layout_input(i):
                continue
            if fn is None and pointwise[id(r)] is not None and i in pointwise[id(r)][0] \
                    and layout.get(out_of[id(r)]) == kind:
                continue
            if "to-last" in bridges[id(r)] and _channels_last(kind) and out_of[id(r)] not in layout:
                continue  # (its output, in the graph's layout, is the same bytes)
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
        elif bridges[id(s)] and (out_private or id(s) in in_private):
            s.op_plan = Plan([Alias(0, 0)])
        elif fn is None and out_private and pointwise[id(s)] is not None and pointwise[id(s)][1]:
            s.types = _last_types(s, types)
            s.op_plan = replan(s, *s.types)
    return len(layout)
