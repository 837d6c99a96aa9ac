"""One model turn on a desktop, as the trainer faces play it (``deskgym.openenv``,
``deskgym.skyrl``, ``deskgym_verifiers``): the reply's text parsed by
:mod:`deskgym.dialect` and stepped, a screenshot as a chat content part.

Every face gives a reply the same meaning: all of its actions step in order until the
episode ends; text the dialect cannot read steps nothing and its
:class:`~deskgym.dialect.DialectError` message goes back to the model; any other failure
(the desktop's) raises, for the face to turn into its framework's invalid run.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from .dialect import DialectError, parse_actions
from .env import DeskgymEnv


@dataclass
class Turn:
    """What one reply did: the screen after it (``obs``, in the env's ``obs_type``), the
    reward summed over its steps, whether the episode ended, the last step's ``info``,
    the actions stepped, and ``feedback`` (the dialect's refusal; nothing stepped)."""

    obs: Any
    reward: float
    done: bool
    info: dict[str, Any]
    actions: list[dict[str, Any]] = field(default_factory=list)
    feedback: str = ""


def play(env: DeskgymEnv, reply: str | None = None, *, action: dict[str, Any] | None = None,
         format: str = "auto", coords: str | None = None, info: dict[str, Any] | None = None) -> Turn:
    """Steps ``action``, or the actions of ``reply`` (model text) in order, stopping at
    the end of the episode. Text the dialect cannot read steps nothing: the turn carries
    the screen now, reward 0 and ``feedback``. ``info``: the last info the caller holds
    (returned with a refused turn, which has no step of its own)."""
    if action is not None:
        actions = [action]
    else:
        try:
            actions = parse_actions(reply or "", format, coords=coords)
        except DialectError as e:
            return Turn(env.observe(), 0.0, False, dict(info or {}), feedback=e.message)
    total, done, stepped = 0.0, False, []
    for a in actions:
        obs, reward, terminated, truncated, inf = env.step(a)
        total += float(reward)
        stepped.append(a)
        if terminated or truncated:
            done = True
            break
    return Turn(obs, total, done, inf, stepped)


def image_part(png: bytes) -> dict[str, Any]:
    """A PNG as an OpenAI-style chat content part (``image_url`` with a data URL), the
    form vLLM, SGLang and OpenAI-compatible servers take."""
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(png).decode("ascii")}}
