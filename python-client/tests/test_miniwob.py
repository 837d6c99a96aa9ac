"""MiniWoB++ on deskgym (`miniwob/<name>`), against a real server, real sandboxed
Chromium, and MiniWoB++'s own Selenium environment side by side."""

from __future__ import annotations

import os
import pathlib
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

import deskgym
from deskgym.actions import to_proto
from deskgym.miniwob import ORACLE_TASKS, as_actions, plan
from deskgym.registration import miniwob_dir, miniwob_names
from deskgym.v1 import deskgym_pb2 as pb

from conftest import REPO, Server, fork_exactly, miniwob_env

MINIWOB = miniwob_dir()
pytestmark = pytest.mark.skipif(
    MINIWOB is None or shutil.which("chromium") is None,
    reason="needs the miniwob package and Chromium (scripts/test.sh installs both)",
)


def solve(env: deskgym.DeskgymEnv, task: str, seed: int) -> dict[str, Any]:
    obs, info = env.reset(seed=seed)
    assert env.last_tree is not None
    for a in as_actions(plan(task, info["instruction"], env.last_tree.elements)):
        obs, reward, terminated, truncated, info = env.step(a)
    info["reward"] = reward
    info["terminated"] = terminated
    return info


def test_every_page_of_the_package_is_a_task(mw: Server) -> None:
    caps = deskgym.Client(mw.address).capabilities()
    listed = sorted(t.id.removeprefix("miniwob/") for t in caps.tasks if t.id.startswith("miniwob/"))
    assert listed == miniwob_names() and len(listed) >= 100
    # And a Gymnasium id for each.
    assert "deskgym/miniwob-click-button-v0" in gym.registry


def test_unknown_name_lists_close_names(mw: Server) -> None:
    with pytest.raises(deskgym.DeskgymError) as e:
        deskgym.make("miniwob/click-buton", address=mw.address)
    assert e.value.code == "INVALID_ARGUMENT" and e.value.field == "task"
    assert "did you mean miniwob/click-button" in e.value.message
    # The 130 pages are counted, not listed.
    assert "miniwob/use-autocomplete" not in e.value.message


@pytest.mark.parametrize(
    ("options", "field"),
    [({"reward": "sum"}, "task_options.reward"), ({"clock": "fast"}, "task_options.clock"),
     ({"step_ms": "-1"}, "task_options.step_ms"),
     ({"reload": "sometimes"}, "task_options.reload"), ({"colour": "red"}, 'task_options."colour"')],
)
def test_bad_task_options_say_which(mw: Server, options: dict[str, str], field: str) -> None:
    with pytest.raises(deskgym.DeskgymError) as e:
        deskgym.make("miniwob/click-button", address=mw.address, task_options=options)
    assert e.value.code == "INVALID_ARGUMENT" and e.value.field == field, e.value


def test_oracle_solves_ten_tasks_on_twenty_seeds_and_random_clicks_do_not(mw: Server) -> None:
    rng = random.Random(0)
    random_wins = 0
    for task in ORACLE_TASKS:
        env = deskgym.make(f"miniwob/{task}", address=mw.address, obs_type="rgb+a11y")
        try:
            assert env.observation_space["pixels"].shape == (210, 160, 3)
            for seed in range(20):
                info = solve(env, task, seed)
                assert info["terminated"] and info["raw_reward"] == "1", (task, seed, info)
                assert info["settle_policy"] == "browser"
                # MiniWoB's default processor: the time-discounted reward, here on the
                # step clock (100 ms a step).
                assert 0.9 < info["reward"] <= 1.0
            for seed in range(20):
                env.reset(seed=seed)
                for _ in range(4):
                    *_, term, _, info = env.step({"verb": "click", "x": rng.randrange(160), "y": rng.randrange(50, 210)})
                    if term:
                        break
                random_wins += info["raw_reward"] == "1"
        finally:
            env.close()
    assert random_wins < len(ORACLE_TASKS) * 20 // 4, random_wins


