"""Make the italic words 14 pt (the text is 12 pt): each italic phrase found with the
Find toolbar and grown with Format > Text > Increase Size (Ctrl+], 12 to 14 pt), then
saved as .docx. The input has 12 pt text with two italic phrases; the gold is its text
(the metric compares the text, then checks every italic run is 14 pt)."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import hotkey, put_cloud, put_download
from _office import doc_bytes, find, office, save_keep_format

NAME = "Y22-2119-assign4.docx"
PATH = f"/home/user/Desktop/{NAME}"
ITALIC = ["Pride and Prejudice", "free indirect discourse"]


def _doc(size: int) -> bytes:
    from docx import Document
    from docx.shared import Pt

    d = Document()
    d.styles["Normal"].font.size = Pt(12)
    d.add_paragraph("Assignment 4: close reading")
    p = d.add_paragraph("Read the first chapter of ")
    r = p.add_run(ITALIC[0])
    r.italic, r.font.size = True, Pt(size)
    p.add_run(" and note how the narrator speaks.")
    p = d.add_paragraph("Write one page on the use of ")
    r = p.add_run(ITALIC[1])
    r.italic, r.font.size = True, Pt(size)
    p.add_run(" in the opening scene.")
    return doc_bytes(d)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _doc(12))
    put_cloud(cache, "Y22-2119-assign4.docx_Gold.docx", _doc(14))


def solve(env: Any) -> None:
    office(env, NAME)
    for phrase in ITALIC:
        find(env, phrase)
        env.step(hotkey("ctrl", "]"), pause=1.0)
    save_keep_format(env, PATH)
