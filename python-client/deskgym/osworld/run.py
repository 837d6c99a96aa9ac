"""OSWorld's task set on deskgym, many tasks at once: an agent over the tasks in OSWorld's
result layout, or ``--check``: each task's reset, setup, postconfig and evaluation with
no agent, and a coverage table.

    python -m deskgym.osworld.run --test-all evaluation_examples/test_all.json \\
        --agent my_agents:MyAgent --num-envs 4 --result-dir results --model my-model
    python -m deskgym.osworld.run --check --test-all evaluation_examples/test_all.json \\
        --num-envs 2 --result-dir results --cache-dir cache --stand-ins

With ``--agent MODULE:CLASS`` (built with ``--agent-kwargs`` JSON, one per desktop) each
task runs as OSWorld's ``lib_run_single`` runs it (:mod:`deskgym.osworld.suite`): results
under ``<result-dir>/<action-space>/<observation-type>/<model>/<domain>/<id>/``; a
task with an outcome (``outcome.json``, or ``result.txt`` of an older run) is finished
and a rerun skips it, so a stopped run resumes. Each task is ``scored``, ``invalid``
(a failed setup step, a crash, an evaluator exception, ``--task-timeout``: with its
cause) or ``infeasible`` (:mod:`deskgym.osworld.outcomes`); ``scores.md`` averages the
scored tasks only and counts the invalid ones apart, and ``--rerun-invalid`` reruns
exactly the tasks the previous results hold as invalid.

With ``--check``, per task (``<result-dir>/check.jsonl``, one JSON line each, appended
as tasks finish): ``reset_ok`` (reset and setup ran), ``evaluate_ok`` (the metric
returned a number), the ``score`` with no action (a feasible task scoring 1 is listed as
suspect: the fresh desktop already satisfies it), ``seconds``, and ``error`` naming what
failed, every setup and postconfig step's outcome (``setup``; ``setup_failed`` names
each failed step) and the ``status``; tasks already in ``check.jsonl`` are not run again
(with ``--rerun-invalid``, those whose last row is invalid are, and their new row
wins). At the end ``coverage.md`` holds the table per domain. ``--stand-ins`` fills the cache with a valid file of each
type a task fetches (see :mod:`deskgym.osworld.standins`) where the file is missing, so
the sweep runs offline.

``--examples`` is the folder of ``<domain>/<id>.json`` (default: ``examples`` beside
``--test-all``). Each of ``--num-envs`` workers holds one desktop (spread over the
servers of ``--address``, repeatable) and runs its share of the tasks in turn, printing
a line per finished task with the run's progress. Needs servers started with
``--allow-capabilities exec,files,windows,launch_app,clipboard`` (and ``network`` for
``--network``: tasks that open live pages).

With ``--solutions DIR`` (``python-client/tests/osworld_solutions``), each task with a
module under ``DIR/<domain>/`` runs its known-good solution as the agent
(:func:`deskgym.osworld.suite.solution_task`): its files (the cache's folder of the task
is written over), a reset, the score with no action, a second reset, the solution, the
score. A row per task goes to ``<result-dir>/solutions.jsonl`` (resumed and
``--rerun-invalid`` as ``--check``'s): ``no_action``, ``score``, ``passed`` (0 then 1),
``status`` (``invalid`` with the cause when a step failed, something raised or the
solution ran past ``--task-timeout``, default 600 s; ``unsolvable`` with the module's
reason); ``scores.md`` holds the table per domain and the pass rate. ``--test-all`` is
not needed (the modules name the tasks; ``--examples`` defaults to the tests' copy).

``--compare OTHER`` runs nothing: it lists the tasks whose outcome (status, and score
where there is one) differs between ``--result-dir`` (its ``check.jsonl``, or the agent
run's ``outcome.json`` files under it) and ``OTHER``, so two sweeps can be held against
each other.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from deskgym.osworld.check import check_task, coverage
from deskgym.osworld.outcomes import INVALID, compare, last_rows, load_rows, scores_table, solutions_table, status_of
from deskgym.osworld.suite import load_solution, outcome, run_task, solution_modules, solution_task

__all__ = ["check_task", "coverage", "load", "main"]

logger = logging.getLogger("deskgym.osworld")


def load(test_all: Path, examples: Path, domains: Sequence[str] = (), limit: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """(domain, task) for each task of ``test_all`` (``domains``: only those; ``limit``:
    at most that many per domain)."""
    ids: dict[str, list[str]] = json.loads(test_all.read_text())
    out = []
    for domain, tids in ids.items():
        if domains and domain not in domains:
            continue
        for tid in tids[:limit or None]:
            out.append((domain, json.loads((examples / domain / f"{tid}.json").read_text())))
    return out


class Progress:
    """Counts and prints the run's state as tasks finish (thread-safe)."""

    def __init__(self, total: int, sink: Any = None) -> None:
        self.total, self.sink = total, sink
        self.lock = threading.Lock()
        self.rows: list[dict[str, Any]] = []
        self.running = 0
        self.t0 = time.monotonic()

    def started(self) -> None:
        with self.lock:
            self.running += 1

    def done(self, row: dict[str, Any], ok: bool, what: str) -> None:
        with self.lock:
            self.running -= 1
            self.rows.append(row)
            if self.sink is not None:
                self.sink.write(json.dumps(row) + "\n")
                self.sink.flush()
            failed = sum(1 for r in self.rows if status_of(r) == INVALID)
            print(f"[{len(self.rows)}/{self.total}] {row['domain']}/{row['id'][:8]} {'ok' if ok else 'FAIL'} "
                  f"{what} {row['seconds']}s | running {self.running}, failed {failed}, "
                  f"{time.monotonic() - self.t0:.0f}s {(row.get('cause') or row.get('error', ''))[:100]}", flush=True)