@pytest.mark.skipif(shutil.which("chromedriver") is None, reason="needs Debian's chromium-driver")
def test_same_seed_and_actions_as_miniwobs_own_environment(mw: Server) -> None:
    from miniwob.action import ActionTypes

    for task in ORACLE_TASKS:
        ours = deskgym.make(f"miniwob/{task}", address=mw.address, obs_type="rgb+a11y")
        theirs = miniwob_env(task)
        try:
            for seed in (3, 11):
                o_obs, o_info = ours.reset(seed=seed)
                t_obs, t_info = theirs.reset(seed=seed)
                assert o_info["instruction"] == t_obs["utterance"], (task, seed)
                assert ours.last_tree is not None
                steps = plan(task, o_info["instruction"], ours.last_tree.elements)
                # A wrong answer too, where one exists: both must score it the same.
                wrong = [s for s in steps if s[0] == "click"][:1] if task == "click-checkboxes" else []
                for kind, arg in wrong or steps:
                    if kind == "click":
                        ours_a: dict[str, Any] = {"verb": "click", "x": arg[0], "y": arg[1]}
                        theirs_a = theirs.unwrapped.create_action(ActionTypes.CLICK_COORDS, coords=np.array(arg))
                    else:
                        ours_a = {"verb": "type_text", "text": arg}
                        theirs_a = theirs.unwrapped.create_action(ActionTypes.TYPE_TEXT, text=arg)
                    _, _, o_term, _, o_info = ours.step(ours_a)
                    _, _, t_term, _, t_info = theirs.step(theirs_a)
                    assert o_term == t_term, (task, seed, kind, arg)
                if wrong:
                    # Submit with one box ticked: both end, with the same partial score.
                    sub = [s for s in steps if s[0] == "click"][-1][1]
                    _, _, o_term, _, o_info = ours.step({"verb": "click", "x": sub[0], "y": sub[1]})
                    _, _, t_term, _, t_info = theirs.step(
                        theirs.unwrapped.create_action(ActionTypes.CLICK_COORDS, coords=np.array(sub)))
                assert float(o_info["raw_reward"]) == t_info["raw_reward"], (task, seed, o_info, t_info)
                assert (o_info["reason"] or None) == (t_info["reason"] or None) or task != "click-checkboxes"
        finally:
            ours.close()
            theirs.close()


def test_clock_and_reward_options(mw: Server) -> None:
    """Steps clock: the discount counts steps, never thinking time; the same episode
    twice scores the same. `reward=raw` drops the discount; `binary` gives +-1."""
    env = deskgym.make("miniwob/enter-text", address=mw.address, obs_type="rgb+a11y", task_options={"step_ms": 1000})
    try:
        a = solve(env, "enter-text", 5)
        b = solve(env, "enter-text", 5)
        # Three steps of 1000 ms of the 10 s episode.
        assert a["reward"] == b["reward"] == pytest.approx(0.7)
    finally:
        env.close()
    env = deskgym.make("miniwob/enter-text", address=mw.address, obs_type="rgb+a11y",
                       task_options={"reward": "raw", "reload": "always"})
    try:
        # A freshly loaded page shows the same episode as the reused one did.
        again = solve(env, "enter-text", 5)
        assert again["reward"] == 1.0 and again["instruction"] == a["instruction"]
    finally:
        env.close()
    env = deskgym.make("miniwob/click-button", address=mw.address, obs_type="rgb+a11y",
                       task_options={"reward": "binary", "step_ms": 2500})
    try:
        env.reset(seed=1)
        # Four steps that miss: the step clock's timeout ends the episode at 10 s.
        for i in range(4):
            *_, reward, term, trunc, info = env.step({"verb": "click", "x": 150, "y": 20})
        assert term and info["reason"] == "timed out" and reward == -1.0
    finally:
        env.close()


def test_fork_replays_to_the_same_frame(mw: Server) -> None:
    env = deskgym.make("miniwob/login-user", address=mw.address, obs_type="rgb+a11y")
    try:
        obs, info = env.reset(seed=2)
        assert env.last_tree is not None
        steps = as_actions(plan("login-user", info["instruction"], env.last_tree.elements))
        for a in steps[:2]:  # username typed, password field not yet
            obs, *_ = env.step(a)
        cp = env.save()
        vec = deskgym.fork(cp, 2)
        try:
            assert vec.fork_info["fidelity"] == ["exact", "exact"]
            rest = steps[2:]
            for a in rest:
                vobs, vrew, vterm, _, vinfo = vec.step([a, a])
                _, _, term, _, info = env.step(a)
            assert list(vterm) == [True, True] and term
            assert vinfo["raw_reward"][0] == vinfo["raw_reward"][1] == info["raw_reward"] == "1"
            assert np.array_equal(vobs[0], vobs[1])
        finally:
            vec.close()
    finally:
        env.close()


def test_a_fork_of_a_page_with_a_timer_holds_the_originals_text(mw: Server) -> None:
    """``terminal``, whose caret blinks on an 800 ms ``setInterval``, forked after
    commands typed one key a step: on the desktop clock a fork replays (decision 201)
    every replica shows the original's frame, blink phase included, and its page
    holds the original's text (issue 44)."""
    c = deskgym.Client(mw.address)
    pool = c.create_pool("miniwob/terminal", 1, max_steps=10**6)
    fork = None
    try:
        e = pool.env_ids[0]
        c.reset(e, seed=3)
        c.step(e, to_proto({"verb": "click", "x": 75, "y": 130}), encoding="png")  # the terminal takes keys
        for ch in "ls\nls\n":
            a = {"verb": "key", "keys": "Return"} if ch == "\n" else {"verb": "type_text", "text": ch}
            c.step(e, to_proto(a), encoding="png")
        fork = fork_exactly(c, e, still=False, clock=True)  # the original's caret blinks on

        def text(env: str) -> list[str]:
            """The page's text, without the caret: read later than the fork's frames, it
            shows or not by when each env is read (those frames compared its phase)."""
            tree = c.observe(env, encoding="png", tree=pb.TreeRequest(enabled=True)).tree
            return [el.name for el in tree.elements if el.name and el.name != "\u2588"]

        want = text(e)
        assert want.count("ls") == 2, want
        assert [text(r.env_id) for r in fork.replicas] == [want] * 2
    finally:
        if fork is not None:
            c.close_pool(fork.pool_id)
        c.close_pool(pool.pool_id)
        c.close()


