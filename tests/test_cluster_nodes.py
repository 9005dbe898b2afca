"""Three nodes of a Ray cluster on this machine (each with its host): data parallel over all three, a pipeline
over all three, and one node removed in the middle of a run."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("ray")

import devicelayer as dl  # noqa: E402
import devicelayer.cluster as dc  # noqa: E402
from devicelayer.errors import DeviceNotFound, GraphError, NodeError  # noqa: E402

import cluster_nodes  # noqa: E402
from test_cluster import chain, fresh, reference  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def three():
    cluster, conn, names, handles = cluster_nodes.start(["host", "host", "host"])
    yield SimpleNamespace(cluster=cluster, conn=conn, names=names, handles=handles)
    cluster_nodes.stop(cluster)


def test_data_parallel_over_three_nodes(three, rng):
    g, weights = chain(rng, layers=3, batch=2)
    plan = g.compile([f"{n}/host" for n in three.names], parallel="data")
    x = fresh(rng, (20, 32))  # ten parts of two rows
    np.testing.assert_allclose(plan(x=x)["y"], reference(x, weights), rtol=1e-4, atol=1e-5)
    nodes = [p["node"] for p in plan.last_run["parts"]]
    assert nodes == [three.names[0]] * 3 + [three.names[1]] * 3 + [three.names[2]] * 4


def test_pipeline_over_three_nodes(three, rng):
    g, weights = chain(rng, layers=6)
    plan = g.compile([f"{n}/host" for n in three.names], policy="pipeline")
    assert plan.transfers == 2 and [p.node for p in plan.parts] == three.names
    feeds = [{"x": fresh(rng, (8, 32))} for _ in range(5)]
    for f, o in zip(feeds, plan.map(feeds, in_flight=3)):
        np.testing.assert_allclose(o["y"], reference(f["x"], weights), rtol=1e-4, atol=1e-5)


def test_a_node_removed_mid_run_raises_node_error_and_the_survivors_compile_again(three, rng):
    g, weights = chain(rng, layers=24, width=256, batch=128)
    ids = [f"{n}/host" for n in three.names]
    plan = g.compile(ids, policy="pipeline")
    x = fresh(rng, (128, 256))
    plan(x=x)
    gone = three.names[2]
    remover = threading.Thread(target=lambda: (time.sleep(0.3), three.cluster.remove_node(three.handles[2])))
    start = time.perf_counter()
    remover.start()
    try:
        with pytest.raises(NodeError) as caught:
            plan.map([{"x": x}] * 200, in_flight=3, timeout=60)
    finally:
        remover.join()
    took = time.perf_counter() - start
    assert took < 60, f"{took:.1f} s: {caught.value}"  # bounded: no hang
    assert (caught.value.node, caught.value.op) == (gone, plan.parts[2].first), str(caught.value)
    assert gone in str(caught.value)
    with pytest.raises(NodeError, match="compile the graph again"):
        plan(x=x)
    deadline = time.monotonic() + 60
    while any(n.name == gone for n in dc.nodes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert sorted(n.name for n in dc.nodes()) == sorted(three.names[:2])
    with pytest.raises(DeviceNotFound, match=gone):
        g.compile(ids, policy="pipeline")
    again = g.compile(ids[:2], policy="pipeline")
    np.testing.assert_allclose(again(x=x)["y"], reference(x, weights), rtol=1e-3, atol=1e-4)


def test_disconnect_ends_the_plans_and_the_node_ids(three, rng):
    g, weights = chain(rng, layers=2)
    plan = g.compile([f"{three.names[0]}/host"])
    x = fresh(rng, (8, 32))
    np.testing.assert_allclose(plan(x=x)["y"], reference(x, weights), rtol=1e-4, atol=1e-5)
    dc.disconnect()
    with pytest.raises(GraphError, match="closed|released"):
        plan(x=x)
    with pytest.raises(DeviceNotFound, match="connect"):
        g.compile([f"{three.names[0]}/host"])
    dc.disconnect()  # again: nothing
    local = g.compile(["host"])  # this machine's devices are untouched
    np.testing.assert_allclose(local(x=x)["y"], reference(x, weights), rtol=1e-4, atol=1e-5)
    assert dl.device("host").info.id == "host"


def test_connect_misuse_and_an_existing_ray_session(three, rng):
    import ray

    from devicelayer.errors import BackendUnavailable, InvalidArgument

    dc.disconnect()
    with pytest.raises(BackendUnavailable, match="connect\\(\\) first"):
        dc.devices()
    with pytest.raises(BackendUnavailable, match="connect\\(\\) first"):
        dc.device(f"{three.names[0]}/host")
    with pytest.raises(InvalidArgument, match="keyword"):
        dc.connect(three.cluster.address, bogus_keyword=1)
    assert not ray.is_initialized()
    ray.init(address=three.cluster.address, _node_ip_address="127.0.0.1", log_to_driver=False)
    try:
        with pytest.raises(InvalidArgument, match="without arguments"):
            dc.connect(three.cluster.address)
        dc.connect()  # the session this process has
        g, weights = chain(rng, layers=2)
        x = fresh(rng, (8, 32))
        plan = g.compile([f"{three.names[1]}/host"])
        np.testing.assert_allclose(plan(x=x)["y"], reference(x, weights), rtol=1e-4, atol=1e-5)
        dc.disconnect()
        assert ray.is_initialized()  # left up: connect did not start it
    finally:
        dc.disconnect()
        ray.shutdown()
