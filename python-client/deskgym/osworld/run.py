"""OSWorld's task set on deskgym, many tasks at once: ``--check`` runs each task's reset,
setup, postconfig and evaluation with no agent and writes a coverage table.

    python -m deskgym.osworld.run --check --test-all evaluation_examples/test_all.json \\
        --num-envs 2 --result-dir results --cache-dir cache --stand-ins

Per task (``<result-dir>/check.jsonl``, one JSON line each, appended as tasks finish):
``reset_ok`` (reset and setup ran), ``evaluate_ok`` (the metric returned a number), the
``score`` with no action (a feasible task scoring 1 is listed as suspect: the fresh
desktop already satisfies it), ``seconds``, and ``error`` naming what failed. A run
that is stopped resumes: tasks already in ``check.jsonl`` are not run again. At the end
``coverage.md`` holds the table per domain.

``--stand-ins`` fills the cache with a valid file of each type a task fetches (see
:mod:`deskgym.osworld.standins`) where the file is missing, so the sweep runs offline;
``--examples`` is the folder of ``<domain>/<id>.json`` (default: ``examples`` beside
``--test-all``). Each of ``--num-envs`` workers holds one desktop and runs its share of
the tasks in turn. Needs a server started with ``--allow-capabilities
exec,files,windows,launch_app,clipboard``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["check_task", "coverage", "main"]


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


def _feasible(task: dict[str, Any]) -> bool:
    return (task.get("evaluator") or {}).get("func") != "infeasible"


def check_task(env: Any, domain: str, task: dict[str, Any], stand_ins: bool) -> dict[str, Any]:
    """One task's reset, setup, postconfig and evaluation, with no action in between."""
    from deskgym.osworld import standins

    row: dict[str, Any] = {"domain": domain, "id": task["id"], "reset_ok": False, "evaluate_ok": False,
                           "score": None, "feasible": _feasible(task), "error": ""}
    t0 = time.monotonic()
    if stand_ins:
        missing = standins.fill(env.cache_dir_base, task)
        if missing:
            row["no_stand_in"] = missing
    try:
        env.reset(task_config=task)
        row["reset_ok"] = True
        score = env.evaluate()
        row["score"] = float(score)
        row["evaluate_ok"] = True
    except Exception as e:  # noqa: BLE001 - a task's failure is its row, never the sweep's
        row["error"] = f"{'evaluate' if row['reset_ok'] else 'reset'}: {type(e).__name__}: {e}"[:2000]
    row["seconds"] = round(time.monotonic() - t0, 1)
    row["suspect"] = row["feasible"] and row["score"] == 1.0
    return row


