"""Split each sentence with a tab after its third word, the rest right-aligned: in each
paragraph Ctrl+Right three times and Tab; then, all selected, the ruler's tab-type
button set to Right and one click on the ruler near the right margin puts a right tab
stop there. The input is a short purchasing note, one sentence a paragraph; the gold is
it with the tabs and that right tab stop (the metric checks three words before the tab
and compares the tab stops' kind and position)."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import hotkey, press, put_cloud, put_download
from _office import doc_bytes, office, save_keep_format

NAME = "04 CHIN9505 EBook Purchasing info 2021 Jan.docx"
PATH = f"/home/user/Desktop/{NAME}"
LINES = ["Buy the ebook from the university bookshop website.",
         "Use your student number when you pay online.",
         "Keep the receipt until the end of term."]
#: Where the ruler click (x 1150 of the 1920-wide screen, the page at 100 % as Writer
#: opens it) puts the tab stop: 7725 twips from the left margin, read from the saved file.
TAB_TWIPS = 7725


def _doc(done: bool) -> bytes:
    from docx import Document
    from docx.enum.text import WD_TAB_ALIGNMENT
    from docx.shared import Twips

    d = Document()
    for line in LINES:
        words = line.split(" ")
        p = d.add_paragraph(" ".join(words[:3]) + " \t" + " ".join(words[3:]) if done else line)
        if done:
            p.paragraph_format.tab_stops.add_tab_stop(Twips(TAB_TWIPS), WD_TAB_ALIGNMENT.RIGHT)
    return doc_bytes(d)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _doc(False))
    put_cloud(cache, "04 CHIN9505 EBook Purchasing info 2021 Jan_Gold.docx", _doc(True))


def solve(env: Any) -> None:
    office(env, NAME)
    env.step(hotkey("ctrl", "home"), pause=0.5)
    for _ in LINES:
        env.step(hotkey("ctrl", "right"), pause=0.2)
        env.step(hotkey("ctrl", "right"), pause=0.2)
        env.step(hotkey("ctrl", "right"), pause=0.2)
        env.step(press("tab"), pause=0.3)
        env.step(press("end"), pause=0.2)
        env.step(press("right"), pause=0.2)
    env.step(hotkey("ctrl", "a"), pause=0.5)
    env.step("pyautogui.click(10, 132)", pause=1.0)  # tab type: Left to Right
    env.step("pyautogui.click(1150, 133)", pause=1.0)  # the ruler
    save_keep_format(env, PATH)
