"""The options a pool of desktops is made with, in one type: :func:`deskgym.make`,
:func:`deskgym.make_vec` and :class:`deskgym.envpool.DeskgymEnvPool` each build one from
their keyword arguments (or take one as ``options=``), so an option added here reaches
all three.

    opts = deskgym.PoolOptions(screen=(320, 240), action_mode="click_grid")
    env = deskgym.make("click-target", options=opts, seed=0)
    venv = deskgym.make_vec("click-target", 8, options=opts, seed=0)
    venv = deskgym.make_vec("click-target", 8, screen=(320, 240), action_mode="click_grid")  # the same

What stays outside: where the desktops run (``address``, ``token``, ``client``), which
episodes they play (``seed``), and what only one constructor has (``render_mode``,
``autoreset_mode``, ``batch_size``, ``timeout``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gymnasium import spaces

from deskgym.client import Client, Pool
from deskgym.modes import DEFAULT_GRID, ActionMode, obs_space
from deskgym.observation import observation_space

#: Observation types: frames (``rgb`` arrays, ``png``/``jpeg`` bytes), the accessibility
#: tree's text (``a11y``), or both (``rgb+a11y``; single envs only).
OBS_TYPES = ("rgb", "png", "jpeg", "a11y", "rgb+a11y")


@dataclass(frozen=True)
class PoolOptions:
    """How the desktops of one env, vector env or env pool are made and seen. Frozen:
    one value may shape several envs (a fleet's shards share it), so none may change it
    under the others."""

    #: (width, height) of each desktop; ``None``: the task's own (1280x720, or a
    #: MiniWoB++ page's 160x210 task area).
    screen: tuple[int, int] | None = None
    #: One of :data:`OBS_TYPES`; vector envs and env pools take the frame types only.
    obs_type: str = "rgb"
    #: The episode's step bound (the server truncates there); ``None``: the task's default.
    max_steps: int | None = None
    #: How long the server lets the screen settle after an action; ``None``: its default.
    settle_ms: int | None = None
    #: A run name: the server records the pool's episodes under it (``.skn``).
    record: str | None = None
    #: The desktop profile to run; ``None``: the task's own.
    profile: str | None = None
    #: Capabilities asked for the pool (``"exec"``, ``"files"``...); the server's policy
    #: must allow each.
    capabilities: tuple[str, ...] = ()
    #: The task family's options (``miniwob/...``: ``reward``, ``clock``, ``step_ms``...).
    task_options: Mapping[str, Any] | None = None
    #: The action space (:mod:`deskgym.modes`): ``"dict"``, ``"click_grid"``,
    #: ``"pointer"`` or ``"multi_discrete"``.
    action_mode: str = "dict"
    #: Columns and rows of the ``click_grid`` / ``multi_discrete`` grids.
    grid: tuple[int, int] = DEFAULT_GRID
    #: Frames as ``"uint8_hwc"`` (as captured) or ``"float32_chw"`` (for torch policies).
    obs_format: str = "uint8_hwc"
    #: Also put the measured timings (``settle_ms``, ``latency_ms``...) in infos; they
    #: differ between identical runs, so by default only ``last_stats`` has them.
    info_timing: bool = False

    def __post_init__(self) -> None:
        # Copies: a caller's list or dict changed later must not change a frozen value.
        object.__setattr__(self, "capabilities", tuple(self.capabilities))
        if self.task_options is not None:
            object.__setattr__(self, "task_options", dict(self.task_options))

    @classmethod
    def names(cls) -> frozenset[str]:
        """The keyword arguments that are pool options."""
        return frozenset(f.name for f in dataclasses.fields(cls))

    @classmethod
    def split(cls, options: PoolOptions | None, kwargs: Mapping[str, Any]) -> tuple[PoolOptions, dict[str, Any]]:
        """``options`` with the pool options among ``kwargs`` laid over it, and the
        keyword arguments that are not pool options."""
        names = cls.names()
        mine = {k: v for k, v in kwargs.items() if k in names}
        rest = {k: v for k, v in kwargs.items() if k not in names}
        base = options if options is not None else cls()
        return (dataclasses.replace(base, **mine) if mine else base), rest

    @classmethod
    def of(cls, options: PoolOptions | None, kwargs: Mapping[str, Any], owner: str) -> PoolOptions:
        """As :meth:`split`, for a constructor that takes nothing else: another keyword
        is the ``TypeError`` Python raises for an unknown one."""
        opts, rest = cls.split(options, kwargs)
        if rest:
            raise TypeError(f"{owner}() got an unexpected keyword argument {next(iter(rest))!r}")
        return opts

    def create_pool(self, client: Client, task: str, num_envs: int, *, seed: int, encoding: str) -> Pool:
        """``client.create_pool`` with these options: ``num_envs`` desktops of ``task``,
        the first seeded ``seed``, frames in ``encoding``."""
        return client.create_pool(task, num_envs, **self.pool_args(seed=seed, encoding=encoding))

    def pool_args(self, *, seed: int, encoding: str) -> dict[str, Any]:
        """The keyword arguments of ``create_pool`` (sync or asyncio client) these options
        stand for, the first env seeded ``seed``, frames in ``encoding``."""
        return dict(
            screen=self.screen or (0, 0), seed=seed, max_steps=self.max_steps or 0, encoding=encoding,
            settle_ms=self.settle_ms, record=self.record, profile=self.profile, capabilities=self.capabilities,
            task_options=self.task_options,
        )

    def frame_space(self, encoding: str, width: int, height: int) -> spaces.Space[Any]:
        """The space of one frame of a ``width`` x ``height`` desktop in ``encoding``, in
        :attr:`obs_format`."""
        return obs_space(self.obs_format, observation_space(encoding, width, height))

    def action_mode_for(self, width: int, height: int) -> ActionMode:
        """The :attr:`action_mode` of a ``width`` x ``height`` desktop."""
        return ActionMode(self.action_mode, width, height, self.grid)
