"""Split "First Last Rank" in column A into the First Name, Last Name and Rank columns,
leaving A as it is: the solution selects each column's cells (Name Box), types a
LEFT/MID/FIND formula and fills the selection with Alt+Enter, then saves. The gold holds
the split values."""
from __future__ import annotations

import pathlib
from typing import Any

from _calc import calc, goto, save, xlsx
from _common import put_cloud, put_download, typewrite

NAME = "Employee_Roles_and_Ranks.xlsx"
PEOPLE = [("Alice", "Moreau", "Captain"), ("Bruno", "Keller", "Lieutenant"), ("Chen", "Wei", "Sergeant"),
          ("Dana", "Okafor", "Major"), ("Emil", "Novak", "Corporal"), ("Farah", "Haddad", "Colonel")]
#: Column, formula for row 2 (filled down the selection).
FORMULAS = [("B", '=LEFT(A2;FIND(" ";A2)-1)'),
            ("C", '=MID(A2;FIND(" ";A2)+1;FIND(" ";A2;FIND(" ";A2)+1)-FIND(" ";A2)-1)'),
            ("D", '=MID(A2;FIND(" ";A2;FIND(" ";A2)+1)+1;99)')]


def _rows(split: bool) -> list[list[Any]]:
    rows: list[list[Any]] = [["Employee", "First Name", "Last Name", "Rank"]]
    rows += [[" ".join(p)] + (list(p) if split else []) for p in PEOPLE]
    return rows


def files(cache: pathlib.Path, task: dict) -> None:
    put_download(cache, task, xlsx(_rows(False)))
    put_cloud(cache, "Employee_Roles_and_Ranks_gold.xlsx", xlsx(_rows(True)))


def solve(env: Any) -> None:
    calc(env, NAME)
    for col, formula in FORMULAS:
        goto(env, f"{col}2:{col}{1 + len(PEOPLE)}")
        env.step(typewrite(formula), pause=0.5)
        env.step("pyautogui.hotkey('alt', 'enter')", pause=1.0)
    save(env, NAME)
