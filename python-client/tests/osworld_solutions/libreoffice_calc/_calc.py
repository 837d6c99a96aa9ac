"""Helpers for the libreoffice_calc solutions: a workbook's bytes made with openpyxl (for
the inputs and golds ``files`` writes), and acting in Calc as an agent does: wait for the
document's window, go to a cell through the Name Box (Ctrl+Shift+T), type rows of cells,
save with Ctrl+S keeping the file's format (the "Keep current format" dialog)."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Sequence
from typing import Any

from _common import hotkey, press, typewrite, wait_window

__all__ = ["calc", "goto", "save", "type_rows", "xlsx"]


def xlsx(rows: Sequence[Sequence[Any]], title: str = "Sheet1", edit: Callable[[Any], None] | None = None) -> bytes:
    """A one-sheet workbook holding ``rows`` from A1 (None: a blank cell); ``edit`` may
    change the sheet further (a zoom, a number format) before it is saved."""
    from openpyxl import Workbook

    wb = Workbook()
    ws = wb.active
    ws.title = title
    for r, row in enumerate(rows, start=1):
        for c, v in enumerate(row, start=1):
            if v is not None:
                ws.cell(row=r, column=c, value=v)
    if edit is not None:
        edit(ws)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def calc(env: Any, name: str, timeout: float = 90) -> Any:
    """The Calc window of the document ``name`` (its file name), once it takes input."""
    w = wait_window(env, f"{name} - LibreOffice Calc", timeout=timeout, settle=2.0)
    env.step(f"pyautogui.click({w.x + w.width // 2}, {w.y + w.height // 2})", pause=0.5)
    return w


def goto(env: Any, ref: str) -> None:
    """Selects ``ref`` (a cell or a range, ``B2`` or ``B2:E30``) by typing it into the Name Box."""
    env.step(hotkey("ctrl", "shift", "t"), pause=0.5)
    env.step(typewrite(ref + "\n"), pause=0.5)


def type_rows(env: Any, ref: str, rows: Sequence[Sequence[str]], pause: float = 0.3) -> None:
    """Types ``rows`` into the cells from ``ref`` on: Tab between the cells of a row, Enter
    at its end (Calc then goes back to the row's first column, one row down)."""
    goto(env, ref)
    for row in rows:
        env.step(typewrite("\t".join(row) + "\n"), pause=pause)


def save(env: Any, name: str, timeout: float = 30) -> None:
    """Ctrl+S, Enter on the "Keep current format" dialog if one comes (its default button
    keeps the file's format; the osworld home makes xlsx the default, as OSWorld's image
    does, so it does not come for an xlsx), then waits for the file on disk to change."""
    path = f"/home/user/{name}"
    before = _mtime(env, path)
    env.step(hotkey("ctrl", "s"), pause=1.0)
    t0 = time.monotonic()
    while _mtime(env, path) == before:
        if any("keep current format" in w.title.lower() for w in env.deskgym.windows()):
            env.step(press("enter"), pause=1.0)
        assert time.monotonic() - t0 < timeout, f"{name} not saved within {timeout:.0f} s"
        time.sleep(0.3)
    env.step("WAIT", pause=1.0)


def _mtime(env: Any, path: str) -> str:
    r = env.deskgym.exec(["stat", "-c", "%y %s", path])
    return str(r.stdout).strip() if r.ok else ""
