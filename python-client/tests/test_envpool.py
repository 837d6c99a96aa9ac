"""EnvPool-style send/recv over the StepStream RPC, on one server and on two."""

from __future__ import annotations

import pathlib
from collections import Counter

import numpy as np
import pytest

import deskgym
from deskgym.envpool import DeskgymEnvPool

from conftest import Server


def moves(ids: list[int], t: int) -> list[dict[str, object]]:
    return [{"verb": "move", "x": (23 * i + 5 * t) % 320, "y": (31 * i + 3 * t) % 240} for i in ids]


def test_recv_returns_the_first_finished_and_matches_synchronous_stepping(address: str) -> None:
    n = 4
    pool = deskgym.make_vec("click-target", n, batch_size=n, address=address, screen=(320, 240), seed=3)
    sync = deskgym.make_vec("click-target", n, address=address, screen=(320, 240), seed=3)
    try:
        assert isinstance(pool, DeskgymEnvPool)
        obs, infos = pool.reset(seed=0)
        ref, ref_info = sync.reset(seed=0)
        assert np.array_equal(obs, ref)
        for t in range(5):
            o, r, term, trunc, info = pool.step(moves(list(range(n)), t))
            order = np.argsort(info["env_id"])
            ro, rr, rterm, rtrunc, rinfo = sync.step(moves(list(range(n)), t))
            assert np.array_equal(o[order], ro) and (r[order] == rr).all()
            assert [info["frame_hash"][j] for j in order] == list(rinfo["frame_hash"])
        # An env with a step in flight cannot be sent another.
        pool.send(moves([0], 9), [0])
        with pytest.raises(deskgym.DeskgymError) as e:
            pool.send(moves([0], 9), [0])
        assert e.value.code == "FAILED_PRECONDITION"
        pool.recv()
    finally:
        pool.close()
        sync.close()


def test_a_slow_env_does_not_hold_back_the_batch(address: str) -> None:
    n, k = 4, 2
    pool = DeskgymEnvPool("click-target", n, batch_size=k, address=address, screen=(320, 240), seed=1,
                          max_steps=10_000)
    try:
        pool.async_reset(seed=0)
        seen: Counter[int] = Counter()
        for t in range(40):
            _, _, _, trunc, info = pool.recv()
            ids = [int(i) for i in info["env_id"]]
            assert not trunc.any()
            seen.update(ids)
            # Env 0 waits 300 ms a step; the others only move the pointer.
            acts = [{"verb": "wait", "ms": 300} if i == 0 else moves([i], t)[0] for i in ids]
            pool.send(acts, ids)
        assert seen[0] < 10 < min(seen[1], seen[2], seen[3]), seen
    finally:
        pool.close()


def test_an_env_pool_over_two_servers(tmp_path: pathlib.Path) -> None:
    servers = [Server("--max-envs", "2", "--idle-timeout-s", "0", "--data-dir", str(tmp_path / f"d{i}")) for i in range(2)]
    try:
        pool = deskgym.make_vec("click-target", 4, batch_size=2, address=[s.address for s in servers],
                                screen=(320, 240), seed=0)
        try:
            pool.async_reset(seed=0)
            ids: set[int] = set()
            # recv gives the first two finished: a slower env may sit out a few rounds
            # (a cold desktop on a fresh machine), but every one answers.
            for t in range(40):
                _, _, _, trunc, info = pool.recv()
                got = [int(i) for i in info["env_id"]]
                assert len(got) == 2 and not trunc.any()
                ids.update(got)
                pool.send(moves(got, t), got)
                if ids == {0, 1, 2, 3}:
                    break
            assert ids == {0, 1, 2, 3}
            assert [c.capabilities().capacity.envs_in_use for c in pool.clients] == [2, 2]
        finally:
            pool.close()
    finally:
        for s in servers:
            s.stop()


def test_a_lost_server_truncates_its_envs_in_flight_and_they_move(tmp_path: pathlib.Path) -> None:
    servers = [Server("--max-envs", "4", "--idle-timeout-s", "0", "--data-dir", str(tmp_path / f"d{i}")) for i in range(2)]
    try:
        pool = deskgym.make_vec("click-target", 4, batch_size=4, address=[s.address for s in servers],
                                screen=(320, 240), seed=0, max_steps=10_000)
        try:
            pool.reset(seed=0)
            pool.step(moves([0, 1, 2, 3], 0))
            lost = [pool._where[i][0].client.address == servers[0].address for i in range(4)]
            assert lost == [True, True, False, False]
            servers[0].proc.kill()
            servers[0].proc.wait()
            _, _, _, trunc, info = pool.step(moves([0, 1, 2, 3], 1))
            order = np.argsort(info["env_id"])
            assert [bool(trunc[j]) for j in order] == lost
            assert {info["error"][j]["code"] for j in order[:2]} == {"UNAVAILABLE"}
            # Their next send resets them on the server that is left.
            _, r, _, trunc, info = pool.step(moves([0, 1, 2, 3], 2))
            assert not trunc.any() and "error" not in info
            assert {pool._where[i][0].client.address for i in range(4)} == {servers[1].address}
            assert pool.clients[1].capabilities().capacity.envs_in_use == 4
            for t in range(3, 6):
                _, _, _, trunc, _ = pool.step(moves([0, 1, 2, 3], t))
                assert not trunc.any()
        finally:
            pool.close()
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.stop()


def test_step_stream_answers_bad_requests_per_request_on_the_wire(address: str) -> None:
    from deskgym.actions import to_proto
    from deskgym.v1 import deskgym_pb2 as pb

    env = deskgym.make_vec("click-target", 1, address=address, screen=(320, 240), seed=0)
    try:
        env.reset(seed=0)
        env_id = env.env_ids[0]
        wait = pb.StepRequest(env_id=env_id, action=to_proto({"verb": "wait", "ms": 300}))
        reqs = [
            pb.StepStreamRequest(tag=1),  # neither step nor reset
            pb.StepStreamRequest(tag=2, step=pb.StepRequest(env_id="no-such-env", action=wait.action)),
            pb.StepStreamRequest(tag=3, step=pb.StepRequest(env_id=env_id, action=to_proto({"verb": "click", "x": 9999, "y": 1}))),
            pb.StepStreamRequest(tag=4, step=wait),
            pb.StepStreamRequest(tag=5, step=wait),  # the env is still busy with tag 4
        ]
        got = {r.tag: r for r in env.client._stub.StepStream(iter(reqs), timeout=60)}
        codes = {t: deskgym.errors.code_name(r.code) if r.code else "OK" for t, r in got.items()}
        assert codes == {1: "INVALID_ARGUMENT", 2: "NOT_FOUND", 3: "INVALID_ARGUMENT", 4: "OK", 5: "ABORTED"}, codes
        assert got[1].message.startswith("kind") and got[3].message.startswith("action.click.target.point_px")
        assert got[4].HasField("step")
    finally:
        env.close()
