"""Gymnasium ids for the bundled tasks (listed in :mod:`deskgym.tasks`), registered in
one place, and ``make_vec``, which picks the vector env a call asks for (one server,
many, or EnvPool-style)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from deskgym.client import Client
from deskgym.envpool import DeskgymEnvPool
from deskgym.fleet import ShardedVectorEnv
from deskgym.tasks import TASKS, gym_id, server_tasks
from deskgym.vector import DeskgymVectorEnv


def miniwob_dir() -> str | None:
    """The installed ``miniwob`` package's directory (found, not imported), or ``None``:
    what to give the server as ``--miniwob-dir`` / ``DESKGYM_MINIWOB_DIR``."""
    import importlib.util

    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(list(spec.submodule_search_locations)[0])


def miniwob_names() -> list[str]:
    """MiniWoB++'s task names, from the installed ``miniwob`` package's pages; empty
    without it. The server lists the same pages."""
    from pathlib import Path

    d = miniwob_dir()
    return sorted(p.stem for p in (Path(d) / "html" / "miniwob").glob("*.html")) if d else []


def register_envs(client: Client | None = None) -> None:
    """Registers every bundled task (idempotent): ``gymnasium.make("deskgym/ClickTarget-v0",
    address="127.0.0.1:50051")`` and ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``;
    and each installed MiniWoB++ page with MiniWoB++'s own interface
    (:class:`deskgym.miniwob_env.MiniWoBEnv`): ``"deskgym/miniwob-click-button-v0"`` stands in
    for ``"miniwob/click-button-v1"``. deskgym's pixel interface to the same pages is
    ``deskgym.make("miniwob/click-button")`` and ``deskgym.make_vec``.

    At import no server is asked: the ids are :data:`deskgym.TASKS`. Given ``client``,
    the tasks are that server's list instead (:func:`deskgym.tasks.server_tasks`), so a
    server newer than this package has its new tasks registered too."""
    tasks = TASKS if client is None else {t: gym_id(t) for t in server_tasks(client.capabilities())}
    for task, env_id in tasks.items():
        if env_id in gym.registry:
            continue
        gym.register(
            id=env_id,
            entry_point="deskgym.env:DeskgymEnv",
            vector_entry_point="deskgym.vector:DeskgymVectorEnv",
            kwargs={"task": task},
            # The server bounds episodes itself (max_steps) and reports truncation.
            max_episode_steps=None,
        )
    for name in miniwob_names():
        env_id = f"deskgym/miniwob-{name}-v0"
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point="deskgym.miniwob_env:MiniWoBEnv", kwargs={"subdomain": name})


def make_vec(task: str, num_envs: int, **kwargs: Any) -> Any:
    """``deskgym.make_vec("click-target", 8, autoreset_mode="next_step", seed=0)``.

    ``address`` may be a list of servers: the envs are then spread over them by free
    capacity (:class:`deskgym.fleet.ShardedVectorEnv`). ``batch_size=k`` gives the
    EnvPool-style asynchronous env instead (``send`` / ``recv`` of the first ``k`` envs
    done, :class:`deskgym.envpool.DeskgymEnvPool`), on one server or a list."""
    if kwargs.get("batch_size") is not None:
        return DeskgymEnvPool(task, num_envs, **kwargs)
    address = kwargs.get("address")
    if isinstance(address, (list, tuple)):
        rest = {k: v for k, v in kwargs.items() if k != "address"}
        return ShardedVectorEnv(task, num_envs, addresses=list(address), **rest)
    return DeskgymVectorEnv(task, num_envs, **kwargs)
