"""Invalid is not zero (issue 42 item 8): one EpisodeResult for every harness, read from
a Gymnasium episode's info, an OSWorld runner's row or an exception; and a desktop that
dies under a DeskgymEnv episode ends it truncated and invalid, not scored 0."""

from __future__ import annotations

import os
import signal

import pytest

import deskgym
from deskgym.episode import EpisodeResult, cause_of_code, cause_of_text, result_of
from deskgym.osworld.outcomes import verdict

from test_client import _xvfb_pid


def test_an_invalid_result_has_no_reward_and_says_why() -> None:
    r = EpisodeResult.invalid("timeout", "ran past 600 s,\n at step 12")
    assert (r.status, r.ok, r.reward_or_none(), r.detail) == ("invalid", False, None, "ran past 600 s, at step 12")
    assert EpisodeResult.scored(0).reward_or_none() == 0.0, "a real 0 stays a 0"
    assert EpisodeResult.infeasible(1).ok and EpisodeResult.infeasible(1).reward_or_none() == 1.0
    for bad in (dict(status="invalid", reward=0.0, cause="crash"), dict(status="invalid", cause="oops"),
                dict(status="scored"), dict(status="scored", reward=1.0, cause="crash"), dict(status="zero", reward=0)):
        with pytest.raises(deskgym.DeskgymError) as e:
            EpisodeResult(**bad)  # type: ignore[arg-type]
        assert e.value.code == "INVALID_ARGUMENT", bad


def test_codes_stages_and_exceptions_map_to_causes() -> None:
    assert [cause_of_code(c) for c in ("DEADLINE_EXCEEDED", "UNAVAILABLE", "INTERNAL", "INVALID_ARGUMENT")] == [
        "timeout", "env_error", "env_error", "crash"]
    assert [cause_of_text(t) for t in ("setup: step 2 (execute): exit 1", "timeout: ran past 5 s",
                                       "evaluate: KeyError: 'x'", "no score", "agent: ValueError", "boom")] == [
        "setup_failure", "timeout", "evaluator_error", "evaluator_error", "crash", "crash"]
    unavailable = deskgym.DeskgymError("UNAVAILABLE", "desktop gone")
    assert EpisodeResult.from_exception(unavailable, "step").cause == "env_error"
    assert EpisodeResult.from_exception(unavailable, "evaluate").cause == "evaluator_error"
    assert EpisodeResult.from_exception(TimeoutError("late"), "evaluate").cause == "timeout"
    assert EpisodeResult.from_exception(RuntimeError("x"), "setup").cause == "setup_failure"
    assert EpisodeResult.from_exception(RuntimeError("x")).detail == "RuntimeError: x"


def test_result_of_reads_the_osworld_runners_rows() -> None:
    setup = [{"phase": "config", "step": 1, "type": "execute", "ran": "mkdir x", "ok": False, "exit_code": 1}]
    status, cause = verdict(True, setup, "", 0.0)
    row = {"status": status, "cause": cause, "score": None, "invalid_score": 0.0}
    r = result_of(row)
    assert (r.status, r.cause, r.reward_or_none()) == ("invalid", "setup_failure", None)
    assert r.detail.startswith("setup: step 1 (execute)")
    assert result_of({"status": "scored", "score": 0.0}) == EpisodeResult.scored(0.0)
    assert result_of({"status": "infeasible", "score": 1}) == EpisodeResult.infeasible(1.0)
    assert result_of({"status": "scored", "score": None}).cause == "evaluator_error"
    assert result_of(EpisodeResult.scored(1).to_dict()) == EpisodeResult.scored(1)


def test_result_of_a_gymnasium_info() -> None:
    assert result_of({"frame_hash": "ab", "ended": "success"}, reward=1.0) == EpisodeResult.scored(1.0)
    err = {"error": {"code": "UNAVAILABLE", "message": "gone"}}  # a fleet's info: no cause, its code's
    assert result_of(err, reward=0.0).cause == "env_error"
    with pytest.raises(deskgym.DeskgymError) as e:
        result_of({"frame_hash": "ab"})
    assert e.value.code == "INVALID_ARGUMENT" and "reward" in e.value.message


@pytest.mark.real
def test_a_desktop_that_dies_ends_the_episode_invalid(address: str) -> None:
    env = deskgym.make("click-target", address=address, seed=3, screen=(320, 240))
    try:
        obs, info = env.reset()
        os.kill(_xvfb_pid(_display(env)), signal.SIGKILL)
        total, truncated, n = 0.0, False, 0
        while not truncated and n < 20:  # the first step after the kill may still be drawn
            obs2, reward, terminated, truncated, info = env.step({"verb": "click", "x": 1, "y": 1})
            total += float(reward)
            n += 1
        assert truncated and info["error"]["cause"] == "env_error", info
        assert info["error"]["code"] in deskgym.errors.ENV_FAULTS
        r = result_of(info, reward=total)
        assert r.status == "invalid" and r.reward_or_none() is None, r
        # The next reset restarts the desktop, and its episodes score again.
        obs, info = env.reset(seed=3)
        assert "error" not in info and info["frame_hash"]
    finally:
        env.close()
    raising = deskgym.make("click-target", address=address, seed=3, screen=(320, 240), env_errors="raise")
    try:
        raising.reset()
        os.kill(_xvfb_pid(_display(raising)), signal.SIGKILL)
        with pytest.raises(deskgym.DeskgymError) as e:
            for _ in range(20):
                raising.step({"verb": "click", "x": 1, "y": 1})
        assert e.value.code in deskgym.errors.ENV_FAULTS
    finally:
        raising.close()
    with pytest.raises(deskgym.DeskgymError) as e:
        deskgym.make("click-target", address=address, env_errors="ignore")
    assert e.value.code == "INVALID_ARGUMENT"


def _display(env: deskgym.DeskgymEnv) -> int:
    """The X display of a `tasks` env (its reset info's extra, kept out of infos)."""
    r = env.client.reset(env.env_id, seed=3)
    return int(r.info.extra["display"].lstrip(":"))
