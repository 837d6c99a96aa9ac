"""deskgym: Gymnasium environments over real Linux desktops.

- :class:`Client` — typed calls over every RPC; errors raise :class:`DeskgymError`.
- :func:`make` / :class:`DeskgymEnv` — one desktop as a ``gymnasium.Env``.
- :func:`make_vec` / :class:`DeskgymVectorEnv` — N desktops, one RPC per step.
- ``env.save()`` / ``env.restore(cp)`` / :func:`fork` — checkpoints and replicas.
- ``action_mode=`` / ``obs_format=`` — spaces SB3, RLlib and CleanRL accept
  (:mod:`deskgym.modes`); :mod:`deskgym.seeding` — the episode-seed scheme.
- :class:`PoolOptions` — the options ``make``, ``make_vec`` and the env pool share.
- ``env.forward(port)`` / :class:`PortForward` — a port inside an env's sandbox, locally.
- :mod:`deskgym.datasets` — read and export ``.skn`` recordings (extra ``[datasets]``).
- :mod:`deskgym.aio` — the client and sessions as coroutines (asyncio, one channel).
- :func:`connect` / :func:`ephemeral` / :class:`Session` — ACI's session: one desktop,
  the verbs as methods, ``run(code)`` with a persistent namespace, save/restore/fork;
  ``session.drive(agent, task)`` the agent loop in one call, :func:`agent` a model's
  agent by name (:mod:`deskgym.drive`, :mod:`deskgym.drive.models`).
- :func:`make_group` — N sessions at the identical start state (GRPO groups), reported
  per replica; :mod:`deskgym.episode` — :class:`EpisodeResult`: scored, infeasible or
  invalid with its cause, never a 0 for a failed run (:func:`result_of`).
"""

from typing import Any

from deskgym.a11y import Element, Tree, TreeDiff
from deskgym.actions import SPACE_KEYS, SPACE_VERBS, action_space, to_proto
from deskgym.calls import EnvEvent
from deskgym.client import DEFAULT_ADDRESS, Checkpoint, Client, EventStream, ExecResult, Pool
from deskgym.desktop import Desktop
from deskgym.drive import DriveResult
from deskgym.drive.models import agent
from deskgym.env import DeskgymEnv, make
from deskgym.episode import EpisodeResult, result_of
from deskgym.errors import DeskgymError
from deskgym.group import Group, GroupReport, make_group
from deskgym.modes import ACTION_MODES, OBS_FORMATS
from deskgym.options import PoolOptions
from deskgym.seeding import episode_seed
from deskgym.registration import make_vec, register_envs
from deskgym.session import RunResult, Session, connect, ephemeral
from deskgym.tasks import TASKS
from deskgym.tunnel import PortForward
from deskgym.vector import DeskgymVectorEnv, fork

register_envs()

__all__ = [
    "ACTION_MODES",
    "DEFAULT_ADDRESS",
    "OBS_FORMATS",
    "SPACE_KEYS",
    "SPACE_VERBS",
    "TASKS",
    "Checkpoint",
    "Client",
    "DeskgymEnv",
    "DeskgymError",
    "Desktop",
    "DeskgymVectorEnv",
    "DriveResult",
    "Element",
    "EnvEvent",
    "EpisodeResult",
    "EventStream",
    "ExecResult",
    "Group",
    "GroupReport",
    "Pool",
    "PoolOptions",
    "RunResult",
    "Session",
    "PortForward",
    "Tree",
    "TreeDiff",
    "action_space",
    "agent",
    "connect",
    "ephemeral",
    "episode_seed",
    "fork",
    "make",
    "make_group",
    "make_vec",
    "register_envs",
    "result_of",
    "to_proto",
]
__version__ = "0.1.0"

#: Submodules imported on first attribute access so ``import deskgym`` stays light:
#: ``deskgym.datasets`` needs pyarrow, ``deskgym.aio`` loads grpc.aio.
_LAZY = ("datasets", "aio")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return importlib.import_module(f"deskgym.{name}")
    raise AttributeError(f"module 'deskgym' has no attribute {name!r}")
