"""Random graphs for differential testing: a hypothesis strategy and a float64 NumPy interpretation.

``specs(devices)`` draws small graphs mixing the op library's families: elementwise
ops with broadcasting over 1-4-D shapes, reductions, matrix products, data
movement, normalization, convolution and pooling, in float32 and int32; every
node gets a random device and the plan a placement policy ("explicit" uses the
nodes' devices, or "fill" / "spread").  The generator tracks an interval per
value so that domains stay valid (no log of negatives, no division near zero)
and magnitudes bounded.  ``Spec.interpret`` evaluates the graph with each op's
NumPy ``reference`` in float64 (int64 for integers); ``Spec.check`` runs the
graph and compares it elementwise, with a tolerance per element taken from
re-interpreting with every inexact value perturbed (relative ``NOISE``, far
above float32 rounding), so a chain that amplifies rounding gets a looser bound
and an exact chain (movement, integers) must match exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import DeviceLayerError
from ..kernels import ops as _library  # noqa: F401  (registers every op)
from ..kernels.op import OPS, TensorType

NOISE = 2e-6
MAX_SIZE = 4096
CAP = 1e3  # largest magnitude a value may reach
#: relative tolerance every float element gets besides the sampled sensitivity (about 32 float32 ulps: a
#: normalization over a hundred terms rounds by this much where two noise samples may both miss it)
FLOOR = 4e-6
UNARY = ["relu", "leaky_relu", "elu", "selu", "sigmoid", "hard_sigmoid", "tanh", "gelu", "gelu_tanh", "softplus",
         "softsign", "exp", "log", "sqrt", "reciprocal", "neg", "abs", "erf", "floor", "ceil", "sin", "cos", "clip"]
FLOAT_BINARY = ["add", "sub", "mul", "div", "pow", "max", "min", "prelu", "where"]
INT_BINARY = ["add", "sub", "mul", "max", "min", "where"]
#: ops whose output is exact when their inputs are (no rounding)
EXACT = {"relu", "neg", "abs", "floor", "ceil", "clip", "max", "min", "where", "reduce_max", "reduce_min",
         "max_pool", "global_max_pool", "cast", "concat", "split", "slice", "transpose", "reshape", "flatten",
         "squeeze", "unsqueeze", "pad", "gather", "depth_to_space", "space_to_depth", "channel_shuffle"}
#: ops that accumulate many products or terms: their inputs are perturbed too
ACCUMULATE = {"matmul", "gemm", "conv", "conv_transpose", "sum", "mean", "average_pool", "global_average_pool",
              "softmax", "log_softmax", "layer_normalization", "lrn"}


@dataclass
class Source:
    """A graph input with random values in [lo, hi] (integers for int dtypes), or a constant ``value``."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    lo: float = -2.0
    hi: float = 2.0
    value: np.ndarray | None = None


@dataclass
class Call:
    """One node: op, the value indices it reads, attributes, the device asked for, its output count."""

    op: str
    args: list[int]
    attrs: dict[str, Any]
    device: str
    outputs: int = 1
    exact: bool = False


