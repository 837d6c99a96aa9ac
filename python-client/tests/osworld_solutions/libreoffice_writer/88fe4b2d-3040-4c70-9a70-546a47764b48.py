"""Put an empty line after each sentence of the first paragraph: at each ". " between
its sentences (found with the Find toolbar) the space goes and two Enters split the
paragraph there, leaving an empty one between; after the last sentence (End) one Enter
more. The input is a guideline whose first paragraph has three sentences; the gold is
it with the sentences apart (the metric compares the paragraphs one by one)."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import press, put_cloud, put_download
from _office import doc_bytes, find, office, save_keep_format

NAME = "CCCH9003_Tutorial_guidelines.docx"
PATH = f"/home/user/Desktop/{NAME}"
TITLE = "Tutorial guidelines"
FIRST = ["Read the set text before each tutorial.", "Bring two questions to share with the group.",
         "Post a short summary online after the session."]
REST = ["Marks are given for taking part in the discussion. Late summaries lose half a mark."]


def _doc(paragraphs: list[str]) -> bytes:
    from docx import Document

    d = Document()
    for text in [TITLE, *paragraphs]:
        d.add_paragraph(text)
    return doc_bytes(d)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _doc([" ".join(FIRST), *REST]))
    apart = [p for s in FIRST for p in (s, "")]
    for i in (1, 2, 3):
        put_cloud(cache, f"CCCH9003_Tutorial_guidelines_Gold_{i}.docx", _doc([*apart, *REST]))


def solve(env: Any) -> None:
    office(env, NAME)
    for _ in FIRST[1:]:
        find(env, ". ")  # selects the period and the space; the cursor is after the space
        env.step(press("left"), pause=0.3)  # between them
        env.step(press("delete"), pause=0.3)
        env.step(press("enter", presses=2), pause=0.5)
    env.step(press("end"), pause=0.3)
    env.step(press("enter"), pause=0.5)
    save_keep_format(env, PATH)
