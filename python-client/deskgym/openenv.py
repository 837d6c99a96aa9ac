"""deskgym tasks as OpenEnv environments (``openenv-core`` 0.3): the typed action,
observation and state, an :class:`~openenv.core.env_server.interfaces.Environment` over
the sync client, and the app that serves it over HTTP and WebSocket sessions.

    python -m deskgym.openenv --task click-target --port 8000   # deskgym-server at $DESKGYM_ADDRESS

    from openenv import GenericEnvClient
    async with GenericEnvClient(base_url="http://127.0.0.1:8000") as env:
        r = await env.reset(seed=0)                 # r.observation["screenshot"]: base64 PNG
        r = await env.step({"text": "<click x='10' y='20'/>"})   # or {"action": {"verb": ...}}

deskgym-server stays the engine: each OpenEnv session is one desktop of it, made at the
session's first reset. An action is either the model's text (parsed by
:func:`deskgym.dialect.parse_actions`; text it cannot read comes back as ``feedback``
with no step taken) or one deskgym action dict. A failed call to the desktop (a crash,
a timeout) raises, which OpenEnv answers as an error: such a run is invalid, never a
reward of 0 (decision 181).
"""

from __future__ import annotations

import argparse
import base64
import json
import struct
import threading
from typing import Any

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from .client import Client, resolve_address
from .dialect import FORMATS
from .env import DeskgymEnv
from .turns import play

#: The default screen of served desktops: small enough for a VLM's context, big enough
#: for the bundled tasks and web pages.
DEFAULT_SCREEN = (640, 480)


