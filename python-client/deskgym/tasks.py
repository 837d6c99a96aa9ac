"""The bundled task ids, listed once for Python.

The server is the authority: the worker's task table (``env-worker/src/families/task_app/tasks/mod.rs``,
``TASKS``) reaches clients through ``GetCapabilities``, and :func:`server_tasks` reads
it there. Gymnasium ids are registered at ``import deskgym``, when no server is there to
ask, so :data:`BUNDLED` keeps a static copy; ``tests/test_tasks.py`` fails when the copy
and a server's list disagree.
"""

from __future__ import annotations

from deskgym.v1 import deskgym_pb2 as pb

#: The bundled tasks, in the worker's order. ``blank`` has no goal, reward 0 and never
#: ends; it runs on every profile (``profile="desktop"``).
BUNDLED = ("click-target", "click-button", "drag-to-zone", "type-word", "blank")


def gym_id(task: str) -> str:
    """A task's Gymnasium id: ``click-target`` -> ``deskgym/ClickTarget-v0``."""
    return "deskgym/" + "".join(part.capitalize() for part in task.split("-")) + "-v0"


#: Bundled task id -> Gymnasium id.
TASKS = {task: gym_id(task) for task in BUNDLED}


def server_tasks(caps: pb.Capabilities) -> list[str]:
    """The tasks a server lists outside any family (``desktop/...``, ``miniwob/...``): its
    bundled tasks, and any a ``--tasks-dir`` adds without a prefix. These are the ones a
    Gymnasium id can name (an id's name part has no ``/``)."""
    return [t.id for t in caps.tasks if "/" not in t.id]
