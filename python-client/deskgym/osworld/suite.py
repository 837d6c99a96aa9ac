"""An agent over OSWorld's tasks, in OSWorld's own result layout (what its ``run.py`` and
``show_result.py`` read): per task ``<result dir>/<action space>/<observation type>/
<model>/<domain>/<task id>/`` holds ``traj.jsonl`` (a line per action), a screenshot per
step (``step_<n>_<timestamp>.png``), ``recording.mp4``, ``outcome.json`` (the task's
status: ``scored``, ``invalid`` with its cause, or ``infeasible``, and each setup step's
outcome; see :mod:`deskgym.osworld.outcomes`) and, for a task with a valid score,
``result.txt`` (what OSWorld's ``show_result.py`` reads), written last. A task with an
outcome is finished and not run again (``--rerun-invalid`` reruns the invalid ones);
one without is cleared and run afresh.

An agent is any object with OSWorld's ``predict(instruction, obs) -> (response,
actions)`` (``mm_agents``' ``PromptAgent`` and friends as they are) and, optionally,
``reset()`` / ``reset(logger)``.

A known-good solution (``python-client/tests/osworld_solutions/<domain>/<task id>.py``,
the contract in that folder's modules) is the agent of :func:`solution_task`: the task's
files (the module's ``files``, then stand-ins for the rest), a reset, the score with no
action (must be 0), a second reset, the module's ``solve(env)``, the score (must be 1).
"""

from __future__ import annotations

import datetime
import importlib.util
import inspect
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from deskgym.osworld.check import feasible
from deskgym.osworld.check import record as record_outcomes
from deskgym.osworld.outcomes import INVALID, UNSOLVABLE

__all__ = ["finished", "load_solution", "outcome", "run_task", "solution_modules", "solution_task", "task_dir"]

logger = logging.getLogger("deskgym.osworld")


def task_dir(base: Path, domain: str, task_id: str) -> Path:
    """Where one task's results go (``base``: the run's
    ``<result dir>/<action space>/<observation type>/<model>``)."""
    return base / domain / task_id


def finished(base: Path, domain: str, task_id: str) -> float | None:
    """The task's score when it has finished (its ``result.txt``), else None."""
    p = task_dir(base, domain, task_id) / "result.txt"
    try:
        return float(p.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def outcome(base: Path, domain: str, task: dict[str, Any]) -> dict[str, Any] | None:
    """The task's row when it has finished: its ``outcome.json``, or, for a run written
    before outcomes were, its ``result.txt`` (then scored, or infeasible); else None."""
    d = task_dir(base, domain, task["id"])
    try:
        row: dict[str, Any] = json.loads((d / "outcome.json").read_text())
        return row
    except (OSError, ValueError):
        pass
    score = finished(base, domain, task["id"])
    if score is None:
        return None
    return {"domain": domain, "id": task["id"], "score": score, "feasible": feasible(task),
            "status": "scored" if feasible(task) else "infeasible", "cause": ""}


def _reset_agent(agent: Any) -> None:
    reset = getattr(agent, "reset", None)
    if reset is None:
        return
    params = inspect.signature(reset).parameters
    if params:
        reset(logger)
    else:
        reset()


def run_task(env: Any, agent: Any, base: Path, domain: str, task: dict[str, Any], *, max_steps: int,
             sleep_after: float, wait_after_reset: float, record: bool, timeout: float = 0) -> dict[str, Any]:
    """One episode of ``agent`` on ``task``; returns its row: ``status`` (``scored``,
    ``invalid``, ``infeasible``), ``score`` (None when invalid), ``cause`` and ``error``
    saying what made it invalid (``reset: ...``, ``agent: ...``, ``step: ...``,
    ``evaluate: ...``, ``timeout: ...`` when the episode ran past ``timeout`` seconds,
    checked between actions; or the first failed setup step)."""
    out = task_dir(base, domain, task["id"])
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    row: dict[str, Any] = {"domain": domain, "id": task["id"], "score": None, "feasible": feasible(task),
                           "steps": 0, "error": ""}
    t0 = time.monotonic()
    recording = False
    stage = "reset"
    with (out / "traj.jsonl").open("a") as traj:
        try:
            _reset_agent(agent)
            env.reset(task_config=task)
            time.sleep(wait_after_reset)
            obs = env._get_obs()
            if record:
                env.controller.start_recording()
                recording = True
            done, step = False, 0
            while not done and step < max_steps:
                if timeout and time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"ran past {timeout:g} s, at step {step}")
                stage = "agent"
                response, actions = agent.predict(task["instruction"], obs)
                stage = "step"
                for action in actions or []:
                    stamp = datetime.datetime.now().strftime("%Y%m%d@%H%M%S")
                    obs, reward, done, info = env.step(action, sleep_after)
                    shot = f"step_{step + 1}_{stamp}.png"
                    if obs.get("screenshot"):
                        (out / shot).write_bytes(obs["screenshot"])
                    traj.write(json.dumps({"step_num": step + 1, "action_timestamp": stamp, "action": action,
                                           "response": response, "reward": reward, "done": done, "info": info,
                                           "screenshot_file": shot}, default=str) + "\n")
                    traj.flush()
                    if done:
                        break
                step += 1
            row["steps"] = step
            stage = "evaluate"
            score = float(env.evaluate())
            row["score"] = score
        except Exception as e:  # noqa: BLE001 - a task's failure is its row, never the run's
            where = "timeout" if isinstance(e, TimeoutError) and stage != "evaluate" else stage
            row["error"] = f"{where}: {type(e).__name__}: {e}"[:2000]
            traj.write(json.dumps({"Error": row["error"]}) + "\n")
        finally:
            if recording:
                try:
                    env.controller.end_recording(str(out / "recording.mp4"))
                except Exception as e:  # noqa: BLE001 - the score stands without its video
                    logger.error("task %s: recording: %s", task["id"], e)
    row["seconds"] = round(time.monotonic() - t0, 1)
    record_outcomes(row, getattr(env, "setup_outcomes", []))
    if row["status"] == INVALID and row["score"] is not None:
        # What the metric said on a desktop whose setup failed: kept, never counted.
        row["score"], row["invalid_score"] = None, row["score"]
    (out / "outcome.json").write_text(json.dumps(row, indent=1) + "\n")
    if row["score"] is not None:
        # Last: OSWorld's show_result.py reads it; a task without one has no valid score.
        (out / "result.txt").write_text(f"{row['score']}\n")
    return row


