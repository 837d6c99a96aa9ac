"""Gymnasium ids for the bundled tasks, registered in one place."""

from __future__ import annotations

import gymnasium as gym

#: Bundled task id -> Gymnasium id.
TASKS = {
    "click-target": "deskgym/ClickTarget-v0",
    "click-button": "deskgym/ClickButton-v0",
    "drag-to-zone": "deskgym/DragToZone-v0",
    "type-word": "deskgym/TypeWord-v0",
    # No goal, reward 0, never terminates; runs on every profile (profile="desktop").
    "blank": "deskgym/Blank-v0",
}


def register_envs() -> None:
    """Registers every bundled task (idempotent): ``gymnasium.make("deskgym/ClickTarget-v0",
    address="127.0.0.1:50051")`` and ``gymnasium.make_vec(..., vectorization_mode="vector_entry_point")``."""
    for task, env_id in TASKS.items():
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
