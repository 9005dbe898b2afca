"""Fusion at compile time (devicelayer/graph/fuse.py, patterns.py): random pointwise chains against NumPy float64,
fused against unfused, escaping intermediates, the patterns recognised and refused, launch counts, on every
device."""

from __future__ import annotations

import math

import numpy as np
import pytest

import devicelayer as dl
from devicelayer.kernels.op import OPS, TensorType
from devicelayer.kernels.runner import run
from devicelayer.ops import names  # noqa: F401  (registers the library)
from devicelayer.tensors import tensor

UNARY = ["relu", "sigmoid", "tanh", "neg", "abs", "softsign", "leaky_relu", "elu", "gelu", "hard_sigmoid", "sin",
         "erf", "gelu_tanh", "softplus"]
BINARY = ["add", "sub", "mul", "max", "min"]
FULL = (3, 4, 5)
SHAPES = [FULL, (4, 5), (5,), (3, 1, 5), (3, 4, 1), ()]


def reference64(graph: dl.Graph, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of ``graph`` by the ops' NumPy references, floats in float64."""
    def wide(a):
        a = np.asarray(a)
        return a.astype(np.float64) if a.dtype.kind == "f" else a
    values = {id(v): wide(feeds[v.name]) for v in graph.inputs}
    for v in graph.values.values():
        if v.constant is not None:
            values[id(v)] = wide(v.constant)
    for n in graph.needed():
        ins = [values[id(v)] for v in n.inputs]
        attrs, _ = OPS[n.op].prepare([TensorType(a.shape, a.dtype) for a in ins], dict(n.attrs))
        for v, out in zip(n.outputs, OPS[n.op].reference(ins, attrs)):
            values[id(v)] = wide(out)
    return {name: values[id(v)] for name, v in graph.outputs.items()}


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-4) -> None:
    assert got.shape == want.shape and got.dtype.kind == np.asarray(want).dtype.kind or got.dtype.kind in "iub"
    scale = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=rtol * scale)


def random_chain(rng: np.random.Generator) -> tuple[dl.Graph, dict[str, np.ndarray], int]:
    """A graph of pointwise ops with broadcasting, an integer input cast in, a comparison and a where, some
    intermediates graph outputs and one read by a reduction; returns it, its feeds and its pointwise node count."""
    g = dl.Graph()
    feeds: dict[str, np.ndarray] = {}
    pool = []
    for k, shape in enumerate(SHAPES[:-1]):
        pool.append(g.input(f"x{k}", shape))
        feeds[f"x{k}"] = rng.uniform(-2, 2, shape).astype(np.float32)
    pool.append(g.constant(np.float32(rng.uniform(0.5, 1.5))))
    i = g.input("i", FULL, np.int32)
    feeds["i"] = rng.integers(-3, 4, FULL).astype(np.int32)
    y = g.cast(i, to=np.float32)
    pointwise = 1
    for step in range(int(rng.integers(5, 11))):
        if rng.random() < 0.45:
            y = getattr(g, str(rng.choice(UNARY)))(y)
        else:
            other = pool[int(rng.integers(len(pool)))]
            a, b = (y, other) if rng.random() < 0.5 else (other, y)
            y = getattr(g, str(rng.choice(BINARY)))(a, b)
        pointwise += 1
        pool.append(y)
        if step == 2:
            y = g.where(g.greater(y, pool[0]), y, pool[1])
            pointwise += 2
        if rng.random() < 0.2:
            g.output(f"mid{step}", y)
    g.output("reduced", g.sum(pool[-3], axes=[-1], keepdims=True))
    g.output("y", y)
    return g, feeds, pointwise


def poisoned_run(plan, feeds):
    """Run once with NaN inputs (the arena and reused buffers then hold garbage), then with ``feeds``."""
    plan(**{k: (np.full_like(v, np.nan) if v.dtype.kind == "f" else v) for k, v in feeds.items()})
    return plan(**feeds)


