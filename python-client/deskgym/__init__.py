"""deskgym: Gymnasium environments over real Linux desktops.

- :class:`Client` — typed calls over every RPC; errors raise :class:`DeskgymError`.
- :func:`make` / :class:`DeskgymEnv` — one desktop as a ``gymnasium.Env``.
- :func:`make_vec` / :class:`DeskgymVectorEnv` — N desktops, one RPC per step.
- ``env.save()`` / ``env.restore(cp)`` / :func:`fork` — checkpoints and replicas.
"""

from deskgym.actions import SPACE_KEYS, SPACE_VERBS, action_space, to_proto
from deskgym.client import DEFAULT_ADDRESS, Checkpoint, Client, Pool
from deskgym.env import DeskgymEnv, make
from deskgym.errors import DeskgymError
from deskgym.registration import TASKS, register_envs
from deskgym.vector import DeskgymVectorEnv, fork, make_vec

register_envs()

__all__ = [
    "DEFAULT_ADDRESS",
    "SPACE_KEYS",
    "SPACE_VERBS",
    "TASKS",
    "Checkpoint",
    "Client",
    "DeskgymEnv",
    "DeskgymError",
    "DeskgymVectorEnv",
    "Pool",
    "action_space",
    "fork",
    "make",
    "make_vec",
    "register_envs",
    "to_proto",
]
__version__ = "0.1.0"
