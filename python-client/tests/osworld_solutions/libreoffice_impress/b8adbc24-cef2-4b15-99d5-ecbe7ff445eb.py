"""Title the second slide "Online Shopping" in the first title's colour: Page Down to
slide 2, Tab to its empty title placeholder, Enter to edit it, type, Escape; then a save
as .pptx. In the input both titles take their colour from the master, so the typed
title has the first one's colour as it stands; the gold is the input with that title,
saved by a headless LibreOffice as the GUI's save writes it."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import press, put_cloud, put_download, typewrite
from _impress import doc_bytes, office, save_keep_format, saved_by_office

NAME = "189_4.pptx"
PATH = f"/home/user/Desktop/{NAME}"
TITLE = "Online Shopping"


def _deck(title: str) -> bytes:
    from pptx import Presentation

    p = Presentation()
    s = p.slides.add_slide(p.slide_layouts[0])
    s.shapes.title.text = "How People Shop Today"
    s.placeholders[1].text = "A short survey of 2024"
    s = p.slides.add_slide(p.slide_layouts[1])
    if title:
        s.shapes.title.text = title
    s.placeholders[1].text = "Most shoppers compare prices on their phones first."
    return doc_bytes(p)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _deck(""))
    put_cloud(cache, "189_4_Gold.pptx", saved_by_office(_deck(TITLE), ".pptx"))


def solve(env: Any) -> None:
    office(env, NAME)
    env.step("pyautogui.click(220, 700)", pause=1.0)  # the grey canvas beside the slide
    env.step(press("pagedown"), pause=1.5)
    env.step(press("tab"), pause=0.5)  # the first object: the title placeholder
    env.step(press("enter"), pause=0.8)
    env.step(typewrite(TITLE), pause=0.5)
    env.step(press("escape"), pause=0.5)
    env.step(press("escape"), pause=0.5)
    save_keep_format(env, PATH)
