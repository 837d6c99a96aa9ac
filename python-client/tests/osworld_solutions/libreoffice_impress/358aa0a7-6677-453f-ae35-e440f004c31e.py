"""Every text box in Liberation Sans Narrow: on each slide Ctrl+A selects all its objects
and the font typed into the sidebar's Font Name box applies to all of them at once
(Page Down to the next slide); then a save as .pptx. The input has three slides of
title and text; the gold is it in that font, saved by a headless LibreOffice as the
GUI's save writes it."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import hotkey, press, put_cloud, put_download, typewrite
from _impress import doc_bytes, office, save_keep_format, saved_by_office, shot

NAME = "note-taking-strategies.pptx"
PATH = f"/home/user/Desktop/{NAME}"
FONT = "Liberation Sans Narrow"
SLIDES = [("Note-Taking Strategies", "For lectures and reading"),
          ("The Cornell Method", "Split the page: cues left, notes right, summary below"),
          ("Mind Maps", "Start in the middle and branch out")]


def _deck(font: str | None) -> bytes:
    from pptx import Presentation

    p = Presentation()
    for title, body in SLIDES:
        s = p.slides.add_slide(p.slide_layouts[1])
        s.shapes.title.text = title
        s.placeholders[1].text = body
        for shape in s.shapes:
            for para in shape.text_frame.paragraphs:
                for run in para.runs:
                    run.font.name = font
    return doc_bytes(p)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _deck(None))
    put_cloud(cache, "note-taking-strategies_Gold.pptx", saved_by_office(_deck(FONT), ".pptx"))


def solve(env: Any) -> None:
    office(env, NAME)
    env.step("pyautogui.click(220, 700)", pause=1.0)  # the grey canvas beside the slide
    for i, _ in enumerate(SLIDES):
        if i:
            env.step(press("pagedown"), pause=1.5)
        env.step(hotkey("ctrl", "a"), pause=1.0)
        env.step("pyautogui.click(1655, 191)", pause=1.0)  # the sidebar's Font Name box
        env.step(hotkey("ctrl", "a"), pause=0.3)
        env.step(typewrite(FONT), pause=0.5)
        env.step(press("enter"), pause=1.5)
        shot(env, f"font{i}")
        env.step("pyautogui.click(220, 700)", pause=1.0)
    save_keep_format(env, PATH)
