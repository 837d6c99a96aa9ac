"""Grade each student from the scale table above the students' table: the solution
selects the Grade cells (Name Box), types a VLOOKUP into the scale (approximate match)
and fills the selection with Alt+Enter, then saves. The gold holds the grades."""
from __future__ import annotations

import pathlib
from typing import Any

from _calc import calc, goto, save, xlsx
from _common import put_cloud, put_download, typewrite

NAME = "Student_Grades_and_Remarks.xlsx"
SCALE = [(0, "F"), (60, "D"), (70, "C"), (80, "B"), (90, "A")]
SCORES = [("Ann", 91), ("Bo", 59), ("Cy", 60), ("Di", 74), ("Ed", 88), ("Flo", 100), ("Gus", 69), ("Hal", 80)]
FIRST = 9  # the first student's row


def _grade(score: int) -> str:
    return [g for low, g in SCALE if score >= low][-1]


def _rows(graded: bool) -> list[list[Any]]:
    rows: list[list[Any]] = [["Min Score", "Grade"]] + [[low, g] for low, g in SCALE]
    rows += [[None], ["Student", "Score", "Grade"]]
    rows += [[n, s, _grade(s) if graded else None] for n, s in SCORES]
    return rows


def files(cache: pathlib.Path, task: dict) -> None:
    put_download(cache, task, xlsx(_rows(False)))
    put_cloud(cache, "Student_Grades_and_Remarks_gold.xlsx", xlsx(_rows(True)))


def solve(env: Any) -> None:
    calc(env, NAME)
    goto(env, f"C{FIRST}:C{FIRST + len(SCORES) - 1}")
    env.step(typewrite(f"=VLOOKUP(B{FIRST};$A$2:$B${1 + len(SCALE)};2;1)"), pause=0.5)
    env.step("pyautogui.hotkey('alt', 'enter')", pause=1.0)
    save(env, NAME)
