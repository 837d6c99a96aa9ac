"""The Gymnasium Env: checker, determinism, actions in dict form, registration."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import deskgym

from conftest import RED, find

SMALL = (320, 240)


@pytest.mark.spec("aci:6.adapters")
def test_check_env_passes_on_a_default_env(address: str) -> None:
    # No extra arguments: measured timings live in last_stats, not in infos.
    env = deskgym.make("click-target", address=address, screen=SMALL)
    try:
        check_env(env, skip_render_check=True)
        assert {"settle_ms", "latency_ms", "frame_cached"} <= env.last_stats.keys()
    finally:
        env.close()
    env = gym.make("deskgym/ClickTarget-v0", address=address, screen=SMALL)
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


@pytest.mark.parametrize("mode", ["click_grid", "pointer", "multi_discrete"])
def test_rl_action_modes_pass_the_checker_and_act(address: str, mode: str) -> None:
    env = deskgym.make("click-target", address=address, screen=SMALL, action_mode=mode, obs_format="float32_chw")
    try:
        check_env(env, skip_render_check=True)
        assert env.observation_space.shape == (3, 240, 320)
        obs, _ = env.reset(seed=3)
        assert obs.dtype == np.float32 and 0.0 <= obs.min() and obs.max() <= 1.0
        env.action_space.seed(0)
        for _ in range(5):
            obs, _, term, trunc, _ = env.step(env.action_space.sample())
            assert obs in env.observation_space
            if term or trunc:
                env.reset()
    finally:
        env.close()


def test_click_grid_reaches_the_target(address: str) -> None:
    env = deskgym.make("click-target", address=address, screen=SMALL, action_mode="click_grid", grid=(320, 240))
    try:
        obs, _ = env.reset(seed=11)
        x, y = find(obs, RED)
        # A 1-pixel grid: cell index = y * cols + x clicks exactly (x, y).
        _, reward, terminated, _, info = env.step(y * 320 + x)
        assert (reward, terminated) == (1.0, True) and info["pointer"] == (x, y)
    finally:
        env.close()


def test_single_envs_and_make_vec_play_the_same_episodes(address: str) -> None:
    singles = gym.vector.SyncVectorEnv(
        [lambda: deskgym.make("click-target", address=address, screen=SMALL, max_steps=1, action_mode="click_grid")
         for _ in range(2)]
    )
    vec = deskgym.make_vec("click-target", 2, address=address, screen=SMALL, max_steps=1, action_mode="click_grid")
    try:
        _, a = singles.reset(seed=7)
        _, b = vec.reset(seed=7)
        seeds_a, seeds_b = [list(a["seed"])], [list(b["seed"])]
        for _ in range(4):  # each step ends an episode; the next one autoresets
            for _ in range(2):
                # A click in the top-left cell's centre, on both sides.
                _, _, _, _, a = singles.step(np.array([0, 0]))
                _, _, _, _, b = vec.step(np.array([0, 0]))
            seeds_a.append(list(a["seed"]))
            seeds_b.append(list(b["seed"]))
        assert seeds_a == seeds_b
        flat = [s for row in seeds_a for s in row]
        assert len(set(flat)) == len(flat), "no episode seed repeats across envs"
        assert seeds_a[1] == [deskgym.episode_seed(7, 1), deskgym.episode_seed(8, 1)]
    finally:
        singles.close()
        vec.close()


def test_an_unseeded_env_does_not_replay_another(address: str) -> None:
    a = deskgym.make("click-target", address=address, screen=SMALL)
    b = deskgym.make("click-target", address=address, screen=SMALL)
    try:
        assert a.reset()[1]["seed"] != b.reset()[1]["seed"]
    finally:
        a.close()
        b.close()


def test_gymnasium_registration(address: str) -> None:
    env = gym.make("deskgym/ClickButton-v0", address=address, screen=SMALL)
    try:
        obs, info = env.reset(seed=4)
        assert obs.shape == (240, 320, 3) and obs.dtype == np.uint8
        assert info["task"] == "click-button" and "labelled" in info["instruction"]
    finally:
        env.close()


def test_seeded_resets_are_deterministic_and_clicks_pay(address: str) -> None:
    a = deskgym.make("click-target", address=address, screen=SMALL)
    b = deskgym.make("click-target", address=address, screen=SMALL)
    try:
        oa, ia = a.reset(seed=11)
        ob, ib = b.reset(seed=11)
        assert ia["frame_hash"] == ib["frame_hash"] and np.array_equal(oa, ob)
        assert len(ia["frame_hash"]) == 32
        _, ic = b.reset(seed=12)
        assert ic["frame_hash"] != ia["frame_hash"]
        x, y = find(oa, RED)
        obs, reward, terminated, truncated, info = a.step({"verb": "click", "x": x, "y": y})
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["pointer"] == (x, y) and info["step_index"] == 1
        # Normalised coordinates reach the same target.
        a.reset(seed=11)
        _, reward, terminated, _, _ = a.step({"verb": "click", "nx": x / 319, "ny": y / 239})
        assert reward == 1.0 and terminated
    finally:
        a.close()
        b.close()


def test_every_dict_form_is_accepted(address: str) -> None:
    env = deskgym.make("type-word", address=address, screen=SMALL, max_steps=50)
    try:
        obs, info = env.reset(seed=2)
        word = info["instruction"].split('"')[1]
        for action in [
            {"verb": "move", "x": 5, "y": 50},
            {"verb": "scroll", "x": 5, "y": 50, "dx": 0, "dy": 2},
            {"verb": "double_click", "x": 5, "y": 50},
            {"verb": "right_click", "nx": 0.1, "ny": 0.9},
            {"verb": "mouse_down", "x": 5, "y": 60, "button": "left"},
            {"verb": "mouse_up"},
            {"verb": "drag", "x": 5, "y": 60, "to_x": 20, "to_y": 70},
            {"verb": "wait", "ms": 5},
            {"verb": "noop"},
            {"verb": "key", "keys": "Escape"},
        ]:
            _, reward, terminated, _, _ = env.step(action)
            assert reward == 0.0 and not terminated, action
        fx, fy = find(obs, (0xFC, 0xFC, 0xFC))
        env.step({"verb": "click", "x": fx, "y": fy})
        env.step({"verb": "type_text", "text": word})
        _, reward, terminated, _, _ = env.step({"verb": "key", "keys": "Return"})
        assert reward == 1.0 and terminated
    finally:
        env.close()


@pytest.mark.parametrize("obs_type,magic", [("png", b"\x89PNG"), ("jpeg", b"\xff\xd8")])
def test_encoded_observations(address: str, obs_type: str, magic: bytes) -> None:
    env = deskgym.make("drag-to-zone", address=address, screen=SMALL, obs_type=obs_type, render_mode="rgb_array")
    try:
        obs, info = env.reset(seed=1)
        assert isinstance(obs, bytes) and obs.startswith(magic)
        assert obs in env.observation_space
        assert env.render().shape == (240, 320, 3)
    finally:
        env.close()


def test_space_samples_are_valid_actions(address: str) -> None:
    env = deskgym.make("click-button", address=address, screen=SMALL, max_steps=1000)
    try:
        env.reset(seed=0)
        env.action_space.seed(0)
        for _ in range(30):
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            if terminated or truncated:
                env.reset()
    finally:
        env.close()


def test_close_releases_the_desktop(address: str, client: deskgym.Client) -> None:
    env = deskgym.make("click-target", address=address, screen=SMALL)
    env_id = env.env_id
    env.close()
    env.close()
    with pytest.raises(deskgym.DeskgymError) as e:
        client.reset(env_id)
    assert e.value.code == "NOT_FOUND"


def test_gymnasium_makes_an_id_without_importing_deskgym_first(address: str) -> None:
    """The README's ``gym.make("deskgym:deskgym/ClickTarget-v0")`` in a fresh
    interpreter that never imported deskgym (Gymnasium's documented "module:id" form)."""
    import subprocess
    import sys

    code = (
        "import sys, gymnasium as gym\n"
        "assert 'deskgym' not in sys.modules\n"
        "env = gym.make('deskgym:deskgym/ClickTarget-v0', address=sys.argv[1], screen=(320, 240))\n"
        "obs, _ = env.reset(seed=0)\n"
        "print(obs.shape)\n"
        "env.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "(240, 320, 3)", out.stdout
