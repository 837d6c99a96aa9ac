"""deskgym tasks as a verifiers (0.4, ``verifiers.v1``) environment, id
``deskgym-verifiers``: a taskset of (task, seed) episodes played over deskgym's OpenEnv
face (:mod:`deskgym.openenv`), the model seeing each screenshot as an image.

    python -m deskgym.openenv --task click-target --port 8000 &
    vf-eval deskgym-verifiers --env.taskset.base-url http://127.0.0.1:8000 \\
        --env.taskset.tasks '["click-target"]' --env.taskset.seeds '[0, 1, 2]' \\
        --client.base-url http://127.0.0.1:8001/v1 -m my-model

or in Python, :func:`load_environment` (``task_set=``). It builds on verifiers' own
``openenv`` taskset (its config, its client loop and scoring): the reward of an episode
is the sum of the desktop's rewards. What it changes is what the model sees: a user turn
with the instruction, the last reward and any dialect feedback as text and the screen as
an ``image_url`` part, where the stock taskset would paste the observation's base64 PNG
into the text. The model's reply goes to the face as text, parsed there by
:mod:`deskgym.dialect`. A failed desktop call (a crash, a timeout, a task that does not
exist) raises in ``run()``, which verifiers records as the episode's error
(``episode.ok`` false, resumable), never as a reward of 0 (decision 182).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.tasksets.openenv import OpenEnvData, OpenEnvEnv, OpenEnvTask

__all__ = ["DeskgymConfig", "DeskgymEnv", "DeskgymTaskset", "load_environment"]

#: The id verifiers loads this package by (``--env.taskset.id``, ``vf-eval <id>``).
ENV_ID = "deskgym-verifiers"

SYSTEM_PROMPT = (
    "You operate a computer through its screen. Each turn you see a screenshot and the task. "
    "Answer with your next actions, e.g. <click x=\"120\" y=\"200\"/>, <type>text</type>, "
    "<key keys=\"ctrl+s\"/>, in screenshot pixels."
)


class DeskgymConfig(vf.TasksetConfig):
    """The episodes: one per entry of ``resets`` (the face's ``reset`` arguments), by
    default every task of ``tasks`` with every seed of ``seeds``, played on the OpenEnv
    face at ``base_url`` (``python -m deskgym.openenv``)."""

    base_url: str = Field(default_factory=lambda: os.environ.get("DESKGYM_OPENENV_URL", "http://127.0.0.1:8000"))
    """The OpenEnv face (default ``$DESKGYM_OPENENV_URL``, else ``http://127.0.0.1:8000``)."""
    tasks: list[str] = Field(default_factory=lambda: ["click-target"])
    """deskgym task ids (bundled, ``miniwob/<name>``, a server's declarative tasks...)."""
    seeds: list[int] = Field(default_factory=lambda: [0])
    """Each task's seeds: one episode per (task, seed)."""
    resets: list[dict[str, Any]] = Field(default_factory=list)
    """Explicit ``reset`` arguments per episode (``{"task": .., "seed": ..}``); replaces
    ``tasks`` x ``seeds`` when given."""


class DeskgymTaskset(vf.Taskset[OpenEnvTask, DeskgymConfig]):
    """The (task, seed) episodes as the tasks of verifiers' OpenEnv taskset (its
    ``OpenEnvData``), which :class:`DeskgymEnv` plays."""

    def load(self) -> Iterator[OpenEnvTask]:
        c = self.config
        resets = c.resets or [{"task": t, "seed": s} for t in c.tasks for s in c.seeds]
        for r in resets:
            yield OpenEnvTask(
                OpenEnvData(name=f"{r.get('task', 'deskgym')}#{r.get('seed')}", prompt=None, env=None,
                            base_url=c.base_url, use_docker=False, provider_kwargs={}, reset=r),
                c.task,
            )


class DeskgymEnv(OpenEnvEnv):
    """verifiers' OpenEnv env, with screenshots as images. One episode: reset the face
    with the task's ``(task, seed)``, then for each model turn step the reply as text,
    until the episode is done or the model stops."""

    async def run(self, task: Any, agents: Any) -> None:
        from openenv import GenericEnvClient

        data = task.data
        if not data.base_url:
            raise ValueError("deskgym-verifiers needs base_url: the OpenEnv face (python -m deskgym.openenv)")
        total = 0.0
        async with GenericEnvClient(base_url=data.base_url) as client:
            result = await client.reset(**data.reset)
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn(_user_turn(result.observation, None, first=True))
                while not segment.terminated and not result.done:
                    reply = segment.last_reply.strip()
                    if not reply:
                        interaction.trace.stop("empty_action")
                        break
                    result = await client.step({"text": reply})
                    total += result.reward or 0.0
                    if result.done:
                        break
                    segment = await interaction.turn(_user_turn(result.observation, result.reward))
        interaction.trace.record_reward("openenv_reward", total)


def _user_turn(obs: dict[str, Any], reward: float | None, *, first: bool = False) -> list[dict[str, Any]]:
    text = [SYSTEM_PROMPT] if first else []
    if obs.get("feedback"):
        text.append(f"Your last reply could not be read as actions: {obs['feedback']}")
    elif reward is not None:
        text.append(f"Reward of your last actions: {reward:g}.")
    text.append(f"Task: {obs['instruction']} (screen {obs['width']}x{obs['height']}, episode seed {obs.get('seed')})")
    return [{"role": "user", "content": [
        {"type": "text", "text": "\n".join(text)},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + obs["screenshot"]}},
    ]}]


def load_environment(task_set: str | list[str] = "click-target", *, base_url: str, seeds: list[int] | None = None,
                     **kwargs: Any) -> vf.Env:
    """The env for ``task_set`` (one task id or a list) through verifiers' own loader,
    as ``vf-eval deskgym-verifiers`` builds it. ``kwargs``: more of the env config
    (``max_turns``...)."""
    from verifiers.v1.utils.loaders import load_environment as load, resolve_env_config

    tasks = [task_set] if isinstance(task_set, str) else list(task_set)
    config = resolve_env_config({**kwargs, "taskset": {"id": ENV_ID, "base_url": base_url, "tasks": tasks,
                                                       "seeds": list(seeds or [0])}})
    return load(config)

