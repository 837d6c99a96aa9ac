"""PPO from RLlib on a bundled deskgym task: a registered env creator builds deskgym envs
inside RLlib's EnvRunners (each runner's envs live on the deskgym server; only pixels
and actions cross the wire).

    scripts/setup-rllib.sh        # RLlib's own venv (it pins gymnasium 1.2.2)
    source scripts/start-server.sh && start_server target/release/deskgym-server
    .venv-rllib/bin/python python-client/examples/rllib_ppo.py --address "$DESKGYM_ADDRESS" --iterations 2

With a Ray cluster whose nodes advertise desktops, ``--ray`` runs the envs on the
cluster's deskgym servers instead (``deskgym.ray``).
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import numpy as np
import ray
from ray.rllib.algorithms.ppo import PPOConfig
from ray.tune.registry import register_env

import deskgym

#: 64x64 pixels: a screen RLlib's default CNN encoder takes as is.
SCREEN = (64, 64)


class Scaled(gym.ObservationWrapper[Any, Any, Any]):
    """uint8 pixels as float32 in [0, 1], height-width-channels: what RLlib's CNN takes."""

    def __init__(self, env: gym.Env[Any, Any]) -> None:
        super().__init__(env)
        self.observation_space = gym.spaces.Box(0.0, 1.0, env.observation_space.shape, np.float32)

    def observation(self, observation: Any) -> Any:
        return np.asarray(observation, dtype=np.float32) / np.float32(255.0)


def creator(config: dict[str, Any]) -> Any:
    """One deskgym env per RLlib sub-env; the worker index makes each env's seeds its own."""
    seed = 1000 * getattr(config, "worker_index", 0) + getattr(config, "vector_index", 0)
    env = deskgym.make(config.get("task", "click-target"), address=config["address"], screen=SCREEN,
                       action_mode="click_grid", grid=(4, 4), max_steps=config.get("max_steps", 8))
    env.reset(seed=seed)
    return Scaled(env)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", default=deskgym.client.DEFAULT_ADDRESS)
    p.add_argument("--task", default="click-target")
    p.add_argument("--iterations", type=int, default=2)
    a = p.parse_args()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    register_env("deskgym", creator)
    config = (
        PPOConfig()
        .environment("deskgym", env_config={"address": a.address, "task": a.task})
        .env_runners(num_env_runners=1, num_envs_per_env_runner=2, rollout_fragment_length=32)
        .training(train_batch_size_per_learner=64, minibatch_size=32, num_epochs=1, lr=3e-4)
    )
    algo = config.build_algo()
    try:
        for i in range(a.iterations):
            r = algo.train()
            runners = r.get("env_runners", {})
            print(f"iteration {i + 1}: {runners.get('num_env_steps_sampled_lifetime', '?')} env steps, "
                  f"mean return {runners.get('episode_return_mean', float('nan')):.3f}")
    finally:
        algo.stop()
        ray.shutdown()


if __name__ == "__main__":
    main()
