"""The SkyRL-gym face through skyrl-gym's own registry, `make` and step loop, against
real desktops."""

from __future__ import annotations

from typing import Any

import skyrl_gym

import deskgym
import deskgym.skyrl
from screens import SMALL, target


def image_of(message: dict[str, Any]) -> str:
    return next(p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url")


def test_registered_ids_make_envs_whose_rewards_come_from_the_desktop(address: str) -> None:
    assert {"deskgym/click-target", "deskgym/type-word"} <= set(skyrl_gym.registry)
    env = skyrl_gym.make("deskgym/click-target", env_config={"address": address, "screen": SMALL, "max_turns": 5},
                         extras={"seed": 11})
    try:
        prompt, meta = env.init([{"role": "system", "content": "Click what the task asks."}])
        assert prompt[0]["role"] == "system" and prompt[1]["role"] == "user" and meta["seed"] == 11
        assert "Task:" in prompt[1]["content"][0]["text"]
        x, y = target(image_of(prompt[1]))
        # Text no grammar reads: a teaching message, not a crash, and nothing stepped.
        out = env.step("the target is red")
        assert (out["reward"], out["done"]) == (0.0, False)
        assert out["metadata"]["feedback"] and out["metadata"]["actions"] == []
        assert "could not be read" in out["observations"][0]["content"][0]["text"]
        # A miss in OSWorld's pyautogui dialect.
        far = (319 if x < 160 else 0, 239 if y < 120 else 40)
        out = env.step(f"```python\npyautogui.click({far[0]}, {far[1]})\n```")
        assert (out["reward"], out["done"]) == (0.0, False) and out["metadata"]["step_index"] == 1
        # The hit, as UI-TARS writes it (0..1000 grid of the screenshot).
        gx, gy = round(x * 1000 / SMALL[0]), round(y * 1000 / SMALL[1])
        out = env.step(f"Thought: the red target.\nAction: click(start_box='({gx},{gy})')")
        assert (out["reward"], out["done"]) == (1.0, True) and out["metadata"]["ended"] == "success"
        assert out["metadata"]["invalid"] is False and env.get_metrics()["total_reward"] == 1.0
    finally:
        env.close()


def test_the_turn_bound_ends_an_episode(address: str) -> None:
    env = skyrl_gym.make("deskgym/click-target", env_config={"address": address, "screen": SMALL, "max_turns": 2},
                         extras={"seed": 3})
    try:
        env.init([])
        assert env.step("<click x='0' y='40'/>")["done"] is False
        out = env.step("<click x='0' y='40'/>")
        assert out["done"] is True and out["reward"] == 0.0 and out["metadata"]["invalid"] is False
    finally:
        env.close()


def test_a_desktop_failure_is_flagged_invalid(address: str) -> None:
    env = skyrl_gym.make("deskgym/click-target", env_config={"address": address, "screen": SMALL}, extras={"seed": 3})
    try:
        env.init([])
        with deskgym.Client(address) as c:
            c.close_pool(env.env.pool_id)   # the desktop goes away under the episode
        out = env.step("<click x='10' y='50'/>")
        assert out["done"] is True and out["metadata"]["invalid"] is True
        assert out["metadata"]["error"].startswith("NOT_FOUND")
    finally:
        env.close()