@pytest.mark.parametrize("seed", range(6))
def test_random_pointwise_chains_match_float64_and_unfused(device, seed):
    rng = np.random.default_rng(1000 + seed)
    g, feeds, pointwise = random_chain(rng)
    fused, plain = g.compile([device]), g.compile([device], fuse=False)
    try:
        got, unfused = poisoned_run(fused, feeds), poisoned_run(plain, feeds)
        want = reference64(g, feeds)
        assert set(got) == set(want)
        for name in want:
            close(got[name], want[name])
            close(got[name], unfused[name].astype(np.float64), 1e-5)
        counts, alone = fused.kernel_counts(), plain.kernel_counts()
        assert alone == {"before": alone["after"], "after": alone["after"]}
        assert counts["before"] == alone["after"]
        # at most one kernel per group, and the pointwise nodes are in groups of one device and shape
        groups = fused.fusion.groups if fused.fusion else []
        assert counts["after"] == alone["after"] - sum(len(gr.members) - 1 for gr in groups)
        assert counts["after"] < alone["after"]
        for gr in groups:  # each member runs where its group was placed
            assert gr.device == device.id and len(gr.members) >= 2
    finally:
        fused.release()
        plain.release()
    assert pointwise >= 7


def test_chain_of_five_is_one_launch_and_a_reduction_another(device, rng):
    g = dl.Graph()
    x = g.input("x", (64, 33))
    b = g.constant(rng.standard_normal(33).astype(np.float32))
    y = g.tanh(g.mul(g.sigmoid(g.relu(g.add(x, b))), x))
    g.output("y", g.sum(y, axes=[1], keepdims=False))
    fused, plain = g.compile([device]), g.compile([device], fuse=False)
    try:
        assert plain.kernel_counts()["after"] == 6
        assert fused.kernel_counts() == {"before": 6, "after": 2}
        assert [n.op for n in fused.graph.needed()] == ["fused_elementwise", "sum"]
        feeds = {"x": rng.standard_normal((64, 33)).astype(np.float32)}
        close(poisoned_run(fused, feeds)["y"], reference64(g, feeds)["y"])
        report = fused.placement_report()
        assert "2 kernel launch(es) per run after fusion, 6 before" in report
        assert "add_" in report and "(tanh)" in report
    finally:
        fused.release()
        plain.release()


def test_an_escaping_intermediate_is_written_and_read_elsewhere(device, rng):
    g = dl.Graph()
    x = g.input("x", (8, 16))
    a = g.relu(g.sub(x, g.constant(np.float32(0.25))))
    g.output("a", a)  # a graph output in the middle of the chain
    m = g.reduce_max(a, axes=[1], keepdims=True)  # and read by a node outside it
    z = g.mul(g.exp(g.neg(a)), a)
    g.output("z", g.add(z, m))
    plan = g.compile([device])
    try:
        # sub, relu, neg, exp, mul in one kernel writing a too; the add (which reads the reduction of a) alone
        nodes = plan.graph.needed()
        assert [n.op for n in nodes] == ["fused_elementwise", "reduce_max", "add"]
        assert len(nodes[0].outputs) == 2 and plan.graph.outputs["a"].producer is nodes[0]
        feeds = {"x": rng.standard_normal((8, 16)).astype(np.float32)}
        got, want = poisoned_run(plan, feeds), reference64(g, feeds)
        for name in want:
            close(got[name], want[name])
    finally:
        plan.release()


def test_a_group_that_would_make_a_cycle_is_not_formed(device, rng):
    # a = relu(x); s = sum(a) (not pointwise); y = a * s: a and y cannot be one node (y needs s, s needs a)
    g = dl.Graph()
    x = g.input("x", (4, 8))
    a = g.relu(x)
    s = g.sum(a, axes=[1], keepdims=True)
    g.output("y", g.sigmoid(g.mul(a, s)))
    plan = g.compile([device])
    try:
        assert [n.op for n in plan.graph.needed()] == ["relu", "sum", "fused_elementwise"]
        feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
        close(poisoned_run(plan, feeds)["y"], reference64(g, feeds)["y"])
    finally:
        plan.release()


