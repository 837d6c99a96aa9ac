"""Show column "Parameter" (A) in millions in B and in billions in C, one decimal, half
rounded up, a space before the unit ("1.3 M"): the solution selects each column's cells
(Name Box), types ``=TEXT(A2/1000000;"0.0")&" M"`` (Calc's TEXT rounds half away from
zero) and fills the selection with Alt+Enter, then saves. The metric compares the sheet
as LibreOffice prints it to CSV with the gold's CSV."""
from __future__ import annotations

import pathlib
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from _calc import calc, goto, save, xlsx
from _common import put_cloud, put_download, typewrite

NAME = "Represent_in_millions_billions.xlsx"
VALUES = [1250000, 7000000000, 175000000, 2449999999, 35000000, 1050000000000]
UNITS = [("B", "M", 1000000), ("C", "B", 1000000000)]


def _shown(v: int, scale: int, unit: str) -> str:
    return f"{(Decimal(v) / scale).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP)} {unit}"


def _rows(done: bool) -> list[list[Any]]:
    rows: list[list[Any]] = [["Parameter", "Millions", "Billions"]]
    rows += [[v] + ([_shown(v, s, u) for _, u, s in UNITS] if done else []) for v in VALUES]
    return rows


def files(cache: pathlib.Path, task: dict) -> None:
    put_download(cache, task, xlsx(_rows(False)))
    put_cloud(cache, "Represent_in_millions_billions_gold.xlsx", xlsx(_rows(True)))
    csv = [",".join(str(c) for c in row) for row in _rows(True)]
    put_cloud(cache, "Represent_in_millions_billions_gold-Sheet1.csv", "\n".join(csv) + "\n")


def solve(env: Any) -> None:
    calc(env, NAME)
    for col, unit, scale in UNITS:
        goto(env, f"{col}2:{col}{1 + len(VALUES)}")
        env.step(typewrite(f'=TEXT(A2/{scale};"0.0")&" {unit}"'), pause=0.5)
        env.step("pyautogui.hotkey('alt', 'enter')", pause=1.0)
    save(env, NAME)
