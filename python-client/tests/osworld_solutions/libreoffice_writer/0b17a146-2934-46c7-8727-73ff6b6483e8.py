"""Make the 2 in "H2O" a subscript: the Find toolbar selects "H2O", the cursor steps back
over the "O" and Shift+Left selects the "2", Format > Text > Subscript (Ctrl+Shift+B),
then a save as .docx. The input is a fact sheet whose first line holds "H2O"; the gold
is the same with the 2 subscript (the metric compares the text, then looks for a
subscript run where the gold has one)."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import hotkey, press, put_cloud, put_download
from _office import doc_bytes, find, office, save_keep_format

NAME = "H2O_Factsheet_WA.docx"
PATH = f"/home/user/Desktop/{NAME}"


def _doc(subscript: bool) -> bytes:
    from docx import Document

    d = Document()
    p = d.add_paragraph("Water (H")
    r = p.add_run("2")
    r.font.subscript = subscript or None
    p.add_run("O) in Western Australia")
    d.add_paragraph("Most of the state's drinking water comes from groundwater and desalination.")
    d.add_paragraph("Saving water at home helps keep the supply secure in dry years.")
    return doc_bytes(d)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _doc(False))
    put_cloud(cache, "H2O_Factsheet_WA_Gold.docx", _doc(True))


def solve(env: Any) -> None:
    office(env, NAME)
    find(env, "H2O")
    env.step(press("left"), pause=0.5)
    env.step(hotkey("shift", "left"), pause=0.5)
    env.step(hotkey("ctrl", "shift", "b"), pause=1.0)
    save_keep_format(env, PATH)