class DeskgymAction(Action):  # type: ignore[misc]  # openenv-core is not in .venv (mypy's)
    """One model turn: ``text`` (a reply in any grammar of :mod:`deskgym.dialect`, all
    of its actions stepped in order) or ``action`` (one deskgym action dict,
    ``{"verb": "click", "x": .., "y": ..}``).

    ``text`` is the schema's one required field: frameworks that send a plain reply as
    the single required field (verifiers' OpenEnv taskset) put the model's text there. A
    message with ``action`` alone, or a bare action dict (``{"verb": ...}``, what a
    model writing JSON sends), is read as ``action``; any other dict is read as text,
    so the dialect's error explains it to the model."""

    text: str = Field(description="The model's reply, parsed by deskgym.dialect (empty when `action` is given)")
    action: dict[str, Any] | None = Field(default=None, description="One deskgym action dict, e.g. "
                                          '{"verb": "click", "x": 100, "y": 200}')
    format: str = Field(default="auto", description="The dialect grammar of `text`: " + ", ".join(FORMATS))

    @model_validator(mode="before")
    @classmethod
    def _shapes(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if set(data) <= {"text", "action", "format", "metadata"}:
            if "text" not in data and data.get("action") is not None:
                return {**data, "text": ""}
            return data
        if "verb" in data:
            return {"action": data, "text": ""}
        return {"text": json.dumps(data)}

    @model_validator(mode="after")
    def _one(self) -> DeskgymAction:
        # PydanticCustomError, not ValueError: OpenEnv puts the errors in its 422 answer as
        # JSON, and a ValueError inside them is not serialisable (the answer becomes a 500).
        if self.action is not None and self.text:
            raise PydanticCustomError("deskgym_action", "give `text` or `action`, not both")
        if self.action is None and not self.text.strip():
            raise PydanticCustomError(
                "deskgym_action", "an action needs `text` (the model's reply) or `action` (a deskgym action dict)")
        if self.format not in FORMATS:
            raise PydanticCustomError("deskgym_action", "format {format} is not one of {formats}",
                                      {"format": self.format, "formats": ", ".join(FORMATS)})
        return self


class DeskgymObservation(Observation):  # type: ignore[misc]
    """What the model sees after a reset or a step, with OpenEnv's ``reward`` (the
    step's, summed over a reply's actions) and ``done``. (OpenEnv does not send
    ``metadata`` to clients, so everything a client needs is a field.)"""

    screenshot: str = Field(description="The screen as a base64 PNG")
    width: int = Field(description="Screenshot width in pixels (the coordinate space of actions)")
    height: int = Field(description="Screenshot height in pixels")
    instruction: str = Field(description="What the task asks")
    task: str
    seed: int | None = Field(default=None, description="The episode's seed (the same seed replays it)")
    step_index: int = 0
    frame_hash: str = ""
    ended: str = Field(default="", description="How the episode ended: success, failure, max_steps (or empty)")
    feedback: str = Field(default="", description="Why the last text could not be read as actions (nothing "
                                                  "was stepped); what the model should write instead")
    actions: list[dict[str, Any]] = Field(default_factory=list, description="The actions the last turn stepped")


class DeskgymState(State):  # type: ignore[misc]
    """The session's episode: OpenEnv's ``episode_id`` and ``step_count`` (model turns),
    plus the desktop it runs on."""

    task: str = ""
    seed: int | None = None
    env_id: str = ""
    pool_id: str = ""
    total_reward: float = 0.0
    done: bool = False


_clients: dict[tuple[str, str | None], Client] = {}
_clients_lock = threading.Lock()


def shared_client(address: str | None = None, token: str | None = None) -> Client:
    """One sync :class:`deskgym.Client` per server address for this process: every
    session's desktop calls over its channel (and shares its frame cache and leases)."""
    key = (resolve_address(address), token)
    with _clients_lock:
        if key not in _clients:
            _clients[key] = Client(key[0], token=token)
        return _clients[key]


class DeskgymEnvironment(Environment[DeskgymAction, DeskgymObservation, DeskgymState]):  # type: ignore[misc]
    """One OpenEnv session over one desktop of a deskgym server.

    ``task``: the default task (``reset(task=...)`` switches, on a fresh desktop).
    ``format`` / ``coords``: how :func:`~deskgym.dialect.parse_actions` reads text
    (``coords`` in the screenshot's pixels unless the grammar points on a grid).
    ``make``: more keywords for :func:`deskgym.make` (``max_steps``, ``settle_ms``...).
    The desktop starts at the first reset (OpenEnv makes an instance per HTTP request
    too, for ``/state`` and ``/metadata``, which must not start desktops)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self, task: str = "click-target", *, address: str | None = None, token: str | None = None,
        screen: tuple[int, int] = DEFAULT_SCREEN, format: str = "auto", coords: str | None = None,
        **make: Any,
    ) -> None:
        super().__init__()
        self.task = task
        self.address, self.token, self.screen = address, token, screen
        self.format, self.coords = format, coords
        # None leaves the task's own default (an explicit None would be sent as a value).
        self.make_kwargs = {k: v for k, v in make.items() if v is not None}
        self._env: DeskgymEnv | None = None
        self._last_info: dict[str, Any] = {}
        self._state = DeskgymState(task=task)

    # OpenEnv calls these in the session's own thread (one call at a time per session).
    def reset(self, seed: int | None = None, episode_id: str | None = None, task: str | None = None,
              **kwargs: Any) -> DeskgymObservation:
        """Starts an episode (``seed``: the task's seed, as :meth:`deskgym.DeskgymEnv.reset`)."""
        task = task or self.task
        if self._env is not None and self._env.task != task:
            self._env.close()
            self._env = None
        if self._env is None:
            # env_errors="raise": a failed desktop is OpenEnv's error (invalid), not a
            # truncated episode whose reward would read as a 0.
            self._env = DeskgymEnv(task, client=shared_client(self.address, self.token), screen=self.screen,
                                   obs_type="png", env_errors="raise", **self.make_kwargs)
        png, info = self._env.reset(seed=seed)
        self._state = DeskgymState(episode_id=episode_id, task=task, seed=info.get("seed"), env_id=self._env.env_id,
                                   pool_id=self._env.pool_id)
        return self._observation(png, info, reward=None, done=False)

    def step(self, action: DeskgymAction, timeout_s: float | None = None, **kwargs: Any) -> DeskgymObservation:
        """Steps the action, or every action of the text in order until the episode ends.
        Text the dialect cannot read steps nothing: the observation repeats the screen with
        ``feedback`` (the :class:`~deskgym.dialect.DialectError`'s message) and reward 0,
        a turn the model learns from. Any other failure raises."""
        env = self._env
        if env is None:
            raise RuntimeError("step before reset: reset this session first")
        if self._state.done:
            raise RuntimeError("the episode is over: reset this session first")
        self._state.step_count += 1
        fmt = action.format if action.format != "auto" else self.format
        t = play(env, action.text, action=action.action, format=fmt, coords=self.coords, info=self._last_info)
        self._state.total_reward += t.reward
        self._state.done = t.done
        return self._observation(t.obs, t.info, reward=t.reward, done=t.done, feedback=t.feedback, actions=t.actions)

    @property
    def state(self) -> DeskgymState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="deskgym", version="0.1.0",
            description=f"deskgym desktop task {self.task!r}: screenshots in, model text or deskgym actions out",
        )

    def close(self) -> None:
        """Releases the session's desktop."""
        if self._env is not None:
            self._env.close()
            self._env = None

    def _observation(self, png: bytes, info: dict[str, Any], *, reward: float | None, done: bool,
                     feedback: str = "", actions: list[dict[str, Any]] | None = None) -> DeskgymObservation:
        self._last_info = info
        png = bytes(png)
        # The frame's own size, from the PNG's IHDR chunk: the space the model's pixels are in.
        width, height = struct.unpack(">II", png[16:24])
        return DeskgymObservation(
            screenshot=base64.b64encode(png).decode("ascii"), width=width, height=height,
            instruction=str(info.get("instruction", "")), task=str(info.get("task", self._state.task)), seed=info.get("seed"),
            step_index=int(info.get("step_index", 0)), frame_hash=str(info.get("frame_hash", "")),
            ended=str(info.get("ended", "") or ""), feedback=feedback, actions=list(actions or []),
            reward=reward, done=done,
        )


def app(task: str = "click-target", *, max_concurrent_envs: int = 64, **kwargs: Any) -> Any:
    """The FastAPI app (OpenEnv's ``create_app``) serving ``task``: ``/reset``, ``/step``,
    ``/state``, ``/schema``, ``/health`` and ``/ws`` (one desktop per WebSocket session,
    at most ``max_concurrent_envs`` at once). ``kwargs``: :class:`DeskgymEnvironment`'s."""
    return create_app(lambda: DeskgymEnvironment(task, **kwargs), DeskgymAction, DeskgymObservation,
                      env_name="deskgym", max_concurrent_envs=max_concurrent_envs)


def main(argv: list[str] | None = None) -> None:
    """``python -m deskgym.openenv``: serve a task with uvicorn."""
    import uvicorn

    p = argparse.ArgumentParser(prog="python -m deskgym.openenv", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="click-target", help="the task sessions start on (reset(task=...) switches)")
    p.add_argument("--address", default=None, help="deskgym-server address (default $DESKGYM_ADDRESS or 127.0.0.1:50051)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--screen", default="%dx%d" % DEFAULT_SCREEN, help="WxH of each desktop")
    p.add_argument("--max-steps", type=int, default=None, help="each episode's step bound")
    p.add_argument("--max-sessions", type=int, default=64, help="concurrent WebSocket sessions (one desktop each)")
    p.add_argument("--format", default="auto", choices=FORMATS, help="the dialect of model text")
    a = p.parse_args(argv)
    w, _, h = a.screen.partition("x")
    served = app(a.task, max_concurrent_envs=a.max_sessions, address=a.address, screen=(int(w), int(h)),
                 format=a.format, max_steps=a.max_steps)
    uvicorn.run(served, host=a.host, port=a.port, log_level="warning")


if __name__ == "__main__":
    main()