@dataclass
class Spec:
    """A random graph: sources and calls in creation order (values numbered as they appear), outputs, policy."""

    items: list[Source | Call]
    outputs: list[int]
    policy: str
    devices: list[str]

    def calls(self) -> list[Call]:
        return [c for c in self.items if isinstance(c, Call)]

    def build(self) -> tuple[Any, dict[str, str]]:
        """The devicelayer Graph and its explicit placement (node name -> device)."""
        from .ir import Graph

        g, vals, placement = Graph("fuzz"), [], {}
        for k, item in enumerate(self.items):
            if isinstance(item, Source):
                vals.append(g.input(f"x{k}", item.shape, item.dtype) if item.value is None
                            else g.constant(item.value, name=f"c{k}"))
            else:
                vals.extend(g.apply(item.op, [vals[a] for a in item.args], name=f"n{k}", **item.attrs))
                placement[f"n{k}"] = item.device
        for j, o in enumerate(self.outputs):
            g.output(f"y{j}", vals[o])
        return g, placement

    def feeds(self, seed: int) -> dict[str, np.ndarray]:
        """Random values for every input."""
        rng = np.random.default_rng(seed)
        out = {}
        for k, s in enumerate(self.items):
            if isinstance(s, Source) and s.value is None:
                if s.dtype == "bool":
                    out[f"x{k}"] = rng.random(s.shape) < 0.5
                elif np.dtype(s.dtype).kind in "iu":
                    out[f"x{k}"] = rng.integers(int(s.lo), int(s.hi) + 1, s.shape).astype(s.dtype)
                else:
                    out[f"x{k}"] = rng.uniform(s.lo, s.hi, s.shape).astype(s.dtype)
        return out

    def interpret(self, feeds: dict[str, np.ndarray], noise: float = 0.0,
                  rng: np.random.Generator | None = None) -> list[np.ndarray]:
        """Every value in float64 / int64 by the ops' references; ``noise`` perturbs inexact float values."""
        vals: list[np.ndarray] = []
        for k, item in enumerate(self.items):
            if isinstance(item, Source):
                vals.append(_wide(item.value if item.value is not None else feeds[f"x{k}"]))
                continue
            ins = [vals[a] for a in item.args]
            if noise and item.op in ACCUMULATE:
                ins = [_perturb(x, noise, rng) for x in ins]
            attrs = dict(item.attrs)
            if item.op == "cast":
                attrs["to"] = _wide(np.zeros(0, attrs["to"])).dtype
            op = OPS[item.op]
            checked = op.check([TensorType(x.shape, x.dtype) for x in ins], attrs)
            for y in op.reference(ins, checked):
                vals.append(np.asarray(y) if item.exact or not noise else _perturb(np.asarray(y), noise, rng))
        return vals

    def check(self, got: dict[str, np.ndarray], feeds: dict[str, np.ndarray], seed: int = 0) -> list[str]:
        """Mismatches between a run's outputs and the interpretation (empty when they agree)."""
        want = self.interpret(feeds)
        rng = np.random.default_rng(seed)
        noisy = [self.interpret(feeds, NOISE, rng) for _ in range(2)]
        problems = []
        for j, o in enumerate(self.outputs):
            g, w = got[f"y{j}"], want[o]
            if g.shape != w.shape or _wide(g).dtype != w.dtype:
                problems.append(f"y{j}: got {g.shape} {g.dtype}, want {w.shape} {w.dtype}")
                continue
            if w.dtype.kind != "f":
                bad = g != w
                tol = np.zeros(w.shape)
            else:
                sens = np.max([np.abs(n[o] - w) for n in noisy], axis=0)
                tol = 4 * sens + FLOOR * (1 + np.abs(w))
                with np.errstate(invalid="ignore"):
                    bad = ~(np.abs(g - w) <= tol) & ~(np.isnan(g) & np.isnan(w))
            if bad.any():
                i = tuple(int(c[0]) for c in np.nonzero(bad)) if w.ndim else ()
                problems.append(f"y{j} (value {o}): {int(bad.sum())} of {w.size} differ; at {i} got {g[i]!r}, "
                                f"want {w[i]!r} (tolerance {tol[i]:.3g})")
        return problems

    def run(self, seed: int = 0, runs: int = 2, placed: dict[str, int] | None = None) -> list[str]:
        """Build, compile under the spec's placement, run ``runs`` times (the plan is reused) with seeded
        inputs and check each; the mismatches.  ``placed`` counts the nodes each device ran."""
        graph, placement = self.build()
        plan = graph.compile(self.devices, placement=placement if self.policy == "explicit" else None,
                             policy="fill" if self.policy == "explicit" else self.policy)
        try:
            for row in plan.placement_table() if placed is not None else ():
                placed[row["device"]] = placed.get(row["device"], 0) + runs
            problems = []
            for r in range(runs):
                feeds = self.feeds(seed + r)
                problems += [f"run {r}: {p}" for p in self.check(plan(**feeds), feeds, seed)]
            return problems
        finally:
            plan.release()

    def __str__(self) -> str:
        lines = [f"Spec(policy={self.policy!r}, devices={self.devices})"]
        index = 0
        for k, item in enumerate(self.items):
            names = [f"v{index + i}" for i in range(item.outputs if isinstance(item, Call) else 1)]
            index += len(names)
            if isinstance(item, Source):
                what = "constant" if item.value is not None else f"input [{item.lo}, {item.hi}]"
                lines.append(f"  {names[0]} = {what} {item.shape} {item.dtype}")
            else:
                args = ", ".join(f"v{a}" for a in item.args)
                lines.append(f"  {', '.join(names)} = {item.op}({args}, {item.attrs}) on {item.device}")
        lines.append(f"  outputs: {', '.join(f'v{o}' for o in self.outputs)}")
        return "\n".join(lines)