def test_killed_browser_fails_its_env_only_and_reset_recovers(mw: Server) -> None:
    c = deskgym.Client(mw.address)
    vec = deskgym.make_vec("miniwob/click-button", 2, address=mw.address, capabilities=["exec"], seed=4)
    try:
        vec.reset()
        victim, neighbour = vec.env_ids
        c.exec(victim, "pkill -KILL -f chromium", shell=True)
        with pytest.raises(deskgym.DeskgymError) as e:
            c.step(victim, to_proto({"verb": "click", "x": 10, "y": 60}))
        assert e.value.code == "UNAVAILABLE", e.value
        c.step(neighbour, to_proto({"verb": "click", "x": 10, "y": 60}))
        r = c.reset(victim, seed=4)
        assert r.info.instruction.startswith("Click on the")
    finally:
        vec.close()


def test_a_page_that_never_becomes_ready_times_out(tmp_path: pathlib.Path) -> None:
    assert MINIWOB is not None
    # The sandbox's user must be able to read the pages (pytest's tmp is root's, 0700).
    root = pathlib.Path(tempfile.mkdtemp(dir=REPO / "target", prefix="never-ready-"))
    root.chmod(0o755)
    pages = root / "html" / "miniwob"
    pages.mkdir(parents=True)
    # A copy, not a symlink: the sandbox sees this html/ only (a link into a venv
    # under /tmp would point at the sandbox's own /tmp).
    shutil.copytree(pathlib.Path(MINIWOB) / "html" / "core", root / "html" / "core")
    (pages / "never-ready.html").write_text(
        '<html><head><script src="../core/core.js"></script>'
        '<link rel="stylesheet" href="../core/core.css">'
        "<script>var genProblem = function() { WOB_TASK_READY = false; };"
        "window.onload = function() { core.startEpisode(); };</script></head>"
        '<body><div id="wrap"><div id="query">Wait.</div><div id="area"></div></div></body></html>'
    )
    s = Server("--idle-timeout-s", "0", "--data-dir", str(tmp_path / "data"), "--miniwob-dir", str(root))
    try:
        env = deskgym.make("miniwob/never-ready", address=s.address, task_options={"ready_ms": 300})
        try:
            for _ in range(2):  # the desktop restarts, and times out again
                with pytest.raises(deskgym.DeskgymError) as e:
                    env.reset(seed=1)
                assert e.value.code == "DEADLINE_EXCEEDED" and "WOB_TASK_READY" in e.value.message
        finally:
            env.close()
    finally:
        s.stop()
        shutil.rmtree(root)


def test_click_by_ref_and_a_recorded_episode(mw: Server) -> None:
    """The page's elements take clicks by ref; the episode lands in the .skn bundle with
    its instruction and MiniWoB's (discounted) reward."""
    import deskgym.datasets as ds

    env = deskgym.make("miniwob/click-button", address=mw.address, obs_type="rgb+a11y",
                       record=f"mw-{os.getpid()}")
    try:
        obs, info = env.reset(seed=9)
        assert env.last_tree is not None
        want = info["instruction"].split('"')[1]
        button = env.last_tree.find(role="button", name=want)[0]
        obs, reward, term, _, info = env.step({"verb": "click", "ref": button.ref})
        assert term and info["raw_reward"] == "1" and reward == pytest.approx(0.99)
        path = env.recording_path
    finally:
        env.close()
    tables = ds.open(path)
    episodes = tables["episodes"].to_pylist()
    assert [e["instruction"] for e in episodes] == [info["instruction"]]
    assert tables["steps"].column("reward").to_pylist() == [pytest.approx(0.99)]


def test_a_step_observes_the_frame_the_page_settles_on(mw: Server) -> None:
    """The `browser` settle: the frame a reset or step returns is the one still on the
    screen a moment later (nothing of the page's answer was still being drawn)."""
    env = deskgym.make("miniwob/enter-text", address=mw.address, obs_type="rgb+a11y")
    try:
        compared = 0
        for seed in range(8):
            obs, info = env.reset(seed=seed)
            assert env.last_tree is not None
            frames = [obs["pixels"]]
            time.sleep(0.15)
            later = [env.observe()]
            for a in as_actions(plan("enter-text", info["instruction"], env.last_tree.elements)):
                obs, *_ = env.step(a)
                frames.append(obs["pixels"])
                time.sleep(0.15)
                later.append(env.observe())
            for i, (f, g) in enumerate(zip(frames, later)):
                assert np.array_equal(f, g), (seed, i, int((f != g).any(axis=2).sum()))
                compared += 1
        assert compared == 32
    finally:
        env.close()
