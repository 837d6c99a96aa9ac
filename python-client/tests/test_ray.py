"""deskgym servers on a local multi-node Ray cluster (ray.cluster_utils.Cluster): one
server per node that advertises desktops, one vector env over them, a killed server's
envs truncated and moved, and nothing left running after tear-down."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np
import pytest
import ray
from ray.cluster_utils import Cluster

import deskgym
import deskgym.ray as dray

from conftest import server_binary


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    os.environ["DESKGYM_SERVER"] = server_binary()  # what the nodes' actors run
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {dray.RESOURCE: 2}})
    c.add_node(num_cpus=1, resources={dray.RESOURCE: 3})
    c.add_node(num_cpus=1)  # no desktops here: no server either
    ray.init(address=c.address, namespace=dray.NAMESPACE)
    yield c
    ray.shutdown()
    c.shutdown()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split()[2] != "Z"


def children(pid: int) -> set[int]:
    """Processes a server started (Xvfb, task apps), from every thread's children list."""
    out: set[int] = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.update(int(c) for c in f.read().split())
    except FileNotFoundError:
        pass
    return out


def moves(t: int, n: int) -> list[dict[str, object]]:
    return [{"verb": "move", "x": (23 * i + 5 * t) % 320, "y": (31 * i + 3 * t) % 240} for i in range(n)]


def test_envs_spread_over_the_nodes_and_survive_a_server_death(cluster: Cluster, address: str) -> None:
    actors = dray.servers()
    infos = ray.get([a.info.remote() for a in actors])
    assert sorted(i["max_envs"] for i in infos) == [2, 3] and len({i["node_id"] for i in infos}) == 2
    pids = [i["pid"] for i in infos]
    env = dray.make_vec("click-target", 5, screen=(320, 240), seed=4, max_steps=10_000)
    single = deskgym.make_vec("click-target", 5, address=address, screen=(320, 240), seed=4, max_steps=10_000)
    try:
        assert sorted(set(env.placement())) == sorted(i["address"] for i in infos)
        a, _ = env.reset(seed=0)
        b, _ = single.reset(seed=0)
        assert np.array_equal(a, b)
        for t in range(3):  # the same seeds and actions give the same results as one server
            a, ra, *_ = env.step(moves(t, 5))
            b, rb, *_ = single.step(moves(t, 5))
            assert np.array_equal(a, b) and (ra == rb).all()
        # Kill one node's server: its envs come back truncated, the others go on.
        victim = next(i for i in infos if i["max_envs"] == 2)
        lost = [p == victim["address"] for p in env.placement()]
        desktops = children(victim["pid"])
        assert desktops, "the server runs its desktops as children"
        killed = ray.get(next(a for a, i in zip(actors, infos) if i is victim).kill_server.remote())
        _, _, _, trunc, step_infos = env.step(moves(3, 5))
        assert list(trunc) == lost and any(lost)
        assert all(c in ("UNAVAILABLE", "NOT_FOUND") for c, m in zip(step_infos["error"]["code"], lost) if m)
        # The actor restarts the server on its port; until it is back, the lost envs
        # stay truncated (the other server is full), then they are placed again.
        t = 4
        while True:
            _, _, _, trunc, step_infos = env.step(moves(t, 5))
            t += 1
            if not trunc.any():
                break
            assert list(trunc) == lost and t < 400, (list(trunc), step_infos.get("error"), env.placement())
            time.sleep(0.05)
        for t in range(t, t + 3):
            _, _, _, trunc, _ = env.step(moves(t, 5))
            assert not trunc.any()
        assert not alive(killed) and not any(alive(p) for p in desktops), "a killed server's desktops die with it"
        again = ray.get([a.info.remote() for a in actors])
        assert sum(i["restarts"] for i in again) == 1
        assert {i["address"] for i in again} == {i["address"] for i in infos}, "restarted on the same port"
        pids = [i["pid"] for i in again]
        pids += [c for p in pids for c in children(p)]
    finally:
        env.close()
        single.close()
        dray.shutdown()
    assert not any(alive(p) for p in pids), "no server or desktop outlives its actor"