def test_members_stay_on_the_devices_that_run_them():
    """Every member of every group runs on the group's device; a node placed by name is left alone."""
    devices = [d.id for d in dl.devices()]
    rng = np.random.default_rng(7)
    g = dl.Graph()
    x = g.input("x", (6, 7), np.float64)
    y = g.erf(g.mul(g.add(x, 1.0), 0.5), name="the_erf")
    y = g.tanh(g.relu(y), name="last")
    g.output("y", y)
    plan = g.compile(devices, placement={"last": devices[-1]})
    try:
        types = {id(v): v.type for v in g.values.values()}
        by_name = {n.name: n for n in g.nodes}
        for gr in plan.fusion.groups if plan.fusion else []:
            dev = dl.device(gr.device)
            for name, op in gr.members:
                n = by_name[name]
                assert OPS[op].unsupported([types[id(v)] for v in n.inputs], n.attrs, dev.info) is None
            assert "last" not in {name for name, _ in gr.members}
        assert any(r["node"] == "last" for r in plan.placement_table())
        feeds = {"x": rng.standard_normal((6, 7))}
        close(plan(**feeds)["y"], reference64(g, feeds)["y"], 1e-6)
    finally:
        plan.release()


# -- patterns --------------------------------------------------------------------------------------------------------
def layer_norm_graph(rng, axes2=(-1,), eps_input=False, scale=True, bias=True, power=True):
    g = dl.Graph()
    x = g.input("x", (2, 5, 24))
    m = g.mean(x, axes=[-1], keepdims=True)
    d = g.sub(x, m)
    sq = g.pow(d, np.float32(2.0)) if power else g.mul(d, d)
    v = g.mean(sq, axes=list(axes2), keepdims=True)
    eps = g.input("eps", ()) if eps_input else g.constant(np.float32(1e-5))
    y = g.div(d, g.sqrt(g.add(v, eps)))
    if scale:
        y = g.mul(y, g.constant(rng.uniform(0.5, 1.5, 24).astype(np.float32)))
    if bias:
        y = g.add(y, g.constant(rng.standard_normal(24).astype(np.float32)))
    g.output("y", y)
    feeds = {"x": rng.standard_normal((2, 5, 24)).astype(np.float32) * 3 + 1}
    if eps_input:
        feeds["eps"] = np.array(1e-5, np.float32)
    return g, feeds


def gelu_graph(rng, tanh=False, half=0.5, cube_by_mul=False):
    g = dl.Graph()
    x = g.input("x", (3, 40))
    if tanh:
        cube = g.mul(x, g.mul(x, x)) if cube_by_mul else g.pow(x, np.float32(3.0))
        inner = g.mul(g.add(x, g.mul(cube, np.float32(0.044715))), np.float32(math.sqrt(2 / math.pi)))
        bracket = g.add(g.tanh(inner), np.float32(1.0))
    else:
        bracket = g.add(np.float32(1.0), g.erf(g.div(x, np.float32(math.sqrt(2)))))
    g.output("y", g.mul(g.mul(x, np.float32(half)), bracket))
    return g, {"x": rng.standard_normal((3, 40)).astype(np.float32) * 2}


def softmax_graph(rng, shift=True, sum_axis=-1):
    g = dl.Graph()
    x = g.input("x", (4, 6, 10))
    s = g.sub(x, g.reduce_max(x, axes=[-1], keepdims=True)) if shift else x
    e = g.exp(s)
    g.output("y", g.div(e, g.sum(e, axes=[sum_axis], keepdims=True)))
    return g, {"x": rng.standard_normal((4, 6, 10)).astype(np.float32) * 3}


def group_norm_graph(rng, unit=1.0):
    g = dl.Graph()
    x = g.input("x", (2, 6, 4, 5))
    r = g.reshape(x, shape=[2, 3, -1])
    r = g.group_normalization(r, g.constant(np.full(3, unit, np.float32)), g.constant(np.zeros(3, np.float32)),
                              num_groups=3, epsilon=1e-4)
    y = g.reshape(r, shape=[2, 6, 4, 5])
    y = g.mul(y, g.constant(rng.uniform(0.5, 1.5, (6, 1, 1)).astype(np.float32)))
    g.output("y", g.add(y, g.constant(rng.standard_normal((1, 6, 1, 1)).astype(np.float32))))
    return g, {"x": rng.standard_normal((2, 6, 4, 5)).astype(np.float32) * 2 + 0.5}


