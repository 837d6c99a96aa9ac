"""The VectorEnv: one StepBatch per step, autoreset modes, partial resets, seeding."""

from __future__ import annotations

import numpy as np
import pytest

import deskgym
from deskgym.seeding import episode_seed

from conftest import RED, find, mp4_frames

SMALL = (320, 240)


def vec(address: str, n: int, **kw) -> deskgym.DeskgymVectorEnv:
    kw.setdefault("screen", SMALL)
    return deskgym.make_vec("click-target", n, address=address, **kw)


def noops(n: int) -> list[dict]:
    return [{"verb": "noop"}] * n


def test_step_is_one_rpc(address: str) -> None:
    env = vec(address, 3, max_steps=1)
    calls = []
    real = env.client.step_batch
    env.client.step_batch = lambda *a, **k: calls.append(1) or real(*a, **k)  # type: ignore[method-assign]
    try:
        env.reset(seed=0)
        for _ in range(3):  # steps that end episodes and steps that autoreset
            env.step(noops(3))
        assert len(calls) == 4
    finally:
        env.close()


def test_next_step_autoreset(address: str) -> None:
    env = vec(address, 2, max_steps=2, autoreset_mode="next_step")
    try:
        obs, info = env.reset(seed=5)
        assert obs.shape == (2, 240, 320, 3)
        hashes0 = info["frame_hash"].copy()
        env.step(noops(2))
        _, _, term, trunc, info = env.step(noops(2))
        assert trunc.all() and not term.any()
        obs, rew, term, trunc, info = env.step(noops(2))  # the reset step
        assert not trunc.any() and (rew == 0).all()
        assert (info["step_index"] == 0).all()
        # Autoreset continues each env's own sequence: base 5 + i, second episode.
        assert list(info["seed"]) == [episode_seed(5, 1), episode_seed(6, 1)]
        assert (info["frame_hash"] != hashes0).all()
    finally:
        env.close()


def test_same_step_autoreset_reports_final_obs(address: str) -> None:
    env = vec(address, 2, autoreset_mode="same_step")
    try:
        obs, _ = env.reset(seed=[3, 4])
        target = find(obs[0], RED)
        actions = [{"verb": "click", "x": target[0], "y": target[1]}, {"verb": "noop"}]
        obs2, rew, term, trunc, info = env.step(actions)
        assert rew.tolist() == [1.0, 0.0] and term.tolist() == [True, False]
        assert info["_final_obs"].tolist() == [True, False]
        assert np.array_equal(info["final_obs"][0], obs[0]), "the winning click changes no pixels"
        assert info["final_info"]["step_index"][0] == 1
        # Env 0 went on to its own next seed in the same call, not its neighbour's
        # (seed 4, which env 1 plays): no layout is played twice.
        assert info["seed"][0] == episode_seed(3, 1) != 4 and info["step_index"][0] == 0
        assert not np.array_equal(obs2[0], obs[1])
    finally:
        env.close()


def test_disabled_autoreset_and_reset_mask(address: str) -> None:
    env = vec(address, 3, max_steps=1, autoreset_mode="disabled")
    try:
        obs, info = env.reset(seed=10)
        _, _, _, trunc, _ = env.step(noops(3))
        assert trunc.all()
        # Ended envs wait for their reset: stepping them again neither raises nor acts.
        obs1, rew, term, trunc, info1 = env.step(noops(3))
        assert trunc.all() and not term.any() and (rew == 0).all()
        assert info1["episode_ended"].all() and np.array_equal(obs1, obs)
        mask = np.array([True, False, True])
        obs2, info2 = env.reset(seed=[20, None, 22], options={"reset_mask": mask})
        assert info2["_seed"].tolist() == [True, False, True]
        assert info2["seed"][0] == 20 and info2["seed"][2] == 22
        assert np.array_equal(obs2[1], obs[1]), "unmasked env keeps its observation"
    finally:
        env.close()


def test_the_readme_partial_reset_with_no_env_ended(address: str) -> None:
    """The README's loop: ``reset(options={"reset_mask": term | trunc})`` right after a
    step in which no episode ended resets nothing, sends nothing, and raises nothing."""
    env = vec(address, 3)
    calls = []
    real = env.client.step_batch
    env.client.step_batch = lambda *a, **k: calls.append(1) or real(*a, **k)  # type: ignore[method-assign]
    try:
        env.reset(seed=0)
        obs, _, term, trunc, _ = env.step(noops(3))
        assert not (term | trunc).any()
        obs2, infos = env.reset(options={"reset_mask": term | trunc})
        assert np.array_equal(obs2, obs) and infos == {}
        assert len(calls) == 2, "the empty reset sent an RPC"
    finally:
        env.close()


def test_seeding_is_deterministic_across_vector_envs(address: str) -> None:
    a, b = vec(address, 2), vec(address, 2)
    try:
        _, ia = a.reset(seed=42)
        _, ib = b.reset(seed=42)
        assert ia["frame_hash"].tolist() == ib["frame_hash"].tolist()
        assert ia["frame_hash"][0] != ia["frame_hash"][1], "env i gets seed + i"
        _, ic = b.reset(seed=43)
        assert ic["frame_hash"][0] == ia["frame_hash"][1]
    finally:
        a.close()
        b.close()


def test_space_samples_step(address: str) -> None:
    env = vec(address, 2, max_steps=3)
    try:
        env.reset(seed=0)
        env.action_space.seed(1)
        for _ in range(4):
            obs, *_ = env.step(env.action_space.sample())
            assert obs in env.observation_space
    finally:
        env.close()


def test_record_video_on_a_vector_env(address: str, tmp_path) -> None:
    """Gymnasium's own ``RecordVideo`` for vector envs: ``render()`` gives each env's
    screen, the wrapper tiles them; the video decodes to the tiled screens."""
    from gymnasium.wrappers.vector import RecordVideo

    env = RecordVideo(vec(address, 4, render_mode="rgb_array"), str(tmp_path / "videos"),
                      episode_trigger=lambda e: True, video_length=6, disable_logger=True)
    try:
        obs, _ = env.reset(seed=0)
        frames = env.env.render()
        assert len(frames) == 4 and all(np.array_equal(f, o) for f, o in zip(frames, obs))
        for _ in range(8):
            env.step([{"verb": "click", "x": 5, "y": 5}] * 4)
    finally:
        env.close()
    videos = sorted((tmp_path / "videos").glob("*.mp4"))
    assert videos, list(tmp_path.rglob("*"))
    first = mp4_frames(videos[0], tmp_path / "frames")[0].astype(np.int16)
    h, w = SMALL[1], SMALL[0]
    assert first.shape == (2 * h, 2 * w, 3), first.shape
    tiled = np.concatenate([np.concatenate(obs[:2], axis=1), np.concatenate(obs[2:], axis=1)], axis=0)
    off = float(np.abs(first - tiled.astype(np.int16)).mean())
    assert off < 0.1 * float(tiled.mean()), f"the video's first frame differs from the screens by {off:.1f}"
