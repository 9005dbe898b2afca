"""Einsum, composed of diagonal, transpose, reshape and matmul.

Each operand first loses its repeated labels (``diagonal``), the size-1 axes it broadcasts along, and the
labels no other operand and not the output has (summed: a product with a vector of ones); the operands are
then contracted left to right, each pair as one batched matrix product (shared labels still needed later are
the batch, shared labels needed no more are contracted); the result is transposed to the output's order.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import InvalidArgument
from ..loader import Context
from .base import Tensor, converter, reshape

_LABEL = re.compile(r"[A-Za-z]|\.\.\.")


@dataclass
class Term:
    """An operand during the contraction: its tensor and one label per axis."""

    tensor: Tensor
    labels: list[str]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.tensor.shape)


def parse(equation: str, ranks: Sequence[int]) -> tuple[list[list[str]], list[str]]:
    """The labels of each operand and of the output, an ellipsis expanded into labels "0", "1" ... (aligned
    from the right, as its dims broadcast); InvalidArgument when the equation does not fit the operands."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    specs = lhs.split(",")
    if len(specs) != len(ranks):
        raise InvalidArgument(f"Einsum equation {equation!r} has {len(specs)} operand(s); the node has {len(ranks)}")
    for part in specs + ([rhs] if arrow else []):
        if _LABEL.sub("", part):
            raise InvalidArgument(f"Einsum equation {equation!r}: {part!r} holds characters other than letters "
                                  "and one '...'")
    tokens = [_LABEL.findall(s) for s in specs]
    widths = []
    for toks, rank in zip(tokens, ranks):
        if toks.count("...") > 1:
            raise InvalidArgument(f"Einsum equation {equation!r}: more than one '...' in an operand")
        named = len(toks) - toks.count("...")
        if ("..." in toks and named > rank) or ("..." not in toks and named != rank):
            raise InvalidArgument(f"Einsum equation {equation!r}: operand {''.join(toks)!r} does not fit a "
                                  f"rank-{rank} input")
        widths.append(rank - named if "..." in toks else 0)
    width = max(widths, default=0)
    ellipsis = [str(k) for k in range(width)]

    def expand(toks: list[str], w: int) -> list[str]:
        out: list[str] = []
        for t in toks:
            out += ellipsis[width - w:] if t == "..." else [t]
        return out

    labels = [expand(toks, w) for toks, w in zip(tokens, widths)]
    if arrow:
        out_toks = _LABEL.findall(rhs)
        if len(set(out_toks)) != len(out_toks):
            raise InvalidArgument(f"Einsum equation {equation!r}: the output repeats a label")
        output = expand(out_toks, width)
        known = {lab for ls in labels for lab in ls}
        missing = [lab for lab in output if lab not in known and not lab.isdigit()]
        if missing:
            raise InvalidArgument(f"Einsum equation {equation!r}: output label(s) {missing} name no input axis")
    else:
        counts: dict[str, int] = {}
        for ls in labels:
            for lab in ls:
                counts[lab] = counts.get(lab, 0) + 1
        output = ellipsis + sorted(lab for lab, c in counts.items() if c == 1 and not lab.isdigit())
    return labels, output


def _sizes(terms: Sequence[Term], equation: str) -> dict[str, int]:
    """Each label's size (a size-1 axis broadcasts); InvalidArgument where two axes of a label disagree."""
    sizes: dict[str, int] = {}
    for term in terms:
        for lab, n in zip(term.labels, term.shape):
            have = sizes.get(lab)
            if have is None or have == 1:
                sizes[lab] = n
            elif n not in (1, have):
                raise InvalidArgument(f"Einsum equation {equation!r}: label {lab!r} has sizes {have} and {n}")
    return sizes


def _diagonals(ctx: Context, term: Term) -> Term:
    """``term`` with each repeated label taken along its diagonal."""
    while True:
        repeated = next((lab for lab in term.labels if term.labels.count(lab) > 1), None)
        if repeated is None:
            return term
        axes = [d for d, lab in enumerate(term.labels) if lab == repeated]
        tensor = ctx.op("diagonal", [term.tensor], "diagonal", axes=tuple(axes))
        term = Term(tensor, [lab for d, lab in enumerate(term.labels) if d not in axes[1:]])