def _wide(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return x.astype(np.float64)
    if x.dtype.kind in "iu":
        return x.astype(np.int64)
    return x


def _perturb(x: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    if x.dtype.kind != "f" or not x.size:
        return x
    u = noise * rng.choice([-1.0, 1.0], x.shape)  # full size, random sign: every element's own term shows
    y = x + u * (np.abs(x) + 0.01 * np.max(np.abs(x)))
    return np.where(np.sign(y) == np.sign(x), y, x * (1 + u))  # no sign flips (sqrt, log stay defined)


# -- the generator -----------------------------------------------------------------------------------------
@dataclass
class _Val:
    type: TensorType
    lo: float
    hi: float
    exact: bool


def _product_range(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    p = [x * y for x in a for y in b]
    return min(p), max(p)


def _with_zero(v: _Val) -> tuple[float, float]:
    return min(v.lo, 0.0), max(v.hi, 0.0)


@dataclass
class _Gen:
    draw: Callable[[Any], Any]
    devices: list[str]
    items: list[Source | Call] = field(default_factory=list)
    vals: list[_Val] = field(default_factory=list)

    def int(self, lo: int, hi: int) -> int:
        """A uniform integer in [lo, hi] (hypothesis' own draws favour the low end; shrinking goes to ``lo``)."""
        from hypothesis import strategies as st

        return lo + self.draw(st.integers(0, 2**16 - 1)) % (hi - lo + 1)

    def pick(self, options: Sequence[Any]) -> Any:
        return options[self.int(0, len(options) - 1)]

    def subset(self, options: Sequence[Any], least: int = 0) -> list[Any]:
        chosen = [o for o in options if self.int(0, 1)]
        return chosen if len(chosen) >= least else list(options[:least])

    def source(self, shape: Sequence[int], dtype: str = "float32", lo: float = -2.0, hi: float = 2.0,
               value: np.ndarray | None = None, constant: bool | None = None) -> int:
        """A new input, or a constant (``value``, or random values when ``constant``; None: one in three)."""
        if value is None and dtype != "bool" and (self.int(0, 2) == 0 if constant is None else constant):
            rng = np.random.default_rng(self.int(0, 2**16))
            value = (rng.integers(int(lo), int(hi) + 1, shape) if np.dtype(dtype).kind in "iu"
                     else rng.uniform(lo, hi, shape)).astype(dtype)
        self.items.append(Source(tuple(int(s) for s in shape), dtype, lo, hi, value))
        if value is not None and value.size:
            lo, hi = float(value.min()), float(value.max())
        self.vals.append(_Val(TensorType.of(shape, dtype), lo, hi, True))
        return len(self.vals) - 1

    def shape(self, rank: int | None = None, sizes: Sequence[int] = (1, 2, 3, 4, 5, 7, 8, 16)) -> tuple[int, ...]:
        rank = self.int(1, 4) if rank is None else rank
        dims = [self.pick(sizes) for _ in range(rank)]
        while math.prod(dims) > 1024:
            dims[dims.index(max(dims))] //= 2
        return tuple(dims)

    def node(self, op: str, args: list[int], attrs: dict[str, Any],
             bounds: Callable[[dict[str, Any], list[TensorType]], tuple[float, float]],
             limit: int = MAX_SIZE) -> int | None:
        """Add a call when the op accepts it and its outputs stay bounded and within ``limit`` elements;
        its first output, or None."""
        if not self.valid(op, args, attrs):
            return None
        checked, outs = OPS[op].prepare([self.vals[a].type for a in args], attrs)
        if any(t.size > limit or t.size == 0 or not t.shape for t in outs):
            return None
        lo, hi = bounds(checked, outs)
        if not (math.isfinite(lo) and math.isfinite(hi)) or max(-lo, hi) > CAP:
            return None
        exact = all(self.vals[a].exact for a in args) and (op in EXACT or outs[0].dtype.kind in "iub")
        self.items.append(Call(op, args, attrs, self.pick(self.devices), len(outs), exact))
        self.vals.extend(_Val(t, lo, hi, exact) for t in outs)
        return len(self.vals) - len(outs)

    def valid(self, op: str, args: Sequence[int | TensorType], attrs: dict[str, Any]) -> bool:
        """True when ``op`` accepts these operands (value indices or types) and attributes."""
        types = [a if isinstance(a, TensorType) else self.vals[a].type for a in args]
        try:
            OPS[op].prepare(types, attrs)
        except DeviceLayerError:
            return False
        return True

    def same(self, x: int) -> Callable[..., tuple[float, float]]:
        return lambda checked, outs: (self.vals[x].lo, self.vals[x].hi)


def _grid(op: str, vals: Sequence[_Val], checked: dict[str, Any]) -> tuple[float, float]:
    """Output range of an elementwise op over a grid of its inputs' ranges."""
    n = 401 if len(vals) == 1 else 41
    axes = [np.linspace(v.lo, v.hi, n) if v.type.dtype.kind == "f" else np.unique(np.linspace(v.lo, v.hi, n).round())
            for v in vals]
    points = [a.ravel() for a in np.meshgrid(*axes, indexing="ij")]
    if op == "where":
        points = [np.arange(points[0].size) % 2 == 0] + points[1:]
    y = OPS[op].reference(points, checked)[0]
    return float(np.min(y)), float(np.max(y))


def _unary(g: _Gen, x: int) -> int | None:
    op = g.pick([o for o in UNARY if g.vals[x].exact or o not in ("floor", "ceil")])
    v = g.vals[x]
    if op in ("log", "sqrt", "reciprocal") and not v.lo >= 0.25:  # into the domain: abs(x) + a constant
        x = g.node("abs", [x], {}, lambda checked, outs: (0.0, max(-v.lo, v.hi)))
        x = x if x is None else g.node("add", [x, g.source((1,), "float32", 0.25, 1.0)], {},
                                       lambda checked, outs: (0.25, max(-v.lo, v.hi) + 1.0))
    elif op == "exp" and v.hi > 4:
        x = g.node("tanh", [x], {}, lambda checked, outs: (-1.0, 1.0))
    if x is None:
        return None
    v = g.vals[x]
    attrs: dict[str, Any] = {}
    if op == "clip":
        lo = g.pick([None, -1.0, -0.5, 0.0])
        attrs = {"min": lo, "max": g.pick([None, 0.5, 1.0, 1.5])}
    elif op == "leaky_relu":
        attrs = {"alpha": g.pick([0.01, 0.2, -0.5])}
    return g.node(op, [x], attrs, lambda checked, outs: _grid(op, [v], checked))


def _broadcast_partner(g: _Gen, shape: tuple[int, ...], grow: bool = True) -> tuple[int, ...]:
    """A shape that broadcasts against ``shape`` (dims kept or 1; some dropped, or one in front)."""
    out = [s if g.int(0, 2) else 1 for s in shape]
    if grow:
        out = [g.pick([1, 3]) if s == 1 else s for s in out]
    cut = g.int(0, len(out) - 1)
    out = out[cut:]
    if grow and cut == 0 and len(out) < 4 and not g.int(0, 3):
        out = [g.pick([2, 3])] + out
    return tuple(out)


def _partner(g: _Gen, x: int, dtype: str, lo: float, hi: float, grow: bool = True, wide: bool = False) -> int:
    """An existing value that broadcasts against value ``x`` (within [lo, hi] unless ``wide``), or a new
    input in [lo, hi] that does."""
    shape = g.vals[x].type.shape
    fits = [k for k, v in enumerate(g.vals) if k != x and v.type.dtype.name == dtype
            and (wide or lo <= v.lo and v.hi <= hi) and _broadcasts(v.type.shape, shape, grow)]
    if fits and g.int(0, 1):
        return g.pick(fits)
    want = _broadcast_partner(g, shape, grow)
    if 1 in want and g.int(0, 1):  # as models do: a compact (often constant) tensor viewed as the shape
        src = g.source([d for d in want if d != 1] or [1], dtype, lo, hi)
        view = g.node("reshape", [src], {"shape": list(want)}, g.same(src))
        return view if view is not None else src
    return g.source(want, dtype, lo, hi)


def _broadcasts(a: tuple[int, ...], b: tuple[int, ...], grow: bool) -> bool:
    try:
        out = np.broadcast_shapes(a, b)
    except ValueError:
        return False
    return grow or out == b


def _binary(g: _Gen, x: int) -> int | None:
    v = g.vals[x]
    dtype = v.type.dtype.name
    op = g.pick(FLOAT_BINARY if dtype == "float32" else INT_BINARY)
    if op == "div":
        sign = g.pick([1, -1])
        args = [x, _partner(g, x, dtype, *sorted((0.5 * sign, 2.0 * sign)))]
    elif op == "pow":  # a positive base, a small exponent
        if v.lo >= 0.1:
            args = [x, _partner(g, x, dtype, -2.0, 2.0)]
        elif max(-v.lo, v.hi) <= 8:
            args = [_partner(g, x, dtype, 0.5, 2.0), x]
        else:
            return None
    elif op == "prelu":
        args = [x, _partner(g, x, dtype, -1.0, 1.0, grow=False)]
    elif op == "where":
        cond = g.source(_broadcast_partner(g, v.type.shape), "bool", 0, 1)
        other = _partner(g, x, dtype, -5.0, 5.0, grow=False)
        args = [cond] + ([x, other] if g.int(0, 1) else [other, x])
    else:
        args = [x, _partner(g, x, dtype, *((-2.0, 2.0) if dtype == "float32" else (-5, 5)), wide=True)]
        if g.int(0, 1):
            args.reverse()
    return g.node(op, args, {}, lambda checked, outs: _grid(op, [g.vals[a] for a in args], checked))


def _reduce(g: _Gen, x: int) -> int | None:
    v = g.vals[x]
    op = g.pick(["sum", "mean", "reduce_max", "reduce_min"])
    rank = len(v.type.shape)
    axes = g.subset(range(rank), least=1)
    attrs: dict[str, Any] = {"keepdims": bool(g.int(0, 1))}
    if len(axes) < rank or g.int(0, 1):
        attrs["axes"] = [a - rank if g.int(0, 1) else a for a in axes]
    k = math.prod(v.type.shape[a] for a in axes)
    scale = k if op == "sum" else 1
    return g.node(op, [x], attrs, lambda checked, outs: (min(v.lo * scale, v.lo), max(v.hi * scale, v.hi)))


def _matmul(g: _Gen, x: int) -> int | None:
    v = g.vals[x]
    shape = v.type.shape
    n = g.pick([1, 3, 5, 8, 16, 32, 64])
    if len(shape) >= 2 and g.int(0, 2) == 0:  # x on the right
        args = [g.source((g.pick([1, 2, 4, 7, 32]), shape[-2]), "float32", -1.0, 1.0), x]
        k = shape[-2]
    else:
        k = shape[-1]
        rank = g.int(1, 3)
        other = ((k,) if rank == 1 else (k, n) if rank == 2 else
                 (g.pick([1, shape[-3]]) if len(shape) >= 3 else g.pick([1, 2]), k, n))
        args = [x, g.source(other, "float32", -1.0, 1.0)]
    p = _product_range((v.lo, v.hi), (-1.0, 1.0))
    return g.node("matmul", args, {}, lambda checked, outs: (k * p[0], k * p[1]))


def _gemm(g: _Gen, x: int) -> int | None:
    if len(g.vals[x].type.shape) != 2:
        x = g.node("flatten", [x], {"axis": g.int(0, len(g.vals[x].type.shape))}, g.same(x))
    v = g.vals[x]
    ta, tb = g.int(0, 1), g.int(0, 1)
    m, k = v.type.shape[::-1] if ta else v.type.shape
    n = g.pick([1, 4, 9])
    args = [x, g.source((n, k) if tb else (k, n), "float32", -1.0, 1.0)]
    alpha, beta = g.pick([1.0, 0.5, -1.5]), g.pick([1.0, -0.5, 2.0])
    if g.int(0, 1):
        args.append(g.source(g.pick([(m, n), (n,), (1, n), (m, 1), (1,)]), "float32", -1.0, 1.0))
    attrs = {"alpha": alpha, "beta": beta, "transA": ta, "transB": tb}
    p = _product_range((v.lo, v.hi), (-1.0, 1.0))
    return g.node("gemm", args, attrs, lambda checked, outs: (
        -abs(alpha) * k * max(-p[0], p[1]) - abs(beta), abs(alpha) * k * max(-p[0], p[1]) + abs(beta)))


def _factor(g: _Gen, size: int) -> list[int]:
    """A random shape of 1 to 4 dims holding ``size`` elements."""
    primes, n, f = [], size, 2
    while n > 1:
        while n % f == 0:
            primes.append(f)
            n //= f
        f += 1
    dims = [1] * g.int(1, 4)
    for p in primes:
        dims[g.int(0, len(dims) - 1)] *= p
    return dims


def _movement(g: _Gen, x: int) -> int | None:
    v = g.vals[x]
    shape, rank = v.type.shape, len(v.type.shape)
    op = g.pick(["reshape", "flatten", "squeeze", "unsqueeze", "transpose", "concat", "slice", "pad", "gather",
                 "split", "depth_to_space", "space_to_depth", "channel_shuffle"])
    same = g.same(x)
    if op == "channel_shuffle":
        if rank < 2:
            return None
        groups = [d for d in range(1, shape[1] + 1) if shape[1] % d == 0]
        return g.node(op, [x], {"group": groups[g.int(0, len(groups) - 1)]}, same)
    if op == "reshape":
        dims = _factor(g, v.type.size)
        if g.int(0, 1):
            dims[g.int(0, len(dims) - 1)] = -1
        return g.node(op, [x], {"shape": dims}, same)
    if op == "flatten":
        return g.node(op, [x], {"axis": g.int(-rank, rank)}, same)
    if op == "squeeze":
        ones = [k for k, s in enumerate(shape) if s == 1]
        if not ones or len(ones) == rank:
            return None
        return g.node(op, [x], {"axes": g.subset(ones, least=1)} if g.int(0, 1) else {}, same)
    if op == "unsqueeze":
        return g.node(op, [x], {"axes": [g.int(-rank - 1, rank)]}, same) if rank < 4 else None
    if op == "transpose":
        perm = list(range(rank))
        for i in range(rank - 1, 0, -1):
            j = g.int(0, i)
            perm[i], perm[j] = perm[j], perm[i]
        return g.node(op, [x], {"perm": perm} if g.int(0, 2) else {}, same)
    if op == "concat":
        axis = g.int(0, rank - 1)
        args = [x]
        for _ in range(g.int(1, 2)):
            if g.int(0, 2) == 0:
                args.append(x)
            else:
                other = list(shape)
                other[axis] = g.pick([1, 2, 3])
                args.append(g.source(other, v.type.dtype.name, -2, 2))
        return g.node(op, args, {"axis": axis - rank if g.int(0, 1) else axis}, lambda checked, outs: (
            min(g.vals[a].lo for a in args), max(g.vals[a].hi for a in args)))
    if op == "slice":
        axes = g.subset(range(rank), least=1)
        starts, ends, steps = [], [], []
        for a in axes:
            d = shape[a]
            step = g.pick([1, 1, 2, -1, -2])
            start = g.int(0, d - 1)
            end = g.int(start + 1, d + 2) if step > 0 else g.int(-1, start - 1)
            end = -d - g.int(1, 3) if end == -1 else end  # below -d: through index 0
            starts.append(start - d if g.int(0, 3) == 0 else start)
            ends.append(end)
            steps.append(step)
        return g.node(op, [x], {"starts": starts, "ends": ends, "axes": axes, "steps": steps}, same)
    if op == "pad":
        mode = g.pick(["constant", "edge", "reflect", "wrap"])
        pads = []
        for half in range(2):
            for d in shape:
                most = d - 1 if mode == "reflect" else 2
                pads.append(g.int(-1 if d > 2 and mode != "reflect" else 0, max(most, 0)))
        value = g.pick([0, 1, -3])
        attrs = {"pads": pads, "mode": mode} | ({"value": value} if mode == "constant" else {})
        return g.node(op, [x], attrs, lambda checked, outs: (min(v.lo, value), max(v.hi, value)))
    if op == "gather":
        axis = g.int(0, rank - 1)
        d = shape[axis]
        idx_shape = g.shape(g.int(0 if rank > 1 else 1, 2), (1, 2, 3, 5))
        rng = np.random.default_rng(g.int(0, 1000))
        value = rng.integers(-d, d, idx_shape).astype(g.pick(["int64", "int32"]))
        idx = g.source(idx_shape, value.dtype.name, value=value)
        return g.node(op, [x, idx], {"axis": axis}, same)
    if op == "split":
        axis = g.int(0, rank - 1)
        d = shape[axis]
        if d < 2:
            return None
        cut = g.int(1, d - 1)
        attrs = {"axis": axis, "split": [cut, d - cut]} if g.int(0, 1) else {"axis": axis, "num_outputs": 2}
        return g.node(op, [x], attrs, same)
    x = _image(g, x, (4,))
    attrs = {"blocksize": 2} | ({"mode": g.pick(["DCR", "CRD"])} if op == "depth_to_space" else {})
    return g.node(op, [x], attrs, g.same(x))


def _normalize(g: _Gen, x: int) -> int | None:
    v = g.vals[x]
    shape, rank = v.type.shape, len(v.type.shape)
    op = g.pick(["softmax", "log_softmax", "layer_normalization", "batch_normalization", "lrn"])
    axis = g.int(-rank, rank - 1)
    if op == "softmax":
        return g.node(op, [x], {"axis": axis}, lambda checked, outs: (0.0, 1.0))
    if op == "log_softmax":
        k = shape[axis]
        return g.node(op, [x], {"axis": axis}, lambda checked, outs: (v.lo - v.hi - math.log(k) - 1, 0.0))
    if op == "layer_normalization":
        tail = shape[axis:]
        args = [x] + [g.source(_broadcast_partner(g, tail, grow=False), "float32", lo, 1.5)
                      for lo in (0.5, -1.5)[:g.int(0, 2)]]
        r = math.sqrt(math.prod(tail))
        scale = 1.5 if len(args) > 1 else 1.0
        return g.node(op, args, {"axis": axis, "epsilon": g.pick([1e-5, 1e-3])}, lambda checked, outs: (
            -r * scale - 1.5, r * scale + 1.5))
    if rank < 2:
        return None
    c = shape[1]
    if op == "batch_normalization":
        args = [x, g.source((c,), "float32", -1.5, 1.5), g.source((c,), "float32", -1.0, 1.0),
                g.source((c,), "float32", -1.0, 1.0), g.source((c,), "float32", 0.5, 2.0)]
        r = (max(-v.lo, v.hi) + 1.0) / math.sqrt(0.5) * 1.5 + 1.0
        relu = g.int(0, 2) == 0
        return g.node(op, args, {"epsilon": 1e-5, **({"activation": "relu"} if relu else {})},
                      lambda checked, outs: (0.0 if relu else -r, r))
    attrs = {"size": g.int(1, 5), "alpha": g.pick([1e-4, 0.5]), "beta": g.pick([0.75, 1.0]),
             "bias": g.pick([1.0, 2.0])}
    return g.node(op, [x], attrs, lambda checked, outs: _with_zero(v))


def _image(g: _Gen, x: int, ranks: Sequence[int] = (3, 4, 4)) -> int:
    """Value ``x`` when it is a small (N, C, spatial...) tensor, else a new one."""
    shape = g.vals[x].type.shape
    if len(shape) in ranks and g.vals[x].type.dtype.kind == "f" and min(shape[2:]) >= 3 and shape[1] <= 16:
        return x
    rank = g.pick(ranks)
    return g.source((g.pick([1, 2]), g.pick([1, 2, 3, 4])) + tuple(g.pick([3, 4, 5, 8]) for _ in range(rank - 2)))


def _conv(g: _Gen, x: int) -> int | None:
    x = _image(g, x)
    v = g.vals[x]
    shape = v.type.shape
    nd, c = len(shape) - 2, shape[1]
    op = "conv_transpose" if g.int(0, 3) == 0 else "conv"
    group = g.pick([gr for gr in (1, 2, c) if c % gr == 0])
    m = group * g.pick([1, 2, 3, 16])
    k = [g.pick([1, 2, 3]) for _ in range(nd)]
    attrs: dict[str, Any] = {"strides": [g.pick([1, 1, 2]) for _ in range(nd)],
                             "dilations": [g.pick([1, 1, 2]) for _ in range(nd)], "group": group}
    if g.int(0, 3) == 0:
        attrs["auto_pad"] = g.pick(["SAME_UPPER", "SAME_LOWER", "VALID"])
    else:
        attrs["pads"] = [g.int(0, kk - 1) for kk in k] * 2 if g.int(0, 1) else [g.int(0, kk - 1) for kk in k * 2]
    if op == "conv_transpose":
        attrs["output_padding"] = [g.int(0, s - 1) for s in attrs["strides"]]
    elif g.int(0, 2) == 0:
        attrs["activation"] = "relu"
    w = TensorType.of((c, m // group, *k) if op == "conv_transpose" else (m, c // group, *k), "float32")
    types = [v.type, w] + ([TensorType.of((m,), "float32")] if g.int(0, 1) else [])
    if not g.valid(op, types, attrs):
        return None
    if op == "conv" and len(types) == 3 and g.int(0, 2) == 0:  # a summand Z (a fused residual add)
        types.append(OPS[op].prepare(types, attrs)[1][0])
    args = [x] + [g.source(t.shape, "float32", -0.5 if j == 0 else -1.0, 0.5 if j == 0 else 1.0)
                  for j, t in enumerate(types[1:])]
    terms = (c if op == "conv_transpose" else c // group) * math.prod(k)
    p = _product_range(_with_zero(v), (-0.5, 0.5))
    bias = 1.0 if len(args) >= 3 else 0.0
    bias += 1.0 if len(args) == 4 else 0.0  # Z is drawn in [-1, 1] as the other parameters
    floor = 0.0 if "activation" in attrs else -math.inf
    return g.node(op, args, attrs, lambda checked, outs: (max(floor, terms * p[0] - bias),
                                                          max(floor, terms * p[1] + bias)))


def _pool(g: _Gen, x: int) -> int | None:
    x = _image(g, x)
    v = g.vals[x]
    nd = len(v.type.shape) - 2
    op = g.pick(["max_pool", "average_pool", "global_average_pool", "global_max_pool"])
    if op.startswith("global"):
        return g.node(op, [x], {}, g.same(x))
    k = [g.pick([1, 2, 3]) for _ in range(nd)]
    attrs: dict[str, Any] = {"kernel_shape": k, "strides": [g.pick([1, 2]) for _ in range(nd)],
                             "ceil_mode": g.int(0, 1)}
    if g.int(0, 3) == 0:
        attrs["auto_pad"] = g.pick(["SAME_UPPER", "SAME_LOWER", "VALID"])
    else:
        attrs["pads"] = [g.int(0, kk // 2) for kk in k * 2]
    if op == "average_pool":
        attrs["count_include_pad"] = g.int(0, 1)
    else:
        attrs["dilations"] = [g.pick([1, 1, 2]) for _ in range(nd)]
    if not g.valid(op, [x], attrs):
        return None
    return g.node(op, [x], attrs, lambda checked, outs: _with_zero(v) if op == "average_pool" else (v.lo, v.hi))


def _cast(g: _Gen, x: int, limit: int = MAX_SIZE) -> int | None:
    return g.node("cast", [x], {"to": "float32"}, g.same(x), limit)


def _squash(g: _Gen, x: int) -> int:
    """A node that always fits: tanh of a float value, a cast of an integer one."""
    if g.vals[x].type.dtype.kind == "f":
        return g.node("tanh", [x], {}, lambda checked, outs: (-1.0, 1.0), 1 << 30)
    return _cast(g, x, 1 << 30)


FLOAT_FAMILIES = [_unary, _unary, _binary, _binary, _reduce, _matmul, _gemm, _movement, _movement, _normalize,
                  _conv, _pool]
INT_FAMILIES = [_binary, _binary, _movement, _movement, _cast]


def specs(devices: Sequence[str], max_nodes: int = 10, policies: Sequence[str] = ("explicit", "fill", "spread")):
    """A hypothesis strategy of random graph Specs placed over ``devices`` (device ids)."""
    from hypothesis import strategies as st

    @st.composite
    def draw_spec(draw):
        g = _Gen(draw, list(devices))
        for _ in range(g.int(1, 2)):
            if g.int(0, 4) == 0:
                g.source(g.shape(), "int32", -5, 5, constant=False)
            else:
                g.source(g.shape(), "float32", -2.0, 2.0, constant=False)
        produced: list[int] = []
        for _ in range(g.int(1, max_nodes)):
            values = [k for k, v in enumerate(g.vals) if v.type.shape and v.type.dtype.name in ("float32", "int32")]
            x = values[-1] if g.int(0, 1) else g.pick(values)
            float_in = g.vals[x].type.dtype.kind == "f"
            family = g.pick(FLOAT_FAMILIES if float_in else INT_FAMILIES)
            out = family(g, x)
            produced.append(out if out is not None else _squash(g, x))
        read = {a for c in g.items if isinstance(c, Call) for a in c.args}
        outputs = [p for p in dict.fromkeys(produced) if p not in read or g.int(0, 3) == 0]  # every node live
        return Spec(g.items, outputs, g.pick(list(policies)), list(devices))

    return draw_spec()


__all__ = ["Spec", "Source", "Call", "specs"]