def _pool(todo: queue.Queue[tuple[str, dict[str, Any]]], num_envs: int, make_env: Callable[[int], Any],
          job: Callable[[Any, int, str, dict[str, Any]], None]) -> None:
    """``num_envs`` workers, each with its own env, taking tasks until none are left. A
    job that raises (a bug of ours, not a task's failure: those are rows) costs its task's
    row, never the worker: the run goes on and ends naming each such task (a rerun
    resumes them)."""
    failures: list[str] = []
    raised: list[str] = []

    def work(i: int) -> None:
        try:
            env = make_env(i)
        except Exception as e:  # noqa: BLE001 - reported once the other workers finish
            failures.append(f"{type(e).__name__}: {e}")
            return
        try:
            while True:
                try:
                    domain, task = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    job(env, i, domain, task)
                except Exception as e:  # noqa: BLE001 - named at the end; the other tasks go on
                    logger.exception("%s/%s: no row", domain, task["id"])
                    raised.append(f"{domain}/{task['id']}: {type(e).__name__}: {e}")
        finally:
            env.close()

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(max(1, min(num_envs, todo.qsize())))]
    for th in workers:
        th.start()
    for th in workers:
        th.join()
    if failures and not todo.empty():
        raise SystemExit(f"{len(failures)} of the desktops could not start, {todo.qsize()} tasks not run: "
                         f"{failures[0]}")
    if raised:
        raise SystemExit(f"{len(raised)} tasks have no row (rerun to resume them): " + "; ".join(raised))


def _make_agent(spec: str, kwargs: dict[str, Any]) -> Any:
    module, _, name = spec.partition(":")
    if not name:
        raise SystemExit(f"--agent {spec!r}: give MODULE:CLASS")
    return getattr(importlib.import_module(module), name)(**kwargs)


