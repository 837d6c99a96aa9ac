"""Fill each blank cell of B1:E30 with the value above it: the input has students' levels
with gaps (and blank cells outside B1:E30 that must stay blank); the solution types
``=<cell above>`` into each blank, found by looking at the sheet, through the Name Box,
and saves. The gold holds the filled values."""
from __future__ import annotations

import pathlib
from typing import Any

from _calc import calc, goto, save, xlsx
from _common import put_cloud, put_download, typewrite

NAME = "Student_Level_Fill_Blank.xlsx"
LEVELS = ["Beginner", "Intermediate", "Advanced"]
COLS = "BCDE"
#: The blank cells of B1:E30 (row, column index into COLS); rows 2..30 hold data.
BLANKS = [(3, 0), (4, 0), (7, 1), (12, 2), (13, 2), (14, 2), (20, 3), (25, 0), (29, 1), (30, 3)]


def _rows(filled: bool) -> list[list[Any]]:
    rows: list[list[Any]] = [["Student", "Math", "Reading", "Science", "Art", None, "Note"]]
    for r in range(2, 31):
        rows.append([f"Student {r - 1}"] + [LEVELS[(r * 7 + c * 3) % 3] for c in range(4)] + [None, None])
    for r, c in BLANKS:
        rows[r - 1][c + 1] = None
    if filled:
        for r, c in sorted(BLANKS):
            rows[r - 1][c + 1] = rows[r - 2][c + 1]
    return rows


def files(cache: pathlib.Path, task: dict) -> None:
    put_download(cache, task, xlsx(_rows(False)))
    put_cloud(cache, "Student_Level_Fill_Blank_gold.xlsx", xlsx(_rows(True)))


def solve(env: Any) -> None:
    calc(env, NAME)
    for r, c in BLANKS:
        goto(env, f"{COLS[c]}{r}")
        env.step(typewrite(f"={COLS[c]}{r - 1}\n"), pause=0.3)
    save(env, NAME)