RECOGNISED = [
    ("group_norm", lambda rng: group_norm_graph(rng), ["group_normalization"]),
    ("layer_norm", lambda rng: layer_norm_graph(rng), ["layer_normalization"]),
    ("layer_norm_mul_square", lambda rng: layer_norm_graph(rng, power=False), ["layer_normalization"]),
    ("layer_norm_no_bias", lambda rng: layer_norm_graph(rng, bias=False), ["layer_normalization"]),
    ("layer_norm_bare", lambda rng: layer_norm_graph(rng, scale=False, bias=False), ["layer_normalization"]),
    ("gelu_erf", lambda rng: gelu_graph(rng), ["gelu"]),
    ("gelu_tanh", lambda rng: gelu_graph(rng, tanh=True), ["gelu_tanh"]),
    ("gelu_tanh_cube_by_mul", lambda rng: gelu_graph(rng, tanh=True, cube_by_mul=True), ["gelu_tanh"]),
    ("softmax", lambda rng: softmax_graph(rng), ["softmax"]),
    ("softmax_unshifted", lambda rng: softmax_graph(rng, shift=False), ["softmax"]),
]

REFUSED = [  # one attribute or constant differs: the nodes stay (pointwise ones fused as a chain)
    ("layer_norm_other_axis", lambda rng: layer_norm_graph(rng, axes2=(-2,)), "layer_normalization", "mean"),
    ("layer_norm_eps_not_constant", lambda rng: layer_norm_graph(rng, eps_input=True), "layer_normalization",
     "mean"),
    ("gelu_not_half", lambda rng: gelu_graph(rng, half=0.6), "gelu", "fused_elementwise"),
    ("softmax_other_axis", lambda rng: softmax_graph(rng, sum_axis=-2), "softmax", "reduce_max"),
    ("group_norm_scaled_instances", lambda rng: group_norm_graph(rng, unit=2.0), None, "reshape"),
]


@pytest.mark.parametrize("name,build,ops", RECOGNISED, ids=[r[0] for r in RECOGNISED])
def test_pattern_is_recognised(device, name, build, ops):
    rng = np.random.default_rng(sum(map(ord, name)))
    g, feeds = build(rng)
    plan, plain = g.compile([device]), g.compile([device], fuse=False)
    try:
        assert [n.op for n in plan.graph.needed()] == ops
        assert plan.kernel_counts()["before"] == plain.kernel_counts()["after"] > plan.kernel_counts()["after"]
        assert f"fused {ops[0]} of {len(g.nodes)} nodes" in plan.placement_report()
        got, want = poisoned_run(plan, feeds)["y"], reference64(g, feeds)["y"]
        close(got, want, 2e-4)
        close(got, poisoned_run(plain, feeds)["y"].astype(np.float64), 2e-4)
    finally:
        plan.release()
        plain.release()


@pytest.mark.parametrize("name,build,op,kept", REFUSED, ids=[r[0] for r in REFUSED])
def test_pattern_is_not_recognised_when_it_differs(device, name, build, op, kept):
    rng = np.random.default_rng(sum(map(ord, name)))
    g, feeds = build(rng)
    plan = g.compile([device])
    try:
        ops = [n.op for n in plan.graph.needed()]
        assert (op is None or op not in ops) and kept in ops
        close(poisoned_run(plan, feeds)["y"], reference64(g, feeds)["y"], 2e-4)
    finally:
        plan.release()


def test_fuse_false_and_bad_values(device):
    g, _ = gelu_graph(np.random.default_rng(0))
    plan = g.compile([device], fuse=False)
    try:
        assert plan.fusion is None and plan.graph is g
        assert "nothing fused" in plan.placement_report()
    finally:
        plan.release()
    with pytest.raises(dl.InvalidArgument, match="fuse"):
        g.compile([device], fuse="yes")


def test_a_changed_graph_is_refused_after_fusion(device):
    g, feeds = gelu_graph(np.random.default_rng(1))
    plan = g.compile([device])
    try:
        g.relu(g.inputs[0])
        with pytest.raises(dl.GraphError, match="changed"):
            plan(**feeds)
    finally:
        plan.release()


