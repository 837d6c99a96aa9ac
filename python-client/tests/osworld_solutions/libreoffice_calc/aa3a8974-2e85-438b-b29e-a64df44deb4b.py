"""Make the sheet fit on one page and export it to ~/Resize_Cells_Fit_Page.pdf: the
solution opens Format > Page Style, sets the Sheet tab's scaling mode to "Fit print
range(s) on number of pages" (1 page), then File > Export as PDF under the same name.

The input stands in for Resize_Cells_Fit_Page.xlsx: 14 columns by 90 rows of numbers,
several pages when printed as it is. The gold is that sheet with the same fit-to-one-page
setting exported by LibreOffice (headless, on the host), so the metric's text comparison
sees the same cells; with no action there is no PDF (0)."""
from __future__ import annotations

import pathlib
import subprocess
import tempfile
from typing import Any

from _calc import calc, xlsx
from _common import hotkey, press, put_cloud, put_download, typewrite, until, window

NAME = "Resize_Cells_Fit_Page"
ROWS = [[f"Col {c + 1}" for c in range(14)]] + [[(r * 37 + c * 11) % 1000 for c in range(14)] for r in range(90)]


def _fit(ws: Any) -> None:
    ws.sheet_properties.pageSetUpPr.fitToPage = True
    ws.page_setup.fitToWidth = 1
    ws.page_setup.fitToHeight = 1


def files(cache: pathlib.Path, task: dict) -> None:
    put_download(cache, task, xlsx(ROWS))
    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp) / f"{NAME}.xlsx"
        src.write_bytes(xlsx(ROWS, edit=_fit))
        subprocess.run(["soffice", f"-env:UserInstallation=file://{tmp}/profile", "--headless", "--convert-to",
                        "pdf", "--outdir", tmp, str(src)], check=True, capture_output=True, timeout=120)
        put_cloud(cache, f"{NAME}_gt.pdf", (pathlib.Path(tmp) / f"{NAME}.pdf").read_bytes())


def solve(env: Any) -> None:
    calc(env, f"{NAME}.xlsx")
    env.step(hotkey("alt", "o"), pause=1.0)  # Format
    env.step(press("down", 9), pause=0.5)  # ... Merge and Unmerge Cells, Page Style...
    env.step(press("enter"), pause=3.0)
    until(lambda: window(env, "Page Style"), "the Page Style dialog", 30)
    for _ in range(6):  # Organizer, Page, Borders, Background, Header, Footer, Sheet
        env.step(hotkey("ctrl", "pagedown"), pause=0.5)
    env.step(hotkey("alt", "m"), pause=0.5)  # Scaling mode
    env.step(hotkey("alt", "down"), pause=1.0)
    env.step(press("down", 2), pause=0.5)  # Fit print range(s) on number of pages (1)
    env.step(press("enter"), pause=1.0)
    env.step(press("tab"), pause=0.5)
    env.step(press("enter"), pause=1.5)  # OK
    until(lambda: not window(env, "Page Style"), "the Page Style dialog to close", 30)
    env.step(hotkey("alt", "f"), pause=1.0)  # File
    env.step(press("d"), pause=0.5)  # Send (its submenu opens)
    env.step(press("left"), pause=0.5)
    env.step(press("up"), pause=0.5)  # Export as PDF...
    env.step(press("enter"), pause=3.0)
    until(lambda: window(env, "PDF Options"), "the PDF Options dialog", 30)
    env.step(press("enter"), pause=3.0)  # Export
    until(lambda: window(env, "Export"), "the Export file dialog", 30)
    env.step(typewrite(f"/home/user/{NAME}.pdf\n"), pause=2.0)
    until(lambda: env.deskgym.exec(["test", "-s", f"/home/user/{NAME}.pdf"]).ok, "the PDF", 30)
    env.step("WAIT", pause=1.0)
