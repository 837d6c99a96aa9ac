"""The OpenEnv face driven by openenv-core's own client (`GenericEnvClient`, WebSocket
sessions) and its HTTP routes, against real desktops: rewards come from the desktop."""

from __future__ import annotations

import asyncio
import httpx
import pytest
from openenv import GenericEnvClient

import deskgym
from screens import frame_of, target


def test_a_session_resets_steps_and_earns_the_desktops_reward(openenv_url: str) -> None:
    async def run() -> None:
        async with GenericEnvClient(base_url=openenv_url) as env:
            r = await env.reset(seed=11)
            obs = r.observation
            assert (r.reward, r.done) == (None, False)
            assert obs["task"] == "click-target" and obs["instruction"] and (obs["width"], obs["height"]) == (320, 240)
            x, y = target(obs["screenshot"])
            # A miss (a corner far from the target), as a deskgym action dict: the desktop pays 0.
            far = (319 if x < 160 else 0, 239 if y < 120 else 40)
            r = await env.step({"action": {"verb": "click", "x": far[0], "y": far[1]}})
            assert (r.reward, r.done) == (0.0, False)
            # Text no grammar reads steps nothing and teaches.
            r = await env.step({"text": "I think I should click the red thing"})
            assert (r.reward, r.done) == (0.0, False) and "no action found" in r.observation["feedback"]
            assert r.observation["actions"] == [] and r.observation["step_index"] == 1
            # The model's text, in a grammar of deskgym.dialect: the hit pays 1 and ends it.
            r = await env.step({"text": f'<tool_call>{{"name": "click", "arguments": {{"x": {x}, "y": {y}}}}}</tool_call>'})
            assert (r.reward, r.done) == (1.0, True) and r.observation["ended"] == "success"
            assert r.observation["actions"] == [{"verb": "click", "x": x, "y": y}]
            state = await env.state()
            assert state["step_count"] == 3 and state["total_reward"] == 1.0 and state["task"] == "click-target"
            with pytest.raises(RuntimeError, match="episode is over"):
                await env.step({"text": "<click x='1' y='40'/>"})
            # Same seed, same episode: the next reset is the same screen.
            again = (await env.reset(seed=11)).observation
            assert again["frame_hash"] == obs["frame_hash"]

    asyncio.run(run())


def test_sessions_are_desktops_of_their_own(openenv_url: str) -> None:
    async def one(seed: int) -> tuple[str, str]:
        async with GenericEnvClient(base_url=openenv_url) as env:
            obs = (await env.reset(seed=seed)).observation
            return (await env.state())["env_id"], obs["frame_hash"]

    async def both() -> list[tuple[str, str]]:
        return list(await asyncio.gather(one(1), one(2)))

    (a, ha), (b, hb) = asyncio.run(both())
    assert a != b and ha != hb


def test_an_environment_error_is_an_error_not_a_zero(openenv_url: str, address: str) -> None:
    async def run() -> None:
        async with GenericEnvClient(base_url=openenv_url) as env:
            await env.reset(seed=3)
            # The desktop goes away under the session (as when a desktop crashes or is reaped).
            with deskgym.Client(address) as c:
                c.close_pool((await env.state())["pool_id"])
            with pytest.raises(RuntimeError, match="EXECUTION_ERROR"):
                await env.step({"action": {"verb": "click", "x": 10, "y": 50}})

    asyncio.run(run())


def test_the_http_routes_serve_schema_and_a_first_observation(openenv_url: str) -> None:
    with httpx.Client(base_url=openenv_url, timeout=60) as http:
        assert http.get("/health").json()["status"] == "healthy"
        schema = http.get("/schema").json()
        assert schema["action"]["required"] == ["text"] and "screenshot" in schema["observation"]["properties"]
        r = http.post("/reset", json={"seed": 5}).json()
        assert r["done"] is False and r["observation"]["instruction"]
        assert frame_of(r["observation"]["screenshot"]).shape == (240, 320, 3)
        # A bad action is refused by the typed action, before any desktop is touched.
        bad = http.post("/step", json={"action": {"text": "x", "action": {"verb": "noop"}}})
        assert bad.status_code == 422