@pytest.mark.parametrize("swapped", [False, True])
def test_silu_is_one_swish_on_the_host_and_one_fused_kernel_elsewhere(device, swapped, rng):
    """x * sigmoid(x) (either operand order) is swish on the host (one library call); a kernel device keeps the
    chain as one fused kernel. A sigmoid read elsewhere too, or of another tensor, stays as it is."""
    g = dl.Graph()
    x = g.input("x", (2, 8, 5, 5))
    s = g.sigmoid(x)
    g.output("y", g.mul(s, x) if swapped else g.mul(x, s))
    other = g.input("o", (2, 8, 5, 5))
    s2 = g.sigmoid(other)
    g.output("kept", g.mul(x, s2))  # the sigmoid of another tensor
    feeds = {"x": rng.standard_normal((2, 8, 5, 5)).astype(np.float32) * 4,
             "o": rng.standard_normal((2, 8, 5, 5)).astype(np.float32)}
    plan = g.compile([device])
    try:
        ops = sorted(n.op for n in plan.graph.needed())
        host = dl.device(device).info.kernel_language == "python" if isinstance(device, str) else \
            device.info.kernel_language == "python"
        assert ops == (["fused_elementwise", "swish"] if host else ["fused_elementwise", "fused_elementwise"])
        got, want = poisoned_run(plan, feeds), reference64(g, feeds)
        for name in want:
            close(got[name], want[name], 2e-4)
    finally:
        plan.release()


@pytest.mark.parametrize("gate_steps, escapes, forced", [(1, False, True), (3, False, True), (4, False, True),
                                                        (5, False, True), (1, True, True), (1, False, False)])
def test_a_small_gate_is_computed_again_inside_the_product_it_scales(device, gate_steps, escapes, forced, rng,
                                                                     monkeypatch):
    """A squeeze-and-excitation gate: sigmoid (or a chain of up to fusion.RECOMPUTED_STEPS steps) of an (N, C, 1, 1)
    tensor times an (N, C, H, W) one. Where the device ``recomputes`` (a GPU; ``forced``: every kernel device) the
    gate joins the product's kernel, computed again for each element; the host, a longer chain, or a gate also
    read elsewhere keep it apart. Values match float64."""
    from devicelayer.graph import fuse

    dev = device if not isinstance(device, str) else dl.device(device)
    if forced:
        monkeypatch.setattr(fuse, "recomputes", lambda d: d.info.kernel_language != "python")
    g = dl.Graph()
    x = g.input("x", (2, 8, 6, 5))
    gate_in = g.input("s", (2, 8, 1, 1))
    gate = g.sigmoid(gate_in)
    for _ in range(gate_steps - 1):
        gate = g.tanh(gate)
    if escapes:
        g.output("gate", gate)
    g.output("y", g.relu(g.mul(x, gate)))
    feeds = {"x": rng.standard_normal((2, 8, 6, 5)).astype(np.float32),
             "s": rng.standard_normal((2, 8, 1, 1)).astype(np.float32) * 3}
    plan = g.compile([device])
    try:
        joined = (dev.info.kernel_language != "python" and (forced or dev.info.device_type == "gpu")
                  and gate_steps <= fuse.RECOMPUTED_STEPS and not escapes)
        fused = [n for n in plan.graph.needed() if n.op == "fused_elementwise"]
        if joined:
            assert [n.op for n in plan.graph.needed()] == ["fused_elementwise"]
            assert len(plan.fusion.groups[0].members) == gate_steps + 2
            assert plan.kernel_counts() == {"before": gate_steps + 2, "after": 1}
        else:  # the product and relu fuse; the gate's own steps stay out of their kernel
            groups = plan.fusion.groups if plan.fusion else []
            assert all(("mul" in [op for _, op in gr.members]) <= (len(gr.members) == 2) for gr in groups)
            assert len(fused) <= 2 and plan.kernel_counts()["after"] >= 2
        got, want = poisoned_run(plan, feeds), reference64(g, feeds)
        assert set(got) == set(want)
        for name in want:
            close(got[name], want[name], 2e-4)
    finally:
        plan.release()


def test_silu_whose_sigmoid_is_also_an_output_is_not_replaced(rng):
    g = dl.Graph()
    x = g.input("x", (3, 7))
    s = g.sigmoid(x)
    g.output("s", s)
    g.output("y", g.mul(x, s))
    plan = g.compile(["host"])
    try:
        assert "swish" not in [n.op for n in plan.graph.needed()]
        feeds = {"x": rng.standard_normal((3, 7)).astype(np.float32)}
        got, want = poisoned_run(plan, feeds), reference64(g, feeds)
        for name in want:
            close(got[name], want[name], 2e-4)
    finally:
        plan.release()


