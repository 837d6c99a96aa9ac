"""Add a "Total" row under the sales (a SUM per month) shown as a bar chart titled
"Total", and a "Growth" row (month-on-month growth, Feb to Jun) shown as a line chart
titled "Growth" that leaves Jan out: the solution types both rows through the Name Box,
then makes each chart with Insert > Chart, giving the wizard the row as its data range
(series in rows, the month headers as categories) and the title, and saves.

The input stands in for SalesRep.xlsx: five reps' sales for Jan to Jun. The gold has the
two rows and the two charts (their data and category ranges, type and title, which is
what the chart rule compares)."""
from __future__ import annotations

import pathlib
from typing import Any

from _calc import calc, goto, save, type_rows, xlsx
from _common import hotkey, press, put_cloud, put_download, typewrite

NAME = "SalesRep.xlsx"
MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun"]
COLS = "BCDEFG"
SALES = [
    ["Anna", 1200, 1350, 1100, 1600, 1750, 1500],
    ["Ben", 900, 1000, 1250, 1150, 1300, 1400],
    ["Carla", 1500, 1450, 1700, 1650, 1800, 2000],
    ["Dev", 700, 850, 950, 1000, 900, 1100],
    ["Eva", 1100, 1200, 1150, 1300, 1400, 1350],
]
TOTAL = 2 + len(SALES)  # the Total row (7)
GROWTH = TOTAL + 1


def _rows(done: bool) -> list[list[Any]]:
    rows: list[list[Any]] = [["Sales Rep", *MONTHS], *[list(r) for r in SALES]]
    if done:
        total = [sum(r[c + 1] for r in SALES) for c in range(6)]
        rows.append(["Total", *total])
        rows.append(["Growth", None, *[(total[c] - total[c - 1]) / total[c - 1] for c in range(1, 6)]])
    return rows


def _charts(ws: Any) -> None:
    """The two charts, their ranges written as Calc writes them (no quotes on Sheet1)."""
    from openpyxl.chart import BarChart, LineChart, Series
    from openpyxl.chart.data_source import AxDataSource, StrRef

    for kind, title, row, first, at in ((BarChart, "Total", TOTAL, "B", "I2"),
                                        (LineChart, "Growth", GROWTH, "C", "I20")):
        ch = kind()
        ch.title = title
        ser = Series(f"Sheet1!${first}${row}:$G${row}")
        ser.val.numRef.f = f"Sheet1!${first}${row}:$G${row}"
        ser.cat = AxDataSource(strRef=StrRef(f=f"Sheet1!${first}$1:$G$1"))
        ch.series.append(ser)
        ws.add_chart(ch, at)


def files(cache: pathlib.Path, task: dict) -> None:
    put_download(cache, task, xlsx(_rows(False)))
    put_cloud(cache, "2_SalesRep_gt1.xlsx", xlsx(_rows(True), edit=_charts))


def _chart(env: Any, data: str, title: str, line: bool) -> None:
    """Insert > Chart with the month headers selected (so the wizard takes the first row
    and column as labels); in the wizard: the type (Column, the default, or Line, lines
    only), the data range typed (the headers' row and the data's), for Growth no label
    column (its range starts at Feb), then the title on the Chart Elements page; Finish."""
    goto(env, "A1:G1")
    env.step(hotkey("alt", "i"), pause=1.0)
    env.step(press("down"), pause=0.3)  # Chart...
    env.step(press("enter"), pause=4.0)
    if line:
        env.step(press("down", 4), pause=0.5)  # Column, Bar, Pie, Area, Line
        env.step(press("tab"), pause=0.5)
        env.step(press("right", 2), pause=0.5)  # Points only, Points and lines, Lines only
    env.step(hotkey("alt", "n"), pause=1.5)  # Data Range
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite(data), pause=1.5)
    if line:
        env.step(hotkey("alt", "i"), pause=1.0)  # First column as label: off
    env.step(hotkey("alt", "n"), pause=1.5)  # Data Series
    env.step(hotkey("alt", "n"), pause=1.5)  # Chart Elements (the Subtitle box has the focus)
    env.step(hotkey("shift", "tab"), pause=0.5)
    env.step(typewrite(title), pause=0.5)
    env.step(hotkey("alt", "f"), pause=3.0)  # Finish
    env.step(press("escape", 3), pause=1.0)  # leave the chart


def solve(env: Any) -> None:
    calc(env, NAME)
    sums = [f"=SUM({c}2:{c}{TOTAL - 1})" for c in COLS]
    growth = [f"=({c}{TOTAL}-{p}{TOTAL})/{p}{TOTAL}" for p, c in zip(COLS, COLS[1:])]
    type_rows(env, f"A{TOTAL}", [["Total", *sums], ["Growth"]])
    type_rows(env, f"C{GROWTH}", [growth])
    _chart(env, f"$Sheet1.$A$1:$G$1,$Sheet1.$A${TOTAL}:$G${TOTAL}", "Total", False)
    _chart(env, f"$Sheet1.$C$1:$G$1,$Sheet1.$C${GROWTH}:$G${GROWTH}", "Growth", True)
    save(env, NAME)
