"""Slide 5's text boxes in yellow: Page Down to slide 5, Ctrl+A selects its objects, the
sidebar's Font Color list, Yellow (the standard palette's FFFF00); then a save as .pptx.
The input has five slides; the gold (both of the metric's) is it with slide 5's text
yellow, saved by a headless LibreOffice as the GUI's save writes it."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import hotkey, press, put_cloud, put_download
from _impress import doc_bytes, office, save_keep_format, saved_by_office

NAME = "1_2.pptx"
PATH = f"/home/user/Desktop/{NAME}"
SLIDES = [("Team Offsite", "March 2024"), ("Agenda", "Goals, plans, and next steps"),
          ("Goals", "Ship the new app by June"), ("Plans", "Two teams, one shared backlog"),
          ("Next Steps", "Book the venue and send invites")]


def _deck(yellow: bool) -> bytes:
    from pptx import Presentation
    from pptx.dml.color import RGBColor

    p = Presentation()
    for i, (title, body) in enumerate(SLIDES):
        s = p.slides.add_slide(p.slide_layouts[1])
        s.shapes.title.text = title
        s.placeholders[1].text = body
        if yellow and i == 4:
            for shape in (s.shapes.title, s.placeholders[1]):
                for para in shape.text_frame.paragraphs:
                    for run in para.runs:
                        run.font.color.rgb = RGBColor(0xFF, 0xFF, 0x00)
    return doc_bytes(p)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, _deck(False))
    gold = saved_by_office(_deck(True), ".pptx")
    put_cloud(cache, "1_2_Gold.pptx", gold)
    put_cloud(cache, "1_2_Gold_all_fonts.pptx", gold)


def solve(env: Any) -> None:
    office(env, NAME)
    env.step("pyautogui.click(220, 700)", pause=1.0)  # the grey canvas beside the slide
    env.step(press("pagedown", presses=4), pause=1.5)
    env.step(hotkey("ctrl", "a"), pause=1.0)
    env.step("pyautogui.click(1595, 282)", pause=1.5)  # the sidebar's Font Color list
    env.step("pyautogui.click(1564, 398)", pause=1.5)  # Yellow: the palette's second row, first
    env.step("pyautogui.click(220, 700)", pause=1.0)
    save_keep_format(env, PATH)