def _due(prev: dict[str, Any] | None, rerun_invalid: bool) -> bool:
    """Whether a task runs: one with no outcome yet; with ``--rerun-invalid``, exactly
    those whose outcome is invalid."""
    if rerun_invalid:
        return prev is not None and status_of(prev) == INVALID
    return prev is None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m deskgym.osworld.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="reset, set up and evaluate each task with no agent")
    p.add_argument("--agent", help="MODULE:CLASS with OSWorld's predict(instruction, obs)")
    p.add_argument("--solutions", type=Path, metavar="DIR",
                   help="run each task's known-good solution (DIR/<domain>/<task id>.py) as the agent")
    p.add_argument("--agent-kwargs", default="{}", help="JSON object of the agent's constructor arguments")
    p.add_argument("--test-all", type=Path, help="OSWorld's test_all.json (domain -> task ids)")
    p.add_argument("--examples", type=Path, help="folder of <domain>/<id>.json (default: beside --test-all)")
    p.add_argument("--domain", action="append", default=[], help="only this domain (repeatable)")
    p.add_argument("--limit", type=int, default=0, help="at most this many tasks per domain")
    p.add_argument("--num-envs", type=int, default=1)
    p.add_argument("--result-dir", type=Path, default=Path("results"))
    p.add_argument("--cache-dir", default="cache")
    p.add_argument("--stand-ins", action="store_true", help="fill missing task files with stand-ins")
    p.add_argument("--address", action="append", default=[],
                   help="deskgym server (repeatable: desktops spread over them; default: $DESKGYM_ADDRESS)")
    p.add_argument("--screen", default="1920x1080")
    p.add_argument("--network", action="store_true", help="desktops with outbound network (live pages)")
    p.add_argument("--offline", action="store_true",
                   help="every task file from --cache-dir (python -m deskgym.osworld.cache fetch); never the network")
    p.add_argument("--action-space", default="pyautogui", choices=("pyautogui", "computer_13"))
    p.add_argument("--observation-type", default="screenshot",
                   choices=("screenshot", "a11y_tree", "screenshot_a11y_tree", "som"))
    p.add_argument("--model", help="the results' <model> folder (default: the agent's class name)")
    p.add_argument("--max-steps", type=int, default=15)
    p.add_argument("--sleep-after-execution", type=float, default=0.0)
    p.add_argument("--wait-after-reset", type=float, default=3.0,
                   help="seconds between a reset and the first observation (apps the setup launched)")
    p.add_argument("--no-recording", action="store_true", help="no recording.mp4 per task")
    p.add_argument("--task-timeout", type=float, default=0,
                   help="an agent's episode running past this many seconds is invalid (checked between actions)")
    p.add_argument("--rerun-invalid", action="store_true",
                   help="run exactly the tasks the previous results in --result-dir hold as invalid")
    p.add_argument("--compare", type=Path, metavar="OTHER_RESULTS",
                   help="run nothing: list the tasks whose outcome differs between --result-dir and this")
    return p


def main(argv: Sequence[str] | None = None) -> None:
    p = _parser()
    a = p.parse_args(argv)
    if a.compare:
        diff = compare(load_rows(a.result_dir), load_rows(a.compare))
        print("\n".join(diff) if diff else "no task's outcome differs", flush=True)
        print(f"{len(diff)} tasks differ between {a.result_dir} and {a.compare}", flush=True)
        return
    if sum((a.check, bool(a.agent), bool(a.solutions))) != 1:
        p.error("give one of --check (no agent), --agent MODULE:CLASS and --solutions DIR")
    if a.solutions:
        examples = a.examples or a.solutions.parent / "osworld_tasks" / "evaluation_examples" / "examples"
        tasks = [(d, json.loads((examples / d / f"{m.stem}.json").read_text()))
                 for d, m in solution_modules(a.solutions, a.domain)]
    elif a.test_all is None:
        p.error("--test-all is needed (except with --compare or --solutions)")
    else:
        tasks = load(a.test_all, a.examples or a.test_all.parent / "examples", a.domain, a.limit)
    a.result_dir.mkdir(parents=True, exist_ok=True)
    w, h = (int(x) for x in a.screen.split("x"))
    addresses = a.address or [None]

    def make_env(i: int, a11y: bool = False) -> Any:
        from deskgym.osworld import DesktopEnv

        return DesktopEnv(address=addresses[i % len(addresses)], cache_dir=a.cache_dir, screen_size=(w, h),
                          require_a11y_tree=a11y, action_space=a.action_space, network=a.network,
                          offline=a.offline)

    if a.check:
        _check_all(a, tasks, make_env)
    elif a.solutions:
        _solve_all(a, tasks, make_env)
    else:
        _run_agents(a, tasks, make_env)


def _due_tasks(log: Path, tasks: list[tuple[str, dict[str, Any]]],
               rerun_invalid: bool) -> tuple[list[dict[str, Any]], queue.Queue[tuple[str, dict[str, Any]]]]:
    """The rows ``log`` already holds, and a queue of the tasks still due after them."""
    before = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    last = last_rows(before)
    todo: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
    for d, t in tasks:
        if _due(last.get(t["id"]), rerun_invalid):
            todo.put((d, t))
    return before, todo