def _conv_takes_activations(device) -> bool:
    """Whether a plan on ``device`` makes an activation after a conv the conv's own: on the host (oneDNN's post-op)
    and where the op's kernels run the conv (their epilogue); not where a vendor library runs it (cuDNN applies
    none but ReLU, and the conv stays with it)."""
    dev = dl.device(device)
    return dev.info.kernel_language == "python" or dev.vendor_op("conv") is None


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-1.5, 0.25), (None, 1.0)])
def test_a_clip_after_a_conv_is_the_convs_activation(device, bounds, rng):
    """conv -> clip (ReLU6) is one conv with a clip activation on the host (oneDNN's post-op where it is
    there) and on kernel devices (the kernels' epilogue); a device whose vendor library runs the conv keeps the
    clip. A clip of a conv that is also read elsewhere stays apart."""
    g = dl.Graph()
    x = g.input("x", (2, 6, 9, 9))
    w = g.constant(rng.standard_normal((8, 6, 3, 3)).astype(np.float32))
    b = g.constant(rng.standard_normal(8).astype(np.float32))
    lo, hi = bounds
    clip_attrs = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
    g.output("y", g.clip(g.conv(x, w, b, pads=[1, 1, 1, 1]), **clip_attrs))
    shared = g.conv(x, w, pads=[1, 1, 1, 1], strides=[2, 2])
    g.output("shared", shared)
    g.output("clipped", g.clip(shared, min=0.0, max=6.0))
    feeds = {"x": rng.standard_normal((2, 6, 9, 9)).astype(np.float32)}
    plan = g.compile([device])
    try:
        takes = _conv_takes_activations(device)
        convs = [n for n in plan.graph.needed() if n.op == "conv"]
        fused = [n for n in convs if n.attrs.get("activation") == "clip"]
        assert len(convs) == 2 and len(fused) == (1 if takes else 0)
        if takes:
            want_lo = -math.inf if lo is None else lo
            assert (fused[0].attrs["activation_min"], fused[0].attrs["activation_max"]) == (want_lo, hi)
        got, want = poisoned_run(plan, feeds), reference64(g, feeds)
        for name in want:
            close(got[name], want[name], 2e-4)
    finally:
        plan.release()


@pytest.mark.parametrize("attrs, match", [
    ({"activation": "clip", "activation_min": 2.0, "activation_max": 1.0}, "greater than"),
    ({"activation": "clip", "activation_min": float("nan")}, "must be a number"),
    ({"activation": "clip", "activation_max": "6"}, "must be a number"),
    ({"activation": "relu", "activation_max": 6.0}, "do not go with activation 'relu'"),
    ({"activation_min": 0.0}, "go with an activation only"),
    ({"activation_alpha": 0.5}, "go with an activation only"),
    ({"activation": "softsign"}, "must be one of"),
    ({"activation": "relu", "activation_alpha": 0.5}, "do not go with activation 'relu'"),
    ({"activation": "leaky_relu", "activation_beta": 0.5}, "do not go with activation 'leaky_relu'"),
    ({"activation": "clip", "activation_alpha": 0.5}, "do not go with activation 'clip'"),
    ({"activation": "elu", "activation_alpha": float("nan")}, "must be a number"),
    ({"activation": "hard_sigmoid", "activation_beta": "1"}, "must be a number"),
])
def test_a_conv_activation_with_bad_bounds_is_refused(attrs, match):
    types = [TensorType((1, 2, 5, 5), np.dtype(np.float32)), TensorType((3, 2, 3, 3), np.dtype(np.float32))]
    with pytest.raises(dl.InvalidArgument, match=match):
        OPS["conv"].prepare(types, attrs)


#: an activation after a conv (built with the graph builder) -> what the conv's activation becomes on the host
_AFTER_CONV = {
    "sigmoid": (lambda g, y: g.sigmoid(y), {"activation": "sigmoid"}),
    "silu": (lambda g, y: g.mul(y, g.sigmoid(y)), {"activation": "swish", "activation_alpha": 1.0}),
    "hard_swish": (lambda g, y: g.hard_swish(y), {"activation": "hard_swish"}),
    "hard_sigmoid": (lambda g, y: g.hard_sigmoid(y, alpha=0.3, beta=0.4),
                     {"activation": "hard_sigmoid", "activation_alpha": 0.3, "activation_beta": 0.4}),
    "leaky_relu": (lambda g, y: g.leaky_relu(y, alpha=0.2), {"activation": "leaky_relu", "activation_alpha": 0.2}),
    "elu": (lambda g, y: g.elu(y), {"activation": "elu", "activation_alpha": 1.0}),
    "tanh": (lambda g, y: g.tanh(y), {"activation": "tanh"}),
    "gelu": (lambda g, y: g.gelu(y), {"activation": "gelu"}),
}