def solution_modules(root: Path, domains: Any = ()) -> list[tuple[str, Path]]:
    """(domain, path) of each solution module under ``root`` (``<domain>/<task id>.py``;
    names starting with ``_`` are helpers), sorted; ``domains``: only those."""
    return [(p.parent.name, p) for p in sorted(root.glob("*/*.py"))
            if not p.name.startswith("_") and (not domains or p.parent.name in domains)]


def load_solution(path: Path) -> ModuleType:
    """The module at ``path``, loaded by path (a task id is no module name). Its folder
    and the one above it are put on ``sys.path`` first, so it imports ``_common`` and its
    domain's own ``_<name>`` helpers by name."""
    for d in (str(path.parent.parent), str(path.parent)):
        if d not in sys.path:
            sys.path.insert(0, d)
    name = f"osworld_solution_{path.parent.name}_{path.stem}".replace("-", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Deadline:
    """The env a solution acts on: ``env`` itself, but a step past the deadline raises
    (a solution stuck in a loop of steps ends as invalid, not as a hung run)."""

    def __init__(self, env: Any, timeout: float) -> None:
        self._env, self._timeout, self._t0 = env, timeout, time.monotonic()

    def step(self, *args: Any, **kwargs: Any) -> Any:
        if self._timeout and time.monotonic() - self._t0 > self._timeout:
            raise TimeoutError(f"the solution ran past {self._timeout:g} s")
        return self._env.step(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def solution_task(env: Any, module: ModuleType, domain: str, task: dict[str, Any], *,
                  timeout: float = 600) -> dict[str, Any]:
    """One task's known-good solution, run as the contract says; returns its row:
    ``no_action`` (the score after a reset alone), ``score`` (after ``solve``),
    ``passed`` (0 then 1), ``status`` (``unsolvable`` with the module's reason;
    ``invalid`` when a step of either reset failed, something raised, or the solve ran
    past ``timeout`` seconds, with the cause: never a 0) and ``seconds``."""
    row: dict[str, Any] = {"domain": domain, "id": task["id"], "module": str(getattr(module, "__file__", "")),
                           "no_action": None, "score": None, "feasible": feasible(task), "passed": False,
                           "error": ""}
    t0 = time.monotonic()
    if getattr(module, "UNSOLVABLE", None):
        row.update(status=UNSOLVABLE, cause=str(module.UNSOLVABLE), seconds=0.0, setup=[], setup_failed=[])
        return row
    setup: list[Any] = []
    stage = "files"
    try:
        from deskgym.osworld import standins

        cache = Path(env.cache_dir_base) / task["id"]
        shutil.rmtree(cache, ignore_errors=True)  # what an earlier run left never stands in
        if hasattr(module, "files"):
            cache.mkdir(parents=True, exist_ok=True)
            module.files(cache, task)
        standins.fill(env.cache_dir_base, task)
        stage = "reset"
        env.reset(task_config=task)
        stage = "no-action evaluate"
        row["no_action"] = float(env.evaluate())
        setup += getattr(env, "setup_outcomes", [])
        stage = "second reset"
        env.reset(task_config=task)
        stage = "solve"
        t1 = time.monotonic()
        module.solve(_Deadline(env, timeout))
        row["solve_seconds"] = round(time.monotonic() - t1, 1)
        stage = "evaluate"
        row["score"] = float(env.evaluate())
    except Exception as e:  # noqa: BLE001 - a task's failure is its row, never the run's
        where = "timeout" if isinstance(e, TimeoutError) and stage == "solve" else stage
        row["error"] = f"{where}: {type(e).__name__}: {e}"[:2000]
    setup += [o for o in getattr(env, "setup_outcomes", []) if not any(o is x for x in setup)]
    row["seconds"] = round(time.monotonic() - t0, 1)
    record_outcomes(row, setup)
    if row["status"] == INVALID and row["score"] is not None:
        row["score"], row["invalid_score"] = None, row["score"]
    row["passed"] = row["status"] != INVALID and row["no_action"] == 0.0 and row["score"] == 1.0
    return row
