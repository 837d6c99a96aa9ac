"""Stable-Baselines3 against the real server: its checker, its VecEnv conventions and a
short PPO run (CPU torch). Needs the ``sb3`` extra (scripts/test.sh installs it)."""

from __future__ import annotations

import csv
import pathlib

import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.env_checker import check_env
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecMonitor

import deskgym
from deskgym.sb3 import DeskgymVecEnv

TINY = (64, 64)


def test_sb3_checker_accepts_the_rl_modes(address: str) -> None:
    for mode in ("click_grid", "pointer", "multi_discrete"):
        env = deskgym.make("click-target", address=address, screen=TINY, action_mode=mode)
        try:
            check_env(env, warn=True)
        finally:
            env.close()


def test_vec_env_follows_sb3_conventions(address: str) -> None:
    venv = DeskgymVecEnv("click-target", 2, address=address, screen=TINY, max_steps=2)
    try:
        venv.seed(3)
        obs = venv.reset()
        assert obs.shape == (2, 64, 64, 3) and obs.dtype == np.uint8
        assert [i["seed"] for i in venv.reset_infos] == [3, 4]
        venv.step(np.array([0, 0]))
        obs, rewards, dones, infos = venv.step(np.array([0, 0]))
        # Top-left clicks miss at these seeds: both episodes hit max_steps together.
        assert dones.all() and rewards.dtype == np.float32
        for i, info in enumerate(infos):
            assert info["TimeLimit.truncated"] is True
            assert info["terminal_observation"].shape == (64, 64, 3)
            assert info["step_index"] == 0 and info["seed"] == deskgym.episode_seed(3 + i, 1)
    finally:
        venv.close()


def test_ppo_trains_and_logs(address: str, tmp_path: pathlib.Path) -> None:
    venv = VecMonitor(
        DeskgymVecEnv("click-target", 2, address=address, screen=TINY, max_steps=4, grid=(8, 8), seed=0)
    )
    try:
        model = PPO("MlpPolicy", venv, n_steps=128, batch_size=64, n_epochs=1, seed=0, device="cpu")
        model.set_logger(configure(str(tmp_path), ["csv"]))
        model.learn(total_timesteps=2048)
    finally:
        venv.close()
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    assert rows and int(rows[-1]["time/total_timesteps"]) >= 2048
    assert rows[-1]["rollout/ep_rew_mean"] != "", "VecMonitor saw finished episodes"
