"""What became of each setup step and each task: OSWorld's SetupController logs most
failed steps and goes on (a command that exits non-zero, a launch or an activation the
desktop refused), so a task can be scored on a desktop its setup never made. Here every
step's result is kept (:class:`SetupOutcome`, ``env.setup_outcomes``), and each task of a
run is ``scored`` (a number), ``invalid`` (with its cause: a failed step, a crash, an
evaluator exception, a timeout) or ``infeasible`` (OSWorld's FAIL-only tasks):
invalid tasks are counted apart, never averaged in as zeros.

A failed step makes its task invalid whatever the step was, with two exceptions in the
postconfig, which runs on what the agent left:

- an ``activate_window`` / ``close_window`` that finds no window. OSWorld's server runs
  ``wmctrl`` for these on Linux and answers 200 whatever it found, and after the agent
  acted a title may rightly have changed (GIMP's window is "GNU Image Manipulation
  Program" only while no image is open), so OSWorld's own image fails the same step just
  as silently and scores the task;
- a command that ran and exited non-zero (not 126 or 127: a program the desktop lacks
  stays a failure). Such commands work on the agent's result (``ls -R ~/emails.bak``,
  ``tar -zcf pdf.tar.gz *.pdf``, ``unzip presenter.zip``): where the agent did not make
  it they fail, on OSWorld's image too, and the metric scores that. Counting them
  invalid would leave an agent's failures out of its average (decision 207).

Such a step is kept with its reason (``excused``) and listed apart (``setup_excused``);
every other failure is in the ``setup failed`` column, and the step's record says what
it ran and what the desktop answered.

A known-good solution's row (:func:`deskgym.osworld.suite.solution_task`) also holds
``no_action`` (the score before solving) and ``passed``; a module that says why its task
cannot be solved here is ``unsolvable``, counted apart (:func:`solutions_table`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deskgym.episode import INFEASIBLE, INVALID, SCORED

__all__ = ["INFEASIBLE", "INVALID", "SCORED", "UNSOLVABLE", "SetupOutcome", "compare", "invalidates", "judge", "last_rows",
           "load_rows", "scores_table", "solutions_table", "status_of", "verdict"]

# One vocabulary for every harness: the statuses (and the causes a row's ``cause`` text
# maps to, :func:`deskgym.episode.cause_of_text`) are deskgym.episode's.
#: A known-good solution's module that says why its task cannot be solved here.
UNSOLVABLE = "unsolvable"
#: How much of a failed command's stderr a record keeps (its end: where the error is).
STDERR_TAIL = 500
#: Step types whose command's exit status is the step's result.
COMMANDS = ("execute", "command")


@dataclass
class SetupOutcome:
    """One setup or postconfig step of a task, as it ran.

    ``phase`` is ``config`` (at reset), ``postconfig`` (at evaluation) or ``call`` (a
    harness calling the setup controller itself); ``step`` counts from 1 within its
    phase, as OSWorld's log does; ``ran`` is what the step ran or opened, as the task
    file says it (placeholders such as ``{CLIENT_PASSWORD}`` not filled in)."""

    phase: str
    step: int
    type: str
    ran: str
    ok: bool
    exit_code: int | None = None
    stderr: str = ""
    error: str = ""
    seconds: float = 0.0
    #: Why this failed step does not make its task invalid (empty: it does).
    excused: str = ""

    def describe(self) -> str:
        """``setup: step 2 (execute): exit 1: <stderr>`` (the cause a task's row names)."""
        where = {"config": "setup", "postconfig": "postconfig"}.get(self.phase, self.phase)
        why = self.error or (f"exit {self.exit_code}" if self.exit_code else "failed")
        tail = " ".join(self.stderr.split())[-200:]  # one line: a cause sits in a table's row
        if tail and tail not in why:
            why += f": {tail}"
        return f"{where}: step {self.step} ({self.type}): {why}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ran(kind: str, params: dict[str, Any]) -> str:
    if kind in COMMANDS or kind == "launch":
        cmd = params.get("command", "")
        text = cmd if isinstance(cmd, str) else shlex.join(str(c) for c in cmd)
    elif kind in ("open", "change_wallpaper"):
        text = str(params.get("path", ""))
    elif kind in ("activate_window", "close_window"):
        text = str(params.get("window_name", ""))
    elif kind in ("download", "upload_file"):
        text = ", ".join(str(f.get("path", "")) for f in params.get("files", []))
    else:
        text = json.dumps(params, default=str)
    return text[:300]


def judge(phase: str, step: int, kind: str, params: dict[str, Any], calls: Sequence[Any],
          exc: BaseException | None, seconds: float) -> SetupOutcome:
    """One step's outcome from what it raised and the requests the desktop answered
    while it ran (``calls``: the bridge's :class:`~deskgym.osworld.bridge.Call` s).

    A step fails when it raised, when the desktop answered one of its requests with an
    error status (a launch of a program that is not there, a window not found), or, for
    ``execute`` / ``command``, when its command exited non-zero. A command with
    ``until`` is rerun by OSWorld until its condition holds: only its last run counts."""
    runs = [c for c in calls if c.path in ("/setup/execute", "/execute")]
    if kind in COMMANDS and params.get("until") and runs:
        calls = [runs[-1]]
    out = SetupOutcome(phase, step, kind, _ran(kind, params), ok=exc is None, seconds=round(seconds, 2))
    if runs:
        out.exit_code, out.stderr = runs[-1].returncode, runs[-1].stderr[-STDERR_TAIL:]
    if exc is not None:
        out.error = f"{type(exc).__name__}: {exc}"[:500]
    bad = [c for c in calls if c.status >= 400]
    if bad:
        out.ok = False
        out.error = out.error or f"{bad[-1].path} answered {bad[-1].status}: {bad[-1].error.strip()[:300]}"
    elif out.ok and kind in COMMANDS:
        if not runs:
            out.ok, out.error = False, "no command reached the desktop"
        elif out.exit_code != 0:
            out.ok = False
    if not out.ok and exc is None and phase == "postconfig":
        if kind in ("activate_window", "close_window"):
            out.excused = WINDOW_STEP_EXCUSE
        elif kind in COMMANDS and not bad and out.exit_code not in (None, *MISSING_PROGRAM):
            out.excused = COMMAND_STEP_EXCUSE
    return out


#: Why a postconfig window step that found no window is not a failure (see the module's doc).
WINDOW_STEP_EXCUSE = "OSWorld's server answers 200 to a window step whatever wmctrl finds"
#: Why a postconfig command that exited non-zero is not a failure (see the module's doc).
COMMAND_STEP_EXCUSE = "a postconfig command works on what the agent left; OSWorld goes on and the metric scores it"
#: The shell's exit codes for a program that is not there or cannot run: a desktop defect.
MISSING_PROGRAM = (126, 127)


def invalidates(outcome: SetupOutcome | dict[str, Any]) -> bool:
    """Whether a step's outcome makes its task invalid (it failed and is not excused)."""
    d = outcome if isinstance(outcome, dict) else asdict(outcome)
    return not d.get("ok", True) and not d.get("excused")


def verdict(feasible: bool, setup: Iterable[dict[str, Any]], error: str, score: float | None) -> tuple[str, str]:
    """(status, cause) of one task: invalid when a setup or postconfig step failed (the
    first failed one is the cause, before any error it led to), when something raised
    (``error``) or when there is no score; else scored, or infeasible."""
    for s in setup:
        if invalidates(s):
            return INVALID, SetupOutcome(**s).describe()
    if error:
        return INVALID, error
    if score is None:
        return INVALID, "no score"
    return (SCORED if feasible else INFEASIBLE), ""


def status_of(row: dict[str, Any]) -> str:
    """A row's status; rows written before statuses were recorded get theirs from their
    error and score."""
    if "status" in row:
        return str(row["status"])
    return verdict(row.get("feasible", True), (), row.get("error", ""), row.get("score"))[0]


def last_rows(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """id -> the task's last row (a rerun appends; its row wins)."""
    return {r["id"]: r for r in rows}


def load_rows(path: Path) -> list[dict[str, Any]]:
    """A sweep's rows: a ``.jsonl`` file, a ``--check`` or ``--solutions`` result folder
    (its ``check.jsonl`` or ``solutions.jsonl``) or an agent run's folder (each task's
    ``outcome.json`` under it)."""
    for name in ("check.jsonl", "solutions.jsonl"):
        if path.is_dir() and (path / name).exists():
            path = path / name
            break
    if path.is_file():
        return list(last_rows(json.loads(line) for line in path.read_text().splitlines() if line.strip()).values())
    if path.is_dir():
        return [json.loads(p.read_text()) for p in sorted(path.rglob("outcome.json"))]
    raise SystemExit(f"{path}: no check.jsonl, .jsonl file or outcome.json files there")


def _outcome(row: dict[str, Any]) -> str:
    status = status_of(row)
    if status == INVALID:
        return f"invalid ({row.get('cause') or row.get('error', '')})"[:160]
    if "no_action" in row:
        return f"{status} {row.get('no_action')} then {row.get('score')}"
    return f"{status} {row.get('score')}"


def compare(mine: Sequence[dict[str, Any]], other: Sequence[dict[str, Any]]) -> list[str]:
    """A line per task whose outcome (status, and score where there is one) differs
    between two sweeps, or that only one of them ran. Two invalid outcomes with different
    causes do not differ: neither counts."""
    a, b = last_rows(mine), last_rows(other)
    out = []
    for tid in sorted(set(a) | set(b), key=lambda t: ((a.get(t) or b[t])["domain"], t)):
        ra, rb = a.get(tid), b.get(tid)
        name = f"{(ra or rb or {}).get('domain')}/{tid}"
        if ra is None or rb is None:
            out.append(f"{name}: only in {'this' if rb is None else 'the other'} sweep")
            continue
        sa, sb = status_of(ra), status_of(rb)
        scores = ("score", "no_action")
        if sa != sb or (sa != INVALID and any(ra.get(k) != rb.get(k) for k in scores)):
            out.append(f"{name}: {_outcome(ra)} | other: {_outcome(rb)}")
    return out


def scores_table(rows: Sequence[dict[str, Any]]) -> str:
    """``scores.md``: per domain, the mean over scored tasks only; invalid tasks are
    counted apart (and listed with their cause), infeasible ones too, with how many of
    them the agent answered FAIL (OSWorld scores those 1)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["domain"], []).append(r)
    lines = ["| domain | tasks | scored | mean score (scored) | infeasible (answered FAIL) | invalid |",
             "|---|---|---|---|---|---|"]
    for d in sorted(by) + ["**all**"]:
        rs = list(rows) if d == "**all**" else by[d]
        scored = [float(r["score"]) for r in rs if status_of(r) == SCORED]
        infeasible = [float(r.get("score") or 0) for r in rs if status_of(r) == INFEASIBLE]
        invalid = sum(status_of(r) == INVALID for r in rs)
        mean = f"{sum(scored) / len(scored):.3f}" if scored else "-"
        lines.append(f"| {d} | {len(rs)} | {len(scored)} | {mean} | {len(infeasible)} ({int(sum(infeasible))}) | "
                     f"{invalid} |")
    scored = [float(r["score"]) for r in rows if status_of(r) == SCORED]
    valid = scored + [float(r.get("score") or 0) for r in rows if status_of(r) == INFEASIBLE]
    bad = [r for r in rows if status_of(r) == INVALID]
    lines += ["", f"The mean is over the {len(scored)} scored tasks; {len(bad)} invalid tasks (a failed setup "
              f"step, a crash, an evaluator exception, a timeout) are left out of it, not counted as 0. OSWorld's "
              f"success rate over scored and infeasible tasks, invalid left out: "
              + (f"{sum(valid) / len(valid):.3f} of {len(valid)}." if valid else "-.")]
    if bad:
        lines += ["", "Invalid (rerun them with `--rerun-invalid`):", ""]
        lines += [f"- {r['domain']}/{r['id']}: {str(r.get('cause') or r.get('error', ''))[:200]}" for r in bad]
    return "\n".join(lines) + "\n"


def solutions_table(rows: Sequence[dict[str, Any]]) -> str:
    """The known-good solutions' ``scores.md``: per domain, how many modules, how many
    passed (0 with no action, then 1), failed (a valid pair of scores that is not 0 then
    1), were invalid (with the cause) or are unsolvable here (with the module's reason).
    The pass rate is passed over modules: an unsolvable or invalid task counts against it."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["domain"], []).append(r)
    lines = ["| domain | modules | passed (0 then 1) | failed | invalid | unsolvable | mean s |",
             "|---|---|---|---|---|---|---|"]
    for d in sorted(by) + ["**all**"]:
        rs = list(rows) if d == "**all**" else by[d]
        passed = sum(bool(r.get("passed")) for r in rs)
        invalid = sum(status_of(r) == INVALID for r in rs)
        unsolvable = sum(status_of(r) == UNSOLVABLE for r in rs)
        ran = [r["seconds"] for r in rs if status_of(r) != UNSOLVABLE]
        mean = f"{sum(ran) / len(ran):.1f}" if ran else "-"
        lines.append(f"| {d} | {len(rs)} | {passed} | {len(rs) - passed - invalid - unsolvable} | {invalid} | "
                     f"{unsolvable} | {mean} |")
    passed = sum(bool(r.get("passed")) for r in rows)
    lines += ["", f"Pass rate: {passed}/{len(rows)} = {passed / max(1, len(rows)):.3f} (tasks scoring 0 with no "
              f"action and 1 after the solution, over tasks with a module)."]
    notes = [r for r in rows if not r.get("passed")]
    if notes:
        lines += ["", "Not passed:", ""]
        for r in notes:
            st = status_of(r)
            why = r.get("cause") or r.get("error", "") if st in (INVALID, UNSOLVABLE) else \
                f"{r.get('no_action')} with no action, {r.get('score')} after"
            lines.append(f"- {r['domain']}/{r['id']}: {st}: {str(why)[:200]}")
    return "\n".join(lines) + "\n"