def _drop(ctx: Context, term: Term, labels: Sequence[str]) -> Term:
    """``term`` without the size-1 axes of ``labels`` (it broadcasts along them)."""
    keep = [d for d, lab in enumerate(term.labels) if lab not in labels]
    if len(keep) == len(term.labels):
        return term
    return Term(reshape(ctx, term.tensor, [term.shape[d] for d in keep], "squeeze"), [term.labels[d] for d in keep])


def _permute(ctx: Context, term: Term, order: Sequence[str]) -> Term:
    """``term`` with its axes in the order of ``order``."""
    perm = [term.labels.index(lab) for lab in order]
    if perm == list(range(len(perm))):
        return term
    return Term(ctx.op("transpose", [term.tensor], "transpose", perm=tuple(perm)), list(order))


def _sum_out(ctx: Context, term: Term, labels: Sequence[str]) -> Term:
    """``term`` summed over ``labels``: its axes moved last and multiplied by a vector of ones."""
    if not labels:
        return term
    kept = [lab for lab in term.labels if lab not in labels]
    term = _permute(ctx, term, kept + list(labels))
    shape = term.shape
    rows, k = math.prod(shape[:len(kept)]), math.prod(shape[len(kept):])
    flat = reshape(ctx, term.tensor, (rows, k), "rows")
    summed = ctx.op("matmul", [flat, np.ones((k, 1), term.tensor.dtype)], "sum")
    return Term(reshape(ctx, summed, shape[:len(kept)], "summed"), kept)


def _contract(ctx: Context, a: Term, b: Term, needed: set[str]) -> Term:
    """The product of two terms summed over their shared labels not in ``needed``, as one batched matmul."""
    batch = [lab for lab in a.labels if lab in b.labels and lab in needed]
    inner = [lab for lab in a.labels if lab in b.labels and lab not in needed]
    rows = [lab for lab in a.labels if lab not in b.labels]
    cols = [lab for lab in b.labels if lab not in a.labels]
    a = _permute(ctx, a, batch + rows + inner)
    b = _permute(ctx, b, batch + inner + cols)
    sa, sb = a.shape, b.shape
    nb = len(batch)
    bsize = math.prod(sa[:nb])
    m, k, n = math.prod(sa[nb:nb + len(rows)]), math.prod(sa[nb + len(rows):]), math.prod(sb[nb + len(inner):])
    left = reshape(ctx, a.tensor, (bsize, m, k), "left")
    right = reshape(ctx, b.tensor, (bsize, k, n), "right")
    product = ctx.op("matmul", [left, right], "contract")
    shape = sa[:nb] + sa[nb:nb + len(rows)] + sb[nb + len(inner):]
    return Term(reshape(ctx, product, shape, "product"), batch + rows + cols)


@converter("Einsum")
def _einsum(ctx, attrs):
    equation = attrs.get("equation")
    if not isinstance(equation, str):
        raise InvalidArgument(f"Einsum needs an equation string, got {equation!r}")
    inputs = [ctx.raw(i) for i in range(len(ctx.node.input)) if ctx.has(i)]
    labels, output = parse(equation, [len(x.shape) for x in inputs])
    terms = [_diagonals(ctx, Term(x, list(ls))) for x, ls in zip(inputs, labels)]
    sizes = _sizes(terms, equation)
    for j, term in enumerate(terms):  # size-1 axes of labels larger elsewhere broadcast: drop them
        terms[j] = _drop(ctx, term, [lab for lab, n in zip(term.labels, term.shape) if n == 1 and sizes[lab] != 1])
    for j, term in enumerate(terms):  # labels only this operand has, not in the output: summed now
        elsewhere = set(output).union(*(t.labels for i, t in enumerate(terms) if i != j))
        terms[j] = _sum_out(ctx, term, [lab for lab in term.labels if lab not in elsewhere])
    result = terms[0]
    for j in range(1, len(terms)):
        needed = set(output).union(*(t.labels for t in terms[j + 1:]))
        result = _contract(ctx, result, terms[j], needed)
    result = _sum_out(ctx, result, [lab for lab in result.labels if lab not in output])
    present = [lab for lab in output if lab in result.labels]
    result = _permute(ctx, result, present)
    shape = [result.shape[present.index(lab)] if lab in present else 1 for lab in output]
    tensor = reshape(ctx, result.tensor, shape, "output")
    if isinstance(tensor, np.ndarray):
        tensor = ctx.as_value(tensor)
    return [tensor]


__all__ = ["parse"]
