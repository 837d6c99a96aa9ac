"""One vector env over several real servers (started here, each on its own port)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import numpy as np
import pytest

import deskgym
import deskgym.datasets
from deskgym.fleet import ShardedVectorEnv, place

from conftest import Server


@pytest.fixture()
def two_servers(tmp_path: pathlib.Path) -> Iterator[list[Server]]:
    servers = [Server("--max-envs", str(m), "--idle-timeout-s", "0", "--data-dir", str(tmp_path / f"d{i}"))
               for i, m in enumerate((3, 5))]
    yield servers
    for s in servers:
        if s.proc.poll() is None:
            s.stop()


def test_placement_follows_free_capacity_in_contiguous_runs() -> None:
    assert place(6, 0, [3, 5]) == [(0, 0, 2), (1, 2, 4)]
    assert place(3, 10, [0, 4, 4]) == [(1, 10, 2), (2, 12, 1)]
    with pytest.raises(deskgym.DeskgymError) as e:
        place(9, 0, [3, 5])
    assert e.value.code == "RESOURCE_EXHAUSTED"


def actions(step: int, n: int, verb: str = "click") -> list[dict[str, object]]:
    return [{"verb": verb, "x": (37 * (i + 1) + 11 * step) % 320, "y": (53 * (i + 2) + 7 * step) % 240}
            for i in range(n)]


def test_a_sharded_env_steps_like_one_server_for_the_same_seeds(
    two_servers: list[Server], address: str, tmp_path: pathlib.Path
) -> None:
    n = 6
    sharded = deskgym.make_vec("click-target", n, address=[s.address for s in two_servers], screen=(320, 240),
                               seed=5, max_steps=4, record="fleet")
    single = deskgym.make_vec("click-target", n, address=address, screen=(320, 240), seed=5, max_steps=4)
    try:
        assert isinstance(sharded, ShardedVectorEnv)
        assert sharded.placement() == [two_servers[0].address] * 2 + [two_servers[1].address] * 4
        # Each shard records on its own server, named by its first env.
        assert [pathlib.Path(p).name for p in sharded.recording_paths] == ["fleet-0.skn", "fleet-2.skn"]
        a, ia = sharded.reset(seed=0)
        b, ib = single.reset(seed=0)
        assert np.array_equal(a, b) and list(ia["frame_hash"]) == list(ib["frame_hash"])
        for t in range(10):  # crosses episode ends (max_steps=4): autoresets match too
            a, ra, ta, tra, ia = sharded.step(actions(t, n))
            b, rb, tb, trb, ib = single.step(actions(t, n))
            assert np.array_equal(a, b), t
            assert (ra == rb).all() and (ta == tb).all() and (tra == trb).all(), t
            assert list(ia["seed"]) == list(ib["seed"]) and list(ia["frame_hash"]) == list(ib["frame_hash"])
    finally:
        sharded.close()
        single.close()
    # Each shard's run, gathered from its own server after the close: together they hold
    # every env's steps (2 + 4 envs, 10 steps each, plus the autoresets).
    local = sharded.gather_recordings(tmp_path)
    assert [pathlib.Path(p).name for p in local] == ["fleet-0.skn", "fleet-2.skn"]
    steps = [deskgym.datasets.open(p)["steps"] for p in local]
    assert all(s is not None for s in steps)
    envs = [len(set(s.column("env_id").to_pylist())) for s in steps]
    assert envs == [2, 4], envs


def test_a_lost_server_truncates_only_its_envs_and_they_move(two_servers: list[Server]) -> None:
    n = 4
    env = deskgym.make_vec("click-target", n, address=[s.address for s in two_servers], screen=(320, 240), seed=1)
    try:
        # Each env goes where the most room is left: 1 on the 3-desktop server, 3 on the other.
        assert env.placement() == [two_servers[0].address] + [two_servers[1].address] * 3
        env.reset(seed=0)
        env.step(actions(0, n, "move"))
        two_servers[0].proc.kill()
        two_servers[0].proc.wait()
        obs, rew, term, trunc, infos = env.step(actions(1, n, "move"))
        assert list(trunc) == [True, False, False, False]
        assert list(infos["_error"]) == [True, False, False, False]
        assert infos["error"]["server"][0] == two_servers[0].address
        assert infos["error"]["code"][0] == "UNAVAILABLE"
        # Next step: the lost env starts again on the server that is left.
        obs, rew, term, trunc, infos = env.step(actions(2, n, "move"))
        assert not trunc.any() and "_error" not in infos
        assert env.placement() == [two_servers[1].address] * n
        assert list(infos["step_index"]) == [0, 3, 3, 3]
        for t in range(3, 6):
            env.step(actions(t, n))
    finally:
        env.close()


def test_no_room_left_keeps_lost_envs_truncated_without_raising(two_servers: list[Server]) -> None:
    env = deskgym.make_vec("click-target", 8, address=[s.address for s in two_servers], screen=(320, 240))
    try:
        env.reset(seed=0)
        two_servers[1].proc.kill()
        two_servers[1].proc.wait()
        for t in range(3):  # server 0 is full (3 of 3): its 3 envs go on, the 5 others wait
            _, _, _, trunc, infos = env.step(actions(t, 8, "move"))
            assert list(trunc) == [False] * 3 + [True] * 5
            assert all(c == "UNAVAILABLE" for c in infos["error"]["code"][3:])
    finally:
        env.close()


def test_metrics_count_steps_errors_and_envs(tmp_path: pathlib.Path) -> None:
    import urllib.request

    s = Server("--metrics-listen", "127.0.0.1:0", "--idle-timeout-s", "0", "--data-dir", str(tmp_path / "m"))
    try:
        assert s.proc.stdout is not None
        line = s.proc.stdout.readline()
        assert line.startswith("deskgym-server metrics on http://"), line
        url = line.split()[-1]

        def scrape() -> dict[str, float]:
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            return {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                    if ln and not ln.startswith("#")}

        before = scrape()
        env = deskgym.make_vec("click-target", 2, address=s.address, screen=(320, 240), seed=0)
        try:
            env.reset(seed=0)
            for t in range(5):
                env.step(actions(t, 2, "move"))
            with pytest.raises(deskgym.DeskgymError):
                env.client.reset("no-such-env")
            m = scrape()
        finally:
            env.close()
        assert m["deskgym_envs"] == 2 and m["deskgym_pools"] == 1 and before["deskgym_envs"] == 0
        assert m["deskgym_steps_total"] - before["deskgym_steps_total"] == 10
        assert m["deskgym_resets_total"] - before["deskgym_resets_total"] == 2
        assert m['deskgym_step_latency_seconds_bucket{le="+Inf"}'] == m["deskgym_steps_total"]
        assert m['deskgym_errors_total{code="NOT_FOUND"}'] == before['deskgym_errors_total{code="NOT_FOUND"}'] + 1
        assert m["deskgym_frame_cache_hits_total"] + m["deskgym_frame_cache_misses_total"] > 0
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=10)
        assert e.value.code == 404
    finally:
        s.stop()
