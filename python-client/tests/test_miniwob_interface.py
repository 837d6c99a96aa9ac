"""MiniWoB++'s own interface on deskgym (`deskgym/miniwob-<name>-v0`): the same agent code
runs on MiniWoB++'s own environment and on deskgym with the same seeds, and sees the
same observations, rewards and episode ends. Real server, real sandboxed Chromium,
MiniWoB++'s own Selenium environment beside it."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import deskgym
from deskgym.registration import miniwob_dir

from conftest import Server, miniwob_env

pytestmark = pytest.mark.skipif(
    miniwob_dir() is None or shutil.which("chromium") is None or shutil.which("chromedriver") is None,
    reason="needs the miniwob package, Chromium and Debian's chromium-driver (scripts/test.sh installs them)",
)


# The agent: code written against MiniWoB++ alone (its observation keys, its
# `create_action` and `ActionTypes`), one plan per task, t the step within the episode.

def agent(env: gym.Env, task: str, obs: dict[str, Any], t: int) -> Any:
    from miniwob.action import ActionTypes

    els, fields = obs["dom_elements"], dict(obs["fields"])
    act = env.unwrapped.create_action  # type: ignore[attr-defined]

    def find(pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        return next(e for e in els if pred(e))

    def centre(e: dict[str, Any]) -> np.ndarray:
        return np.array([e["left"][0] + e["width"][0] // 2, e["top"][0] + e["height"][0] // 2], dtype=np.float32)

    def submit(text: str) -> Any:
        return act(ActionTypes.CLICK_COORDS, coords=centre(find(lambda e: e["tag"] == "button" and e["text"] == text)))

    if task == "click-button":
        return act(ActionTypes.CLICK_ELEMENT, ref=find(lambda e: e["tag"] == "button" and e["text"] == fields["target"])["ref"])
    if task == "enter-text":
        word = fields["target"]
        box = find(lambda e: e["tag"] == "input_text")
        steps = [
            act(ActionTypes.CLICK_ELEMENT, ref=box["ref"]),
            act(ActionTypes.TYPE_TEXT, text=word[:-1]),
            # The last letter as a key press (letters are in MiniWoB++'s allowed keys).
            act(ActionTypes.PRESS_KEY, key=env.unwrapped.action_space_config.allowed_keys.index(word[-1])),  # type: ignore[attr-defined]
        ]
        return steps[t] if t < len(steps) else submit("Submit")
    if task == "login-user":
        keys = [k for k, _ in obs["fields"]]
        steps = [
            act(ActionTypes.FOCUS_ELEMENT_AND_TYPE_FIELD, ref=find(lambda e: e["tag"] == "input_text")["ref"],
                field=keys.index("username")),
            act(ActionTypes.FOCUS_ELEMENT_AND_TYPE_FIELD, ref=find(lambda e: e["tag"] == "input_password")["ref"],
                field=keys.index("password")),
        ]
        return steps[t] if t < len(steps) else submit("Login")
    if task == "click-checkboxes":
        # Tick every box but the last wanted one: a wrong answer, partly right.
        wanted = [v for k, v in obs["fields"] if k.startswith("target")][:-1]
        if t < len(wanted):
            label = find(lambda e: e["tag"] == "t" and e["text"] == wanted[t])
            box = find(lambda e: e["tag"] == "input_checkbox" and e["parent"] == label["parent"])
            return act(ActionTypes.CLICK_COORDS, coords=centre(box))
        return submit("Submit")
    raise AssertionError(task)


def same_observation(ours: dict[str, Any], theirs: dict[str, Any], where: Any,
                     pointer: tuple[int, int] | None = None) -> None:
    """Equal observations. ``pointer``: where the last pointer action left the mouse; the
    element under it may differ in pixels only (headless Chromium, MiniWoB++'s own, keeps
    the element's ``:hover`` state but paints form controls without their hover shade)."""
    assert sorted(ours) == sorted(theirs) == ["dom_elements", "fields", "screenshot", "utterance"]
    assert ours["utterance"] == theirs["utterance"], where
    assert ours["fields"] == theirs["fields"], where
    assert len(ours["dom_elements"]) == len(theirs["dom_elements"]), where
    for a, b in zip(ours["dom_elements"], theirs["dom_elements"]):
        assert sorted(a) == sorted(b), where
        for k in a:
            if a["tag"] == "body" and k == "width":
                # The window: MiniWoB++'s 500 here, headless Selenium's 780 there.
                continue
            assert np.array_equal(np.asarray(a[k]), np.asarray(b[k])), (where, a["ref"], a["tag"], k, a[k], b[k])
    assert ours["screenshot"].dtype == theirs["screenshot"].dtype == np.uint8
    diff = (ours["screenshot"] != theirs["screenshot"]).any(axis=2)
    if pointer is not None:
        px, py = pointer
        under = [e for e in ours["dom_elements"] if e["ref"] > 0 and e["tag"].startswith(("input", "button", "select"))
                 and e["left"][0] <= px < e["left"][0] + e["width"][0] and e["top"][0] <= py < e["top"][0] + e["height"][0]]
        for e in under:
            x, y = int(e["left"][0]), int(e["top"][0])
            diff[max(y - 1, 0):y + int(e["height"][0]) + 1, max(x - 1, 0):x + int(e["width"][0]) + 1] = False
    ys, xs = np.nonzero(diff)
    assert not diff.any(), (where, "screenshot", int(diff.sum()), (ys.min(), ys.max(), xs.min(), xs.max()) if diff.any() else None)


TASKS = ("click-button", "enter-text", "login-user", "click-checkboxes")


def test_the_same_agent_on_both_sees_the_same(mw: Server) -> None:
    from miniwob.action import ActionTypes
    from miniwob.reward import get_raw_reward

    for task in TASKS:
        # The raw reward: MiniWoB++'s own discounts by wall time, deskgym's by steps.
        ours = gym.make(f"deskgym/miniwob-{task}-v0", address=mw.address, reward_processor=get_raw_reward)
        theirs = miniwob_env(task, reward_processor=get_raw_reward)
        try:
            assert ours.observation_space == theirs.observation_space
            assert ours.action_space == theirs.action_space
            for seed in (3, 11):
                o_obs, o_info = ours.reset(seed=seed)
                t_obs, t_info = theirs.reset(seed=seed)
                same_observation(o_obs, t_obs, (task, seed, "reset"))
                assert o_info["done"] is False and t_info["done"] is False
                pointer = None
                for t in range(6):
                    o_act, t_act = agent(ours, task, o_obs, t), agent(theirs, task, t_obs, t)
                    kind = ours.unwrapped.action_space_config.action_types[o_act["action_type"]]  # type: ignore[attr-defined]
                    if kind == ActionTypes.CLICK_COORDS:
                        pointer = (int(o_act["coords"][0]), int(o_act["coords"][1]))
                    o_obs, o_r, o_term, o_trunc, o_info = ours.step(o_act)
                    t_obs, t_r, t_term, t_trunc, t_info = theirs.step(t_act)
                    where = (task, seed, t)
                    same_observation(o_obs, t_obs, where, pointer)
                    assert (o_r, o_term, o_trunc) == (t_r, t_term, t_trunc), where
                    assert isinstance(o_r, float) and isinstance(o_info["raw_reward"], float)
                    assert (o_info["raw_reward"], o_info["done"], o_info["reason"]) == (
                        t_info["raw_reward"], t_info["done"], t_info["reason"]), where
                    if o_term:
                        break
                assert o_term, (task, seed, "the episode should have ended")
                if task == "click-checkboxes":
                    assert 0 < o_r < 1 or o_r == -1, o_r
                else:
                    assert o_r == 1.0
        finally:
            ours.close()
            theirs.close()


def test_random_actions_land_the_same(mw: Server) -> None:
    """Sampled coordinate clicks, element clicks and key presses, the same on both."""
    from miniwob.action import ActionTypes

    ours = gym.make("deskgym/miniwob-click-checkboxes-v0", address=mw.address)
    theirs = miniwob_env("click-checkboxes")
    try:
        rng = np.random.default_rng(7)
        o_obs, _ = ours.reset(seed=5)
        t_obs, _ = theirs.reset(seed=5)
        kinds = [ActionTypes.CLICK_COORDS, ActionTypes.CLICK_ELEMENT, ActionTypes.PRESS_KEY]
        pointer, ends = None, 0
        for t in range(40):
            kind = kinds[int(rng.integers(len(kinds)))]
            kw: dict[str, Any] = {}
            if kind == ActionTypes.CLICK_COORDS:
                # Whole pixels: Selenium's float lands within the same one.
                kw["coords"] = np.array([rng.integers(160), rng.integers(210)], dtype=np.float32)
                pointer = (int(kw["coords"][0]), int(kw["coords"][1]))
            elif kind == ActionTypes.CLICK_ELEMENT:
                kw["ref"] = int(rng.choice([e["ref"] for e in o_obs["dom_elements"] if e["ref"] > 0]))
            else:
                kw["key"] = int(rng.integers(len(ours.unwrapped.action_space_config.allowed_keys)))  # type: ignore[attr-defined]
            a = ours.unwrapped.create_action(kind, **kw)  # type: ignore[attr-defined]
            o_obs, o_r, o_term, _, _ = ours.step(a)
            t_obs, t_r, t_term, _, _ = theirs.step(a)
            same_observation(o_obs, t_obs, (t, kind, kw), pointer)
            assert o_term == t_term and (o_r > 0) == (t_r > 0), (t, kind, kw)
            if o_term:
                o_obs, _ = ours.reset(seed=6 + t)
                t_obs, _ = theirs.reset(seed=6 + t)
                same_observation(o_obs, t_obs, (t, "reset"))
                ends += 1
        # Random clicks do end episodes here (Submit is large): the resets were compared.
        assert ends >= 1
    finally:
        ours.close()
        theirs.close()


def test_miniwobs_own_example_runs_by_changing_the_id(mw: Server, monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """MiniWoB++'s README example, as written there but for the id (and its sleeps)."""
    monkeypatch.setenv("DESKGYM_ADDRESS", mw.address)
    import gymnasium
    from miniwob.action import ActionTypes

    env = gymnasium.make("deskgym/miniwob-click-test-2-v0", render_mode="human")
    try:
        observation, info = env.reset(seed=42)
        for _ in range(5):
            assert observation["utterance"] == "Click button ONE."
            assert observation["fields"] == (("target", "ONE"),)
            for element in observation["dom_elements"]:
                if element["text"] == "ONE":
                    break
            action = env.unwrapped.create_action(ActionTypes.CLICK_ELEMENT, ref=element["ref"])  # type: ignore[attr-defined]
            observation, reward, terminated, truncated, info = env.step(action)
            assert terminated is True and reward > 0.9
            observation, info = env.reset()
    finally:
        env.close()
    # `human` opens no window here, and says so.
    assert any("no window opens" in r.getMessage() for r in caplog.records)


def test_a_finished_episode_acts_no_more_and_bad_settings_say_why(mw: Server, caplog: pytest.LogCaptureFixture) -> None:
    from miniwob.action import ActionTypes

    env = gym.make("deskgym/miniwob-click-test-2-v0", address=mw.address)
    try:
        obs, _ = env.reset(seed=1)
        one = next(e for e in obs["dom_elements"] if e["text"] == "ONE")
        click = env.unwrapped.create_action(ActionTypes.CLICK_ELEMENT, ref=one["ref"])  # type: ignore[attr-defined]
        _, r1, term, _, _ = env.step(click)
        assert term
        with caplog.at_level(logging.WARNING):
            obs, r2, term, _, info = env.step(click)
        # As MiniWoB++'s own: the empty observation, the same reward, still done.
        assert term and r2 == r1 and info["done"] is True
        assert obs["utterance"] == "" and obs["dom_elements"] == () and not obs["screenshot"].any()
        assert any("already done" in r.getMessage() for r in caplog.records)
        # A ref no element has: logged and skipped, as MiniWoB++'s failed click.
        env.reset(seed=2)
        _, r, term, _, _ = env.step(env.unwrapped.create_action(ActionTypes.CLICK_ELEMENT, ref=9999))  # type: ignore[attr-defined]
        assert not term and r == 0.0
        with pytest.raises(deskgym.DeskgymError) as e:
            env.unwrapped.visualize_attention(np.zeros((2, 2)))  # type: ignore[attr-defined]
        assert e.value.code == "UNIMPLEMENTED"
    finally:
        env.close()
    with pytest.raises(deskgym.DeskgymError) as e:
        gym.make("deskgym/miniwob-click-test-2-v0", address=mw.address, base_url="http://localhost:8000/miniwob/")
    assert "--miniwob-dir" in e.value.message
    with pytest.raises(deskgym.DeskgymError) as e:
        gym.make("deskgym/miniwob-click-test-2-v0", address=mw.address, render_mode="window")
    assert e.value.code == "INVALID_ARGUMENT"


def test_every_key_miniwob_allows_has_a_chord() -> None:
    from miniwob.constants import DEFAULT_ALLOWED_KEYS, DEFAULT_ALLOWED_KEYS_MAC_OS

    from deskgym.miniwob_env import key_chord

    for k in set(DEFAULT_ALLOWED_KEYS) | set(DEFAULT_ALLOWED_KEYS_MAC_OS):
        assert key_chord(k), k
    assert key_chord("C-c") == "ctrl+c" and key_chord("S-<Tab>") == "shift+Tab"
    assert key_chord("<Enter>") == "Return" and key_chord("+") == "plus" and key_chord("M-A-=") == "super+alt+equal"
    with pytest.raises(deskgym.DeskgymError) as e:
        key_chord("<ZenkakuHankaku>")
    assert e.value.code == "INVALID_ARGUMENT" and "ZenkakuHankaku" in e.value.message
