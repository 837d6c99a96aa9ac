"""``--check``: each task's reset, setup, postconfig and evaluation with no agent, and the
coverage table per domain (see :mod:`deskgym.osworld.run`).

Each row also holds every setup and postconfig step's outcome (``setup``), the steps that
failed (``setup_failed``, each naming its step), and the task's ``status`` (``scored``,
``invalid`` with its ``cause``, or ``infeasible``; see :mod:`deskgym.osworld.outcomes`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from deskgym.osworld.outcomes import INVALID, SetupOutcome, invalidates, status_of, verdict

__all__ = ["check_task", "coverage", "feasible"]


def feasible(task: dict[str, Any]) -> bool:
    """False for the tasks OSWorld marks infeasible (the agent should say so)."""
    return (task.get("evaluator") or {}).get("func") != "infeasible"


def check_task(env: Any, domain: str, task: dict[str, Any], stand_ins: bool) -> dict[str, Any]:
    """One task's reset, setup, postconfig and evaluation, with no action in between."""
    from deskgym.osworld import standins

    row: dict[str, Any] = {"domain": domain, "id": task["id"], "reset_ok": False, "evaluate_ok": False,
                           "score": None, "feasible": feasible(task), "error": ""}
    t0 = time.monotonic()
    try:
        if stand_ins:
            missing = standins.fill(env.cache_dir_base, task)
            if missing:
                row["no_stand_in"] = missing
        env.reset(task_config=task)
        row["reset_ok"] = True
        row["reset_seconds"] = round(time.monotonic() - t0, 1)
        score = env.evaluate()
        row["score"] = float(score)
        row["evaluate_ok"] = True
    except Exception as e:  # noqa: BLE001 - a task's failure is its row, never the sweep's
        row["error"] = f"{'evaluate' if row['reset_ok'] else 'reset'}: {type(e).__name__}: {e}"[:2000]
    row["seconds"] = round(time.monotonic() - t0, 1)
    record(row, getattr(env, "setup_outcomes", []))
    row["suspect"] = row["status"] != INVALID and row["feasible"] and row["score"] == 1.0
    return row


def record(row: dict[str, Any], outcomes: Sequence[SetupOutcome]) -> None:
    """Puts the task's setup outcomes, its failed steps and its status in ``row``."""
    row["setup"] = [o.to_dict() for o in outcomes]
    row["setup_failed"] = [o.describe() for o in outcomes if invalidates(o)]
    row["setup_excused"] = [f"{o.describe()} (not counted: {o.excused})" for o in outcomes if o.excused]
    row["status"], row["cause"] = verdict(row.get("feasible", True), row["setup"], row.get("error", ""),
                                          row.get("score"))


def coverage(rows: Sequence[dict[str, Any]]) -> str:
    """The table per domain, as Markdown."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["domain"], []).append(r)
    lines = ["| domain | tasks | reset ok | evaluated | setup failed | invalid | suspect (feasible, 1 with no action) "
             "| mean s |", "|---|---|---|---|---|---|---|---|"]
    total = [0.0] * 7
    for d in sorted(by):
        rs = by[d]
        n, ok, ev = len(rs), sum(r["reset_ok"] for r in rs), sum(r["evaluate_ok"] for r in rs)
        failed, invalid = sum(bool(r.get("setup_failed")) for r in rs), sum(status_of(r) == INVALID for r in rs)
        sus, secs = sum(bool(r.get("suspect")) for r in rs), sum(r["seconds"] for r in rs)
        counts = (n, ok, ev, failed, invalid, sus)
        lines.append(f"| {d} | " + " | ".join(str(c) for c in counts) + f" | {secs / n:.1f} |")
        for i, v in enumerate((*counts, secs)):
            total[i] += v
    n = int(total[0]) or 1
    lines.append("| **all** | " + " | ".join(str(int(c)) for c in total[:6]) + f" | {total[6] / n:.1f} |")
    failed_rows = [r for r in rows if r.get("setup_failed")]
    if failed_rows:
        lines += ["", "Setup failed (the first failed step of each task):", ""]
        lines += [f"- {r['domain']}/{r['id']}: {r['setup_failed'][0][:200]}" for r in failed_rows]
    return "\n".join(lines) + "\n"
