"""Add the missing two-hour Wednesday 12 PM lecture to the course timetable on the
Desktop: as a user does, open Course Timetable.xlsx in Calc from a terminal, go to the
first empty row (its name typed in the Name Box), type the slot, save keeping the format.

The timetable is OSWorld's download and the gold its cloud file: here a timetable of
text cells (day, time, course) with the Wednesday slot missing, and the gold the same
with it added, so that adding the slot is what makes them match."""
from __future__ import annotations

import io
import pathlib
from typing import Any

from _common import hotkey, press, put_cloud, put_download, terminal, type_line, typewrite, until, wait_window

PATH = "/home/user/Desktop/Course Timetable.xlsx"
ROWS = [("Day", "Time", "Course"), ("Monday", "09:00-11:00", "Grammar seminar"),
        ("Tuesday", "14:00-16:00", "Writing workshop"), ("Thursday", "10:00-12:00", "FDI tutorial"),
        ("Friday", "13:00-15:00", "Students work review")]
SLOT = ("Wednesday", "12:00-14:00", "Public lecture")


def xlsx(rows: list[tuple[str, ...]]) -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "Sheet1"
    for r in rows:
        ws.append(list(r))
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, xlsx(ROWS), PATH)
    gold = xlsx([*ROWS, SLOT])
    for dest in ("Course Timetable gold.xlsx", "Course Timetable gold 2.xlsx", "Course Timetable gold 3.xlsx"):
        put_cloud(cache, dest, gold)


def mtime(env: Any) -> str:
    r = env.deskgym.exec(["stat", "-c", "%Y.%s", PATH])
    return str(r.stdout).strip() if r.ok else ""


def solve(env: Any) -> None:
    terminal(env)
    type_line(env, f"libreoffice --calc '{PATH}' &", pause=2.0)
    wait_window(env, title="Course Timetable.xlsx", timeout=120, settle=3.0)
    # The first empty row, through the Name Box (Ctrl+Shift+T): Calc's tree shows a cell
    # only once it has been drawn and read, which a loaded desktop may not have done yet.
    env.step(hotkey("ctrl", "shift", "t"), pause=0.5)
    env.step(typewrite(f"A{len(ROWS) + 1}\n"), pause=0.5)
    for i, text in enumerate(SLOT):
        env.step(typewrite(text), pause=0.5)
        env.step(press("tab" if i < len(SLOT) - 1 else "enter"), pause=0.5)
    before = mtime(env)
    env.step(hotkey("ctrl", "s"), pause=2.0)
    env.step(press("enter"), pause=2.0)  # "Use Excel 2007-365!", if Calc asks
    until(lambda: mtime(env) != before, "the timetable saved", 30)
