"""Stable-Baselines3 ``VecEnv`` over :func:`deskgym.make_vec` (extra ``deskgym[sb3]``).

One ``StepBatch`` RPC per ``step``: the server resets ended envs in the same call
(same-step autoreset), which is SB3's own convention: ``dones[i]`` marks the end,
``obs[i]`` is already the next episode's first observation, and the last one is in
``infos[i]["terminal_observation"]``; a time-limit end sets ``infos[i]["TimeLimit.truncated"]``.

>>> from stable_baselines3 import PPO  # doctest: +SKIP
>>> from deskgym.sb3 import DeskgymVecEnv  # doctest: +SKIP
>>> venv = DeskgymVecEnv("click-target", 8, screen=(64, 64), action_mode="click_grid")  # doctest: +SKIP
>>> PPO("MlpPolicy", venv).learn(10_000)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvObs, VecEnvStepReturn

from deskgym.vector import DeskgymVectorEnv


def _unbatch(infos: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """Gymnasium's dict of arrays (with ``_key`` masks) -> SB3's list of dicts."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, values in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}", np.ones(n, dtype=bool))
        per_env = _unbatch(values, n) if isinstance(values, dict) else values
        for i in range(n):
            if mask[i]:
                out[i][key] = per_env[i]
    return out


class DeskgymVecEnv(VecEnv):
    """``num_envs`` desktops of ``task`` as an SB3 ``VecEnv``.

    Keyword arguments go to :func:`deskgym.make_vec`; ``action_mode`` defaults to
    ``"click_grid"`` (a ``Discrete`` space every SB3 algorithm with discrete actions
    takes). Observations are uint8 HWC images, which SB3's ``CnnPolicy`` transposes
    itself; ``obs_format="float32_chw"`` suits ``MlpPolicy`` or custom extractors.
    """

    def __init__(self, task: str = "click-target", num_envs: int = 1, **kwargs: Any) -> None:
        if kwargs.get("options") is None:
            # (With ``options=``, its own action_mode stands: it is the caller's choice.)
            kwargs.setdefault("action_mode", "click_grid")
        kwargs["autoreset_mode"] = "same_step"
        self.venv = DeskgymVectorEnv(task, num_envs, **kwargs)
        super().__init__(num_envs, self.venv.single_observation_space, self.venv.single_action_space)
        self._actions: Any = None

    def reset(self) -> VecEnvObs:
        seeds = [s for s in self._seeds]
        seed = None if all(s is None for s in seeds) else seeds
        obs, infos = self.venv.reset(seed=seed)
        self.reset_infos = _unbatch(infos, self.num_envs)
        self._reset_seeds()
        self._reset_options()
        return obs  # type: ignore[no-any-return]

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = actions

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, terminated, truncated, infos = self.venv.step(self._actions)
        dones = terminated | truncated
        out = _unbatch(infos, self.num_envs)
        for i in np.flatnonzero(dones):
            info = out[i]
            final = info.pop("final_obs", None)
            if final is not None:
                info["terminal_observation"] = final
            info.pop("final_info", None)
            info["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs, rewards.astype(np.float32), dones, out

    def close(self) -> None:
        self.venv.close()

    def get_attr(self, attr_name: str, indices: None | int | Iterable[int] = None) -> list[Any]:
        return [getattr(self.venv, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: None | int | Iterable[int] = None) -> None:
        setattr(self.venv, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: None | int | Iterable[int] = None, **method_kwargs: Any
    ) -> list[Any]:
        fn = getattr(self.venv, method_name)
        return [fn(*method_args, **method_kwargs) for _ in self._get_indices(indices)]

    def env_is_wrapped(self, wrapper_class: type[Any], indices: None | int | Iterable[int] = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None] * self.num_envs