@pytest.mark.parametrize("which", sorted(_AFTER_CONV))
def test_an_activation_after_a_conv_is_the_convs_activation(device, which, rng):
    """conv -> activation is one conv with that activation on the host (oneDNN's post-op) and on kernel devices
    (the kernels' epilogue), the activation's parameters carried over; a device whose vendor library runs the
    conv keeps them apart, and so does every device where the conv's result is also read elsewhere."""
    build, want_attrs = _AFTER_CONV[which]
    g = dl.Graph()
    x = g.input("x", (2, 5, 9, 9))
    w = g.constant(rng.standard_normal((7, 5, 3, 3)).astype(np.float32))
    b = g.constant(rng.standard_normal(7).astype(np.float32))
    g.output("y", build(g, g.conv(x, w, b, pads=[1, 1, 1, 1])))
    shared = g.conv(x, w, strides=[2, 2])
    g.output("shared", shared)
    g.output("activated", build(g, shared))
    feeds = {"x": rng.standard_normal((2, 5, 9, 9)).astype(np.float32)}
    plan = g.compile([device])
    try:
        takes = _conv_takes_activations(device)
        convs = [n for n in plan.graph.needed() if n.op == "conv"]
        fused = [n for n in convs if n.attrs.get("activation") is not None]
        assert len(convs) == 2 and len(fused) == (1 if takes else 0)
        if takes:
            got_attrs = {k: v for k, v in fused[0].attrs.items() if k.startswith("activation")}
            assert got_attrs.pop("activation") == want_attrs["activation"]
            assert got_attrs == pytest.approx({k: v for k, v in want_attrs.items() if k != "activation"})
            assert fused[0].outputs[0].name == plan.graph.outputs["y"].name
        got, want = poisoned_run(plan, feeds), reference64(g, feeds)
        for name in want:
            close(got[name], want[name], 2e-4)
    finally:
        plan.release()


