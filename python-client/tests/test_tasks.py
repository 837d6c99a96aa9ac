"""Python's one list of bundled tasks against the server's: the static copy registered at
import must be exactly what a server lists, and a server's list registers on request."""

from __future__ import annotations

import pathlib

import gymnasium as gym

import deskgym
from deskgym.agents.reference import PixelAgent
from deskgym.tasks import BUNDLED, TASKS, gym_id, server_tasks

from conftest import Server


def test_the_static_list_is_the_servers(client: deskgym.Client) -> None:
    # In the worker's order too: a task added there must be added to BUNDLED.
    assert server_tasks(client.capabilities()) == list(BUNDLED)


def test_the_gymnasium_ids_users_make_stay_as_they_were() -> None:
    assert TASKS == {
        "click-target": "deskgym/ClickTarget-v0",
        "click-button": "deskgym/ClickButton-v0",
        "drag-to-zone": "deskgym/DragToZone-v0",
        "type-word": "deskgym/TypeWord-v0",
        "blank": "deskgym/Blank-v0",
    }
    assert deskgym.TASKS is TASKS
    assert all(env_id in gym.registry for env_id in TASKS.values())


def test_the_scripted_agent_solves_bundled_tasks_only() -> None:
    assert set(PixelAgent.SOLVERS) <= set(BUNDLED)


def test_a_servers_own_tasks_register_from_its_list(tmp_path: pathlib.Path) -> None:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "extra.toml").write_text(
        "[[task]]\nid='extra-task'\nprofile='desktop'\ninstruction='i'\ncheck='true'\n"
        # A family's task: no Gymnasium id can name it.
        "[[task]]\nid='lab/other-task'\nprofile='desktop'\ninstruction='i'\ncheck='true'\n")
    s = Server("--tasks-dir", str(tasks), "--data-dir", str(tmp_path / "data"))
    try:
        with deskgym.Client(s.address) as c:
            assert server_tasks(c.capabilities()) == [*BUNDLED, "extra-task"]
            assert gym_id("extra-task") not in gym.registry
            deskgym.register_envs(c)
        spec = gym.spec(gym_id("extra-task"))
        assert spec.kwargs == {"task": "extra-task"}
        assert spec.vector_entry_point == "deskgym.vector:DeskgymVectorEnv"
    finally:
        assert s.stop() == 0
        gym.registry.pop(gym_id("extra-task"), None)