def _check_all(a: argparse.Namespace, tasks: list[tuple[str, dict[str, Any]]], make_env: Callable[[int], Any]) -> None:
    """``--check``: every due task with no agent, rows to ``check.jsonl``, the table to
    ``coverage.md``."""
    log = a.result_dir / "check.jsonl"
    before, todo = _due_tasks(log, tasks, a.rerun_invalid)
    print(f"{len(tasks)} tasks, {len(tasks) - todo.qsize()} done before, {todo.qsize()} to run "
          f"{'again (invalid before) ' if a.rerun_invalid else ''}on {a.num_envs} desktops", flush=True)
    with log.open("a") as sink:
        progress = Progress(todo.qsize(), sink)

        def check(env: Any, _i: int, domain: str, task: dict[str, Any]) -> None:
            progress.started()
            row = check_task(env, domain, task, a.stand_ins)
            progress.done(row, row["status"] != INVALID, row["status"])

        _pool(todo, a.num_envs, make_env, check)
    ids = {t["id"] for _, t in tasks}
    checked = [r for r in last_rows(before + progress.rows).values() if r["id"] in ids]
    table = coverage(checked)
    (a.result_dir / "coverage.md").write_text(table)
    print(table + f"\n{time.monotonic() - progress.t0:.0f} s; rows in {log}", flush=True)
    for r in checked:
        if r.get("suspect"):
            print(f"suspect: {r['domain']}/{r['id']} scores 1 with no action")


def _solve_all(a: argparse.Namespace, tasks: list[tuple[str, dict[str, Any]]], make_env: Callable[..., Any]) -> None:
    """``--solutions``: each due task's known-good solution, rows to ``solutions.jsonl``,
    the table and pass rate to ``scores.md``."""
    log = a.result_dir / "solutions.jsonl"
    before, todo = _due_tasks(log, tasks, a.rerun_invalid)
    print(f"{len(tasks)} solutions, {len(tasks) - todo.qsize()} done before, {todo.qsize()} to run on "
          f"{a.num_envs} desktops", flush=True)
    with log.open("a") as sink:
        progress = Progress(todo.qsize(), sink)

        def solve(env: Any, _i: int, domain: str, task: dict[str, Any]) -> None:
            progress.started()
            try:
                module = load_solution(a.solutions / domain / f"{task['id']}.py")
            except Exception as e:  # noqa: BLE001 - a module that does not load is its task's row
                row = {"domain": domain, "id": task["id"], "no_action": None, "score": None, "passed": False,
                       "status": INVALID, "cause": f"load: {type(e).__name__}: {e}"[:500], "seconds": 0.0}
            else:
                row = solution_task(env, module, domain, task, timeout=a.task_timeout or 600)
            progress.done(row, row["passed"], f"{row['status']} {row['no_action']} then {row['score']}")

        _pool(todo, a.num_envs, make_env, solve)
    ids = {t["id"] for _, t in tasks}
    rows = [r for r in last_rows(before + progress.rows).values() if r["id"] in ids]
    table = solutions_table(rows)
    (a.result_dir / "scores.md").write_text(table)
    print(table + f"\n{time.monotonic() - progress.t0:.0f} s; rows in {log}", flush=True)


def _run_agents(a: argparse.Namespace, tasks: list[tuple[str, dict[str, Any]]], make_env: Callable[..., Any]) -> None:
    """``--agent``: an episode per due task in OSWorld's result layout, the means to
    ``scores.md``."""
    todo: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
    kwargs = json.loads(a.agent_kwargs)
    agents = [_make_agent(a.agent, kwargs) for _ in range(max(1, a.num_envs))]
    model = a.model or getattr(agents[0], "model", None) or type(agents[0]).__name__
    base = a.result_dir / a.action_space / a.observation_type / str(model)
    rows: list[dict[str, Any]] = []
    for d, t in tasks:
        prev = outcome(base, d, t)
        if _due(prev, a.rerun_invalid):
            todo.put((d, t))
        elif prev is not None:
            rows.append(prev)
    print(f"{len(tasks)} tasks, {len(rows)} finished before, {todo.qsize()} to run "
          f"{'again (invalid before) ' if a.rerun_invalid else ''}on {a.num_envs} desktops; results in {base}",
          flush=True)
    progress = Progress(todo.qsize())
    a11y = a.observation_type != "screenshot"

    def episode(env: Any, i: int, domain: str, task: dict[str, Any]) -> None:
        progress.started()
        if a.stand_ins:
            from deskgym.osworld import standins

            standins.fill(a.cache_dir, task)
        row = run_task(env, agents[i], base, domain, task, max_steps=a.max_steps,
                       sleep_after=a.sleep_after_execution, wait_after_reset=a.wait_after_reset,
                       record=not a.no_recording, timeout=a.task_timeout)
        progress.done(row, row["status"] != INVALID, f"{row['status']} {row['score']} in {row['steps']} steps")

    _pool(todo, a.num_envs, lambda i: make_env(i, a11y), episode)
    table = scores_table(rows + progress.rows)
    (base / "scores.md").write_text(table)
    print(table + f"\n{time.monotonic() - progress.t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
    os._exit(0)  # OSWorld's controllers may leave non-daemon threads
