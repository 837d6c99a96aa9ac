"""The Gymnasium Env: checker, determinism, actions in dict form, registration."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import deskgym

from conftest import RED, find

SMALL = (320, 240)


def test_check_env_passes(address: str) -> None:
    # Timing fields are measured, so they differ between identical runs.
    env = deskgym.make("click-target", address=address, screen=SMALL, max_steps=5, info_timing=False)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()


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
