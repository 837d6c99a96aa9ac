"""``--check``: each task's reset, setup, postconfig and evaluation with no agent, and the
coverage table per domain (see :mod:`deskgym.osworld.run`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

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
    if stand_ins:
        missing = standins.fill(env.cache_dir_base, task)
        if missing:
            row["no_stand_in"] = missing
    try:
        env.reset(task_config=task)
        row["reset_ok"] = True
        row["reset_seconds"] = round(time.monotonic() - t0, 1)
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