def coverage(rows: Sequence[dict[str, Any]]) -> str:
    """The table per domain, as Markdown."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["domain"], []).append(r)
    lines = ["| domain | tasks | reset ok | evaluated | suspect (feasible, 1 with no action) | mean s |",
             "|---|---|---|---|---|---|"]
    total = [0, 0, 0, 0, 0.0]
    for d in sorted(by):
        rs = by[d]
        n, ok, ev = len(rs), sum(r["reset_ok"] for r in rs), sum(r["evaluate_ok"] for r in rs)
        sus, secs = sum(bool(r.get("suspect")) for r in rs), sum(r["seconds"] for r in rs)
        lines.append(f"| {d} | {n} | {ok} | {ev} | {sus} | {secs / n:.1f} |")
        for i, v in enumerate((n, ok, ev, sus, secs)):
            total[i] += v
    n = int(total[0]) or 1
    lines.append(f"| **all** | {int(total[0])} | {int(total[1])} | {int(total[2])} | {int(total[3])} | "
                 f"{total[4] / n:.1f} |")
    return "\n".join(lines) + "\n"


def _worker(todo: queue.Queue[tuple[str, dict[str, Any]]], out: Any, lock: threading.Lock,
            make_env: Any, stand_ins: bool, done: list[dict[str, Any]], total: int, t0: float,
            failures: list[str]) -> None:
    try:
        env = make_env()
    except Exception as e:  # noqa: BLE001 - reported once the other workers finish
        failures.append(f"{type(e).__name__}: {e}")
        return
    try:
        while True:
            try:
                domain, task = todo.get_nowait()
            except queue.Empty:
                return
            row = check_task(env, domain, task, stand_ins)
            with lock:
                out.write(json.dumps(row) + "\n")
                out.flush()
                done.append(row)
                ok = sum(r["evaluate_ok"] for r in done)
                print(f"[{len(done)}/{total}] {domain}/{task['id'][:8]} "
                      f"{'ok' if row['evaluate_ok'] else 'FAIL'} {row['seconds']}s "
                      f"(evaluated {ok}, {time.monotonic() - t0:.0f}s) {row['error'][:100]}", flush=True)
    finally:
        env.close()


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m deskgym.osworld.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="reset, set up and evaluate each task with no agent")
    p.add_argument("--test-all", type=Path, required=True, help="OSWorld's test_all.json (domain -> task ids)")
    p.add_argument("--examples", type=Path, help="folder of <domain>/<id>.json (default: beside --test-all)")
    p.add_argument("--domain", action="append", default=[], help="only this domain (repeatable)")
    p.add_argument("--limit", type=int, default=0, help="at most this many tasks per domain")
    p.add_argument("--num-envs", type=int, default=1)
    p.add_argument("--result-dir", type=Path, default=Path("results"))
    p.add_argument("--cache-dir", default="cache")
    p.add_argument("--stand-ins", action="store_true", help="fill missing task files with stand-ins")
    p.add_argument("--address", help="deskgym server (default: $DESKGYM_ADDRESS)")
    p.add_argument("--screen", default="1920x1080")
    a = p.parse_args(argv)
    if not a.check:
        p.error("only --check is implemented: it runs every task with no agent")
    examples = a.examples or a.test_all.parent / "examples"
    tasks = load(a.test_all, examples, a.domain, a.limit)
    a.result_dir.mkdir(parents=True, exist_ok=True)
    log = a.result_dir / "check.jsonl"
    done: list[dict[str, Any]] = []
    if log.exists():
        done = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    seen = {r["id"] for r in done}
    todo: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
    for d, t in tasks:
        if t["id"] not in seen:
            todo.put((d, t))
    print(f"{len(tasks)} tasks, {len(seen & {t['id'] for _, t in tasks})} done before, {todo.qsize()} to run "
          f"on {a.num_envs} desktops", flush=True)
    w, h = (int(x) for x in a.screen.split("x"))

    def make_env() -> Any:
        from deskgym.osworld import DesktopEnv

        return DesktopEnv(address=a.address, cache_dir=a.cache_dir, screen_size=(w, h), require_a11y_tree=False)

    lock, t0 = threading.Lock(), time.monotonic()
    failures: list[str] = []
    with log.open("a") as out:
        workers = [threading.Thread(target=_worker, args=(todo, out, lock, make_env, a.stand_ins, done,
                                                           len(tasks), t0, failures), daemon=True)
                   for _ in range(max(1, min(a.num_envs, todo.qsize())))]
        for th in workers:
            th.start()
        for th in workers:
            th.join()
    if failures and not todo.empty():
        raise SystemExit(f"{len(failures)} of the desktops could not start, {todo.qsize()} tasks not run: "
                         f"{failures[0]}")
    ids = {t["id"] for _, t in tasks}
    rows = [r for r in done if r["id"] in ids]
    table = coverage(rows)
    (a.result_dir / "coverage.md").write_text(table)
    print(table + f"\n{time.monotonic() - t0:.0f} s; rows in {log}", flush=True)
    for r in rows:
        if r.get("suspect"):
            print(f"suspect: {r['domain']}/{r['id']} scores 1 with no action")


if __name__ == "__main__":
    main()
    os._exit(0)  # OSWorld's controllers may leave non-daemon threads