#: conv geometries of each kernel path: (X shape, W shape, attributes)
_CONV_PATHS = {
    "1x1": ((2, 12, 7, 9), (20, 12, 1, 1), {}),
    "tiled": ((2, 6, 11, 10), (24, 6, 3, 3), {"pads": [1, 1, 1, 1]}),
    "depthwise": ((1, 8, 9, 9), (8, 1, 3, 3), {"group": 8, "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    "1d": ((2, 5, 33), (17, 5, 4), {"dilations": [2]}),
}
#: activations with their attributes, as a conv takes them
_CONV_ACTIVATIONS = [
    {"activation": "relu"},
    {"activation": "clip", "activation_min": 0.0, "activation_max": 0.5},
    {"activation": "clip", "activation_max": 0.25},
    {"activation": "swish", "activation_alpha": 1.0},
    {"activation": "hard_swish"},
    {"activation": "leaky_relu", "activation_alpha": 0.2},
    {"activation": "gelu"},
    {"activation": "sigmoid"},
]


@pytest.mark.parametrize("path", sorted(_CONV_PATHS))
@pytest.mark.parametrize("act", range(len(_CONV_ACTIVATIONS)))
@pytest.mark.parametrize("summand", [False, True])
def test_a_conv_applies_its_summand_and_activation_on_every_device(device, path, act, summand, rng):
    """A conv with an activation (and a residual summand Z) runs on every device, one launch on kernel devices
    (Z and the activation are the kernels' epilogue), and matches the float64 reference with poisoned outputs."""
    xs, ws, extra = _CONV_PATHS[path]
    attrs = {**extra, **_CONV_ACTIVATIONS[act]}
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    arrays = [x, w, b]
    types = [TensorType.of(a.shape, a.dtype) for a in arrays]
    checked, outs = OPS["conv"].prepare(types, dict(attrs))
    if summand:
        arrays.append(rng.standard_normal(outs[0].shape).astype(np.float32))
        types.append(outs[0])
        checked, outs = OPS["conv"].prepare(types, dict(attrs))
    info = dl.device(device).info
    assert OPS["conv"].unsupported(types, checked, info) is None
    if info.kernel_language != "python":
        steps = OPS["conv"].plan(types, outs, checked, info).steps
        assert len(steps) == 1 and "_ep" in steps[0].spec.name, [s.spec.name for s in steps]
    want = OPS["conv"].reference([a.astype(np.float64) for a in arrays], checked)[0]
    if attrs["activation"] == "clip":  # the bounds bite
        assert 0 < np.count_nonzero(want == attrs["activation_max"]) < want.size
    poisoned = tensor(np.full(outs[0].shape, np.nan, np.float32), device)
    got = run("conv", [tensor(a, device) for a in arrays], out=poisoned, **attrs)[0].numpy()
    close(got, want, 2e-4)


# -- slices cutting one tensor into pieces (patterns.slices_as_split) ---------------------------------------------
def _matches_float64(plan, g, shape, rng):
    """A poisoned run of ``plan`` on fresh inputs matches ``g`` in float64, every output."""
    feeds = {"x": rng.standard_normal(shape).astype(np.float32)}
    got, want = poisoned_run(plan, feeds), reference64(g, feeds)
    assert set(got) == set(want)
    for name in want:
        close(got[name], want[name])


def _sliced(cuts, axis=1, shape=(2, 9, 5, 3)):
    g = dl.Graph()
    x = g.input("x", shape)
    for k, (start, end, step) in enumerate(cuts):
        s = g.slice(x, starts=[start], ends=[end], axes=[axis], steps=[step])
        g.output(f"y{k}", g.relu(s) if k % 2 else s)  # (a piece returned as it is, and one read by a node)
    return g


@pytest.mark.parametrize("cuts, axis", [
    ([(0, 4, 1), (4, 9, 1)], 1),  # C2f's chunk in two
    ([(6, 9, 1), (0, 2, 1), (2, 6, 1)], 1),  # three pieces, out of order, the last written as a large end
    ([(0, 1, 1), (1, 2**62, 1)], -1),  # the last axis, an end past it
    ([(0, -3, 1), (-3, 9, 1)], 1),  # negative indices
])
def test_slices_cutting_a_tensor_into_pieces_become_one_split(device, rng, cuts, axis):
    g = _sliced(cuts, axis)
    plan, plain = g.compile([device]), g.compile([device], fuse=False)
    try:
        ops = [n.op for n in plan.graph.needed()]
        if device.info.kernel_language == "python":  # (its slices read its channels-last layout where it lies)
            assert "split" not in ops
        else:
            assert ops.count("split") == 1 and "slice" not in ops
            assert plan.kernel_counts() == {"before": plain.kernel_counts()["after"],
                                            "after": plain.kernel_counts()["after"] - len(cuts) + 1}
        _matches_float64(plan, g, (2, 9, 5, 3), rng)
    finally:
        plan.release()
        plain.release()


@pytest.mark.parametrize("cuts", [
    [(0, 4, 1), (3, 9, 1)],  # overlapping
    [(0, 4, 1), (5, 9, 1)],  # a gap
    [(0, 9, 2), (1, 9, 2)],  # every other row: steps of 2
    [(0, 4, 1)],  # one piece
    [(4, 0, -1), (4, 9, 1)],  # reversed
])
def test_slices_that_do_not_cut_a_tensor_into_pieces_stay_slices(device, rng, cuts):
    g = _sliced(cuts)
    plan = g.compile([device])
    try:
        assert "split" not in [n.op for n in plan.graph.needed()]
        _matches_float64(plan, g, (2, 9, 5, 3), rng)
    finally:
        plan.release()


def test_slices_along_two_axes_at_once_stay_slices(device, rng):
    g = dl.Graph()
    x = g.input("x", (4, 6))
    g.output("a", g.slice(x, starts=[0, 0], ends=[2, 3], axes=[0, 1]))
    g.output("b", g.slice(x, starts=[2, 3], ends=[4, 6], axes=[0, 1]))
    plan = g.compile([device])
    try:
        assert "split" not in [n.op for n in plan.graph.needed()]
        _matches_float64(plan, g, (4, 6), rng)
    finally:
        plan.release()
