"""The graph executor over a two-node Ray cluster on this machine: node A has the host only, node B the host,
OpenCL (PoCL) and Vulkan (lavapipe).  Results against NumPy float64, placement reports, both kinds of
parallelism, failures and misuse."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("ray")

import devicelayer as dl  # noqa: E402
import devicelayer.cluster as dc  # noqa: E402
from devicelayer.errors import (  # noqa: E402
    DeviceNotFound, GraphError, InvalidArgument, NodeError)

import cluster_nodes  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def two():
    cluster, conn, names, handles = cluster_nodes.start(["host", "host,opencl,vulkan"])
    yield SimpleNamespace(cluster=cluster, conn=conn, a=names[0], b=names[1])
    cluster_nodes.stop(cluster)


def chain(rng, layers: int = 6, width: int = 32, batch: int = 8, dtype=np.float32):
    """x (batch, width) -> layers of tanh(h @ W_i + b_i); the graph and its weights."""
    g = dl.Graph("chain")
    h = g.input("x", (batch, width), dtype)
    weights = []
    for i in range(layers):
        w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(dtype)
        b = rng.standard_normal(width).astype(dtype)
        weights.append((w, b))
        h = g.tanh(g.add(g.matmul(h, g.constant(w), name=f"mm{i}"), g.constant(b)), name=f"act{i}")
    g.output("y", h)
    return g, weights


def reference(x, weights):
    h = x.astype(np.float64)
    for w, b in weights:
        h = np.tanh(h @ w.astype(np.float64) + b.astype(np.float64))
    return h


def fresh(rng, shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_devices_have_node_qualified_ids_and_their_nodes_info(two):
    ids = [d.id for d in dc.devices()]
    assert f"{two.a}/host" in ids
    assert {f"{two.b}/host", f"{two.b}/opencl:0", f"{two.b}/vulkan:0"} <= set(ids)
    assert [i for i in ids if i.startswith(two.a + "/")] == [f"{two.a}/host"]  # node A sees its host only
    remote = dc.device(f"{two.b}/opencl:0")
    local = dl.device("opencl:0")  # the same machine: the same device as node B sees it
    assert remote.info.id == remote.id == f"{two.b}/opencl:0"
    assert (remote.info.name, remote.info.backend, remote.info.dtypes) == (local.info.name, local.info.backend,
                                                                           local.info.dtypes)
    assert remote.node == two.b and remote.local_id == "opencl:0"
    assert dc.device(f"{two.b}/opencl").id == f"{two.b}/opencl:0"  # a bare backend name: its first device
    for state in dc.nodes():
        assert len(state.name) == 8 and state.node_id.startswith(state.name)
        assert state.address == "127.0.0.1" and state.version == dl.__version__


def test_unknown_node_and_malformed_ids(two):
    with pytest.raises(DeviceNotFound, match=two.a):  # the message lists the nodes
        dc.device("ffffffff/host")
    with pytest.raises(DeviceNotFound, match="has"):
        dc.device(f"{two.a}/opencl:0")  # node A has no OpenCL
    for bad in ("/host", f"{two.a}/", f"{two.a}/host/x", f" {two.a}/host"):
        with pytest.raises(DeviceNotFound, match="malformed"):
            dc.device(bad)
    with pytest.raises(InvalidArgument, match="expected a node-qualified id"):
        dc.device(3)
    g, _ = chain(np.random.default_rng(0), layers=1)
    with pytest.raises(DeviceNotFound):
        g.compile(["ffffffff/host"])
    with pytest.raises(DeviceNotFound):
        g.compile([f"{two.a}/host"], placement={"mm0": "ffffffff/host"})


def test_model_split_over_nodes_matches_float64(two, rng):
    g, weights = chain(rng)
    ids = [f"{two.a}/host", f"{two.b}/opencl:0", f"{two.b}/vulkan:0"]
    plan = g.compile(ids, policy="pipeline")
    rows = plan.placement_table()
    assert {r["device"] for r in rows} == set(ids)
    assert all(r["why"].startswith("pipeline stage") for r in rows)
    assert plan.transfers == 1  # one value crosses from node A to node B
    moves = plan.transfer_table()
    assert [m["kind"] for m in moves].count("cross-node") == 1
    cross = next(m for m in moves if m["kind"] == "cross-node")
    assert (cross["source"], cross["target"], cross["bytes"]) == (two.a, two.b, 8 * 32 * 4)
    first = fresh(rng, (8, 32))
    second = fresh(rng, (8, 32))
    y1 = plan(x=first)["y"]
    y2 = plan(x=second)["y"]
    np.testing.assert_allclose(y1, reference(first, weights), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y2, reference(second, weights), rtol=1e-4, atol=1e-5)
    assert y1.flags.writeable and not np.allclose(y1, y2)
    text = plan.placement_report()
    assert "1 cross-node transfer(s) per run, 1024 bytes" in text and "last run:" in text
    assert f"{two.a} -> {two.b}" in text
    memory = plan.memory_report()
    assert set(memory) == set(ids) and all(m["peak"] >= m["lower_bound"] for m in memory.values())
    assert [p["node"] for p in plan.last_run["parts"]] == [two.a, two.b]


def test_fill_spread_explicit_and_strict_over_nodes(two, rng):
    g, weights = chain(rng, layers=3)
    x = fresh(rng, (8, 32))
    want = reference(x, weights)
    ids = [f"{two.a}/host", f"{two.b}/host"]
    fill = g.compile(ids)
    assert {r["device"] for r in fill.placement_table()} == {ids[0]} and fill.transfers == 0
    np.testing.assert_allclose(fill(x=x)["y"], want, rtol=1e-4, atol=1e-5)
    pinned = g.compile(ids, placement={"mm1": f"{two.b}/host"})
    row = next(r for r in pinned.placement_table() if r["node"] == "mm1")
    assert row["device"] == f"{two.b}/host" and row["why"] == "placed there by placement="
    assert pinned.transfers >= 1
    np.testing.assert_allclose(pinned(x=x)["y"], want, rtol=1e-4, atol=1e-5)

    branches = dl.Graph("branches")
    a = branches.input("a", (16, 16))
    wa, wb = fresh(rng, (16, 16)), fresh(rng, (16, 16))
    branches.output("p", branches.relu(branches.matmul(a, branches.constant(wa)), name="left"))
    branches.output("q", branches.sigmoid(branches.matmul(a, branches.constant(wb)), name="right"))
    spread = branches.compile(ids, policy="spread")
    where = {r["node"]: r["device"] for r in spread.placement_table()}
    assert where["left"] != where["right"]
    av = fresh(rng, (16, 16))
    out = spread(a=av)
    np.testing.assert_allclose(out["p"], np.maximum(av.astype(np.float64) @ wa, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["q"], 1 / (1 + np.exp(-(av.astype(np.float64) @ wb))), rtol=1e-4, atol=1e-5)

    half = dl.Graph("half")  # float16, which node B's OpenCL (PoCL) lacks
    h = half.input("h", (4, 8), np.float16)
    half.output("r", half.relu(h, name="r16"))
    strict_ids = [f"{two.b}/opencl:0", f"{two.a}/host"]
    with pytest.raises(GraphError, match="r16"):
        half.compile(strict_ids, strict=True)
    loose = half.compile(strict_ids)
    row = loose.placement_table()[0]
    assert row["device"] == f"{two.a}/host" and "skipped" in row["why"]
    hv = fresh(rng, (4, 8), np.float16)
    np.testing.assert_array_equal(loose(h=hv)["r"], np.maximum(hv, 0))


def test_local_ids_name_the_drivers_node(two, rng):
    g, weights = chain(rng, layers=2)
    plan = g.compile(["host", f"{two.b}/host"], policy="pipeline")
    assert {r["device"] for r in plan.placement_table()} == {f"{two.a}/host", f"{two.b}/host"}  # driver on A
    x = fresh(rng, (8, 32))
    np.testing.assert_allclose(plan(x=x)["y"], reference(x, weights), rtol=1e-4, atol=1e-5)


def test_pipeline_runs_in_flight(two, rng):
    g, weights = chain(rng, layers=4)
    plan = g.compile([f"{two.a}/host", f"{two.b}/host"], policy="pipeline")
    feeds = [{"x": fresh(rng, (8, 32))} for _ in range(6)]
    outs = plan.map(feeds, in_flight=3)
    for f, o in zip(feeds, outs):
        np.testing.assert_allclose(o["y"], reference(f["x"], weights), rtol=1e-4, atol=1e-5)
    runs = [plan.submit(f) for f in feeds[:3]]
    for f, run in zip(feeds, runs):
        np.testing.assert_allclose(run.result(timeout=60)["y"], reference(f["x"], weights), rtol=1e-4, atol=1e-5)
        assert run.done()


def test_data_parallel_splits_the_batch(two, rng):
    g, weights = chain(rng, layers=3, batch=1)  # one row a part
    ids = [f"{two.a}/host", f"{two.b}/vulkan:0"]
    plan = g.compile(ids, parallel="data")
    assert plan.parallel == "data" and plan.transfers == 0 and plan.batch == 1
    assert {r["device"] for r in plan.placement_table()} == set(ids)
    x = fresh(rng, (7, 32))
    np.testing.assert_allclose(plan(x=x)["y"], reference(x, weights), rtol=1e-4, atol=1e-5)
    assert [p["node"] for p in plan.last_run["parts"]] == [two.a] * 3 + [two.b] * 4
    assert all(p["bytes"] == [32 * 4] for p in plan.last_run["parts"])
    one = fresh(rng, (1, 32))  # fewer parts than nodes: one node runs it
    np.testing.assert_allclose(plan(x=one)["y"], reference(one, weights), rtol=1e-4, atol=1e-5)
    assert len(plan.last_run["parts"]) == 1
    outs = plan.map([{"x": fresh(rng, (7, 32))} for _ in range(3)], in_flight=2)
    assert all(o["y"].shape == (7, 32) for o in outs)

    pair = dl.Graph("pair")
    p, q = pair.input("p", (4, 3)), pair.input("q", (4, 3))
    pair.output("s", pair.add(p, q))
    both = pair.compile(ids, parallel="data")
    with pytest.raises(InvalidArgument, match="batches differ"):
        both(p=fresh(rng, (4, 3)), q=fresh(rng, (6, 3)))
    with pytest.raises(InvalidArgument, match="multiple of 4"):
        both(p=fresh(rng, (6, 3)), q=fresh(rng, (6, 3)))
    p8, q8 = fresh(rng, (8, 3)), fresh(rng, (8, 3))  # two parts of the graph's 4 rows, one per node
    np.testing.assert_allclose(both(p=p8, q=q8)["s"], p8.astype(np.float64) + q8, rtol=1e-6)
    total = dl.Graph("total")
    t = total.input("t", (4, 3))
    total.output("s", total.sum(t, axes=[0], keepdims=False))
    with pytest.raises(GraphError, match="axis 0"):
        total.compile(ids, parallel="data")


def test_profile_gives_one_track_per_node_and_device(two, rng, tmp_path):
    g, _ = chain(rng, layers=4)
    plan = g.compile([f"{two.a}/host", f"{two.b}/opencl:0"], policy="pipeline", fuse=False)  # nodes as named
    with pytest.raises(GraphError, match="profile"):
        plan.trace(tmp_path / "none.json")
    plan(x=fresh(rng, (8, 32)), profile=True)
    doc = json.loads(plan.trace(tmp_path / "run.json").read_text())
    tracks = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert {f"{two.a}/host", f"{two.b}/opencl:0", f"{two.b}/network"} <= tracks
    names = {e["name"] for e in doc["traceEvents"] if e.get("ph") == "X"}
    assert {"mm0", "act3"} <= names
    pytest.importorskip("matplotlib")
    assert plan.gantt(tmp_path / "run.png").stat().st_size > 1000


def test_a_failing_node_raises_its_typed_error_and_the_plan_goes_on(two, rng):
    g = dl.Graph("lookup")
    table, rows = g.input("table", (5, 4)), g.input("rows", (3,), np.int64)
    g.output("picked", g.gather(table, rows, axis=0, name="pick"))
    plan = g.compile([f"{two.b}/host"])
    t = fresh(rng, (5, 4))
    with pytest.raises(InvalidArgument, match=f"node {two.b}: .*pick"):
        plan(table=t, rows=np.array([0, 9, 1]))
    np.testing.assert_array_equal(plan(table=t, rows=np.array([4, 0, 2]))["picked"], t[[4, 0, 2]])


def test_an_actor_that_dies_raises_node_error_and_compiles_again(two, rng):
    import ray

    g, weights = chain(rng, layers=4)
    ids = [f"{two.a}/host", f"{two.b}/host"]
    plan = g.compile(ids, policy="pipeline")
    x = fresh(rng, (8, 32))
    plan(x=x)
    ray.kill(two.conn.node(two.b).actor)
    start = time.perf_counter()
    with pytest.raises(NodeError) as caught:
        plan(x=x, timeout=60)
    assert time.perf_counter() - start < 60
    assert caught.value.node == two.b and caught.value.op == plan.parts[1].first
    assert two.b in str(caught.value) and caught.value.op in str(caught.value)
    with pytest.raises(NodeError, match="compile the graph again"):
        plan(x=x)
    again = g.compile(ids, policy="pipeline")  # the node is alive: its actor is started again
    np.testing.assert_allclose(again(x=x)["y"], reference(x, weights), rtol=1e-4, atol=1e-5)


def test_a_run_past_its_timeout_names_the_node(two, rng):
    g, weights = chain(rng, layers=30, width=256, batch=256)
    plan = g.compile([f"{two.a}/host", f"{two.b}/host"], policy="pipeline")
    x = fresh(rng, (256, 256))
    with pytest.raises(NodeError, match="did not finish within") as caught:
        plan(x=x, timeout=0.001)
    assert caught.value.node in (two.a, two.b) and caught.value.op
    np.testing.assert_allclose(plan(x=x, timeout=120)["y"], reference(x, weights), rtol=1e-3, atol=1e-4)


def test_misuse(two, rng):
    with pytest.raises(InvalidArgument, match="already connected"):
        dc.connect()
    g, _ = chain(rng, layers=2)
    ids = [f"{two.a}/host", f"{two.b}/host"]
    plan = g.compile(ids, policy="pipeline")
    x = fresh(rng, (8, 32))
    with pytest.raises(InvalidArgument, match="missing"):
        plan()
    with pytest.raises(InvalidArgument, match="unknown"):
        plan(x=x, z=x)
    with pytest.raises(InvalidArgument, match="rank"):
        plan(x=x[0])
    with pytest.raises(GraphError, match=f"node {two.a}"):  # a width the weights do not take: refused on the node
        plan(x=fresh(rng, (8, 5)))
    with pytest.raises(InvalidArgument, match="timeout"):
        plan(x=x, timeout=-1)
    with pytest.raises(InvalidArgument, match="in_flight"):
        plan.map([{"x": x}], in_flight=0)
    with pytest.raises(InvalidArgument, match="parallel"):
        g.compile(ids, parallel="pipeline")
    with pytest.raises(InvalidArgument, match="timeout"):
        g.compile(ids, timeout=0)
    with pytest.raises(InvalidArgument, match="twice"):
        g.compile([ids[0], ids[0]])
    with pytest.raises(InvalidArgument, match="parallel='data'"):
        g.compile(["host"], parallel="data")  # this machine's devices only
    with pytest.raises(InvalidArgument, match="timeout"):
        g.compile(["host"], timeout=5)
    np.testing.assert_array_equal(plan(x=x)["y"], plan(x=x)["y"])  # still usable
    plan.release()
    with pytest.raises(GraphError, match="released"):
        plan(x=x)
    changed = g.compile(ids)
    g.output("extra", g.relu(g.outputs["y"]))
    with pytest.raises(GraphError, match="changed"):
        changed(x=x)


def test_info_cluster_lists_every_nodes_devices(two):
    import os
    import subprocess
    import sys

    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "devicelayer.cli", "info", "--cluster", two.cluster.address,
                           "--json"], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["schema"] == "devicelayer.cluster-info/1"
    nodes = {n["name"]: [d["id"] for d in n["devices"]] for n in doc["nodes"]}
    assert nodes[two.a] == [f"{two.a}/host"]
    assert set(nodes[two.b]) == {f"{two.b}/host", f"{two.b}/opencl:0", f"{two.b}/vulkan:0"}
    table = subprocess.run([sys.executable, "-m", "devicelayer.cli", "info", "--cluster", two.cluster.address],
                           capture_output=True, text=True, timeout=180, env=env)
    assert table.returncode == 0 and f"node {two.a}" in table.stdout and f"{two.b}/vulkan:0" in table.stdout
    refused = subprocess.run([sys.executable, "-m", "devicelayer.cli", "info", "--cluster", "--backend", "host"],
                             capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 2 and "--backend" in refused.stderr


def _onnx_mlp(rng, batch):
    """An ONNX model x (batch, 16) -> relu(x @ W1 + b) @ W2, ``batch`` an int or a symbolic name."""
    from onnx import TensorProto, helper, numpy_helper

    w1, b, w2 = (fresh(rng, s) for s in ((16, 24), (24,), (24, 8)))
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(b, "b"), numpy_helper.from_array(w2, "w2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_onnx_model_of_fixed_shapes_compiles_over_nodes(two, rng):
    pytest.importorskip("onnxruntime")
    import onnxruntime

    from devicelayer.onnx import load

    model = _onnx_mlp(rng, 4)
    plan = load(model).compile([f"{two.a}/host", f"{two.b}/host"], policy="pipeline")
    assert {r["device"] for r in plan.placement_table()} == {f"{two.a}/host", f"{two.b}/host"}
    x = fresh(rng, (4, 16))
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(plan(x=x)["y"], want, rtol=1e-5, atol=1e-5)
    with pytest.raises(InvalidArgument, match="symbolic"):
        load(_onnx_mlp(rng, "n")).compile([f"{two.a}/host"])
