"""Checkpoints, fork and the client-side frame cache, from Python."""

from __future__ import annotations

import numpy as np
import pytest

import deskgym

from conftest import find, parked

SMALL = (320, 240)


def typed_env(address: str) -> tuple[deskgym.DeskgymEnv, np.ndarray]:
    env = deskgym.make("type-word", address=address, screen=SMALL, max_steps=100)
    obs, _ = env.reset(seed=7)
    x, y = find(obs, (0xFC, 0xFC, 0xFC))
    env.step({"verb": "click", "x": x, "y": y})
    obs, *_ = env.step({"verb": "type_text", "text": "ab"})
    return env, obs


@pytest.mark.spec("aci:5.checkpoints")
def test_save_restore_round_trip(address: str) -> None:
    env, at_save = typed_env(address)
    try:
        cp = env.save()
        assert cp.step_index == 2 and cp.task == "type-word"
        changed, *_ = env.step({"verb": "type_text", "text": "zzz"})
        assert not np.array_equal(changed, at_save)
        obs, info = env.restore(cp)
        assert info["fidelity"] == "exact" and info["expected_hash"] == cp.frame_hash
        assert np.array_equal(obs, at_save) and info["step_index"] == 2
    finally:
        env.close()


@pytest.mark.spec("aci:5.checkpoints", "aci:4.not-modified")
def test_fork_replicas_are_exact_and_download_each_frame_once(address: str) -> None:
    env, at_save = typed_env(address)
    try:
        cp = env.save()
        vec = deskgym.fork(cp, 4)
        try:
            assert vec.fork_info["fidelity"] == ["exact"] * 4
            assert all(h == cp.frame_hash for h in vec.fork_info["frame_hash"])
            before = env.client.cache_stats()
            obs, rew, term, trunc, infos = vec.step([{"verb": "type_text", "text": "c"}] * 4)
            assert all(np.array_equal(obs[0], o) for o in obs[1:])
            # One replica carried the pixels; the other three came from the client cache.
            assert [s["frame_cached"] for s in vec.last_stats].count(True) == 3
            after = env.client.cache_stats()
            assert after.not_modified - before.not_modified >= 3
            assert after.bytes_saved > before.bytes_saved
        finally:
            vec.close()
    finally:
        env.close()


@pytest.mark.spec("aci:5.checkpoints")
def test_chained_saves_park_replicas_that_a_fork_takes_first(address: str) -> None:
    env, _ = typed_env(address)
    try:
        first = env.save(park=1)
        assert parked(env.client, first).parked == 1
        env.step({"verb": "type_text", "text": "c"})
        second = parked(env.client, env.save(park=1))
        # The first checkpoint's replica was advanced by the one step between.
        assert (second.parent_checkpoint_id, second.parked) == (first.checkpoint_id, 1)
        assert parked(env.client, first).parked == 0
        vec = deskgym.fork(second, 2)
        try:
            assert vec.fork_info["fidelity"] == ["exact"] * 2
            assert vec.fork_info["from_parked"] == 1
            # The parked replica replayed nothing; the other was rebuilt from a reset.
            assert vec.fork_info["replayed_from_step"] == [3, 0]
        finally:
            vec.close()
        # A Restore on the checkpoint's own pool takes a parked replica too, and says so.
        third = parked(env.client, env.save(park=1))
        env.step({"verb": "type_text", "text": "d"})
        _, info = env.restore(third)
        assert (info["fidelity"], info["left_at_step"], info["replayed_from_step"]) == ("exact", 0, 3)
        _, info = env.restore(first)  # nothing parked there any more: a replay from a reset
        assert (info["fidelity"], info["replayed_from_step"]) == ("exact", 0)
    finally:
        env.close()


def test_unchanged_screen_costs_no_pixels(address: str) -> None:
    env = deskgym.make("click-target", address=address, screen=SMALL)
    try:
        obs, info = env.reset(seed=1)
        assert env.last_stats["frame_cached"] is False
        obs2, _, _, _, info2 = env.step({"verb": "click", "x": 1, "y": 235})
        assert env.last_stats["frame_cached"] is True and info2["frame_hash"] == info["frame_hash"]
        assert np.array_equal(obs, obs2) and not np.shares_memory(obs, obs2)
    finally:
        env.close()


def test_fork_bad_input(address: str, client: deskgym.Client) -> None:
    env, _ = typed_env(address)
    other = deskgym.make("click-target", address=address, screen=SMALL)
    try:
        cp = env.save()
        with pytest.raises(deskgym.DeskgymError) as e:
            deskgym.fork(cp, 1000)
        assert e.value.code == "RESOURCE_EXHAUSTED"
        with pytest.raises(deskgym.DeskgymError) as e:
            other.restore(cp)
        assert e.value.code == "FAILED_PRECONDITION"
        with pytest.raises(deskgym.DeskgymError) as e:
            client.step(env.env_id, deskgym.to_proto({"verb": "noop"}), if_none_match=["zz"])
        assert e.value.code == "INVALID_ARGUMENT" and e.value.message.startswith("if_none_match[0]")
        assert [c.checkpoint_id for c in client.list_checkpoints(cp.pool_id)] == [cp.checkpoint_id]
        client.delete_checkpoint(cp)
        with pytest.raises(deskgym.DeskgymError) as e:
            deskgym.fork(cp, 1)
        assert e.value.code == "NOT_FOUND"
    finally:
        env.close()
        other.close()


def test_replicas_close_after_their_source_env(address: str) -> None:
    """A fork's replicas share the source env's client: closing the source first closes
    their pool with it, and closing the replicas after is quiet (the README's order)."""
    env = deskgym.make("type-word", address=address, screen=(320, 240), seed=0)
    env.reset()
    replicas = deskgym.fork(env.save(), 2)
    env.close()
    replicas.close()
