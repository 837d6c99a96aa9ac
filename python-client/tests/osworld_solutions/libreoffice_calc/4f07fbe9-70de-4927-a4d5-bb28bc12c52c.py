"""Show a cell's number with two decimals inside a text formula: B2:B6 join a label with
A2:A6 (``="Total: "&A2`` prints every digit); the solution types
``="Total: "&TEXT(A2;"0.00")`` into B2 with B2:B6 selected and fills it down with
Alt+Enter, then saves. The metric compares the sheet as LibreOffice prints it to CSV
with the gold's CSV."""
from __future__ import annotations

import pathlib
from typing import Any

from _calc import calc, goto, save, xlsx
from _common import put_cloud, put_download, typewrite

NAME = "Padding_Decimals_In_Formular.xlsx"
VALUES = [3.14159, 2.5, 10, 0.126, 7.899]


def _rows(gold: bool) -> list[list[Any]]:
    rows: list[list[Any]] = [["Value", "Text"]]
    for i, v in enumerate(VALUES, start=2):
        rows.append([v, f"Total: {v:.2f}" if gold else f'="Total: "&A{i}'])
    return rows


def _two_decimals(ws: Any) -> None:
    for row in ws.iter_rows(min_row=2, max_col=1):
        row[0].number_format = "0.00"


def files(cache: pathlib.Path, task: dict) -> None:
    put_download(cache, task, xlsx(_rows(False), edit=_two_decimals))
    put_cloud(cache, "Padding_Decimals_In_Formular_gold.xlsx", xlsx(_rows(True), edit=_two_decimals))
    csv = ["Value,Text"] + [f"{v:.2f},Total: {v:.2f}" for v in VALUES]
    put_cloud(cache, "Padding_Decimals_In_Formular_gold-Sheet1.csv", "\n".join(csv) + "\n")


def solve(env: Any) -> None:
    calc(env, NAME)
    goto(env, "B2:B6")
    env.step(typewrite('="Total: "&TEXT(A2;"0.00")'), pause=0.5)
    env.step("pyautogui.hotkey('alt', 'enter')", pause=1.0)
    save(env, NAME)

