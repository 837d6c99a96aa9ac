"""Yellow background for the slides with photos of people, and "Let's start" as slide 2's
title: on each such slide (Page Down) the sidebar's Slide panel sets Background to Color
and its color box to the standard palette's Yellow (FFFF00); slide 2's title, selected
with Tab, is retyped (the apostrophe autocorrected to a curly one is put back straight
with Ctrl+Z, as typed); then a save as .pptx.

The input stands in for 13_0.pptx: three slides, the second and third each with a photo
of the team (a picture; the first has none). The gold is that deck with slides 2 and 3
on a yellow (FFFF00) background and slide 2's new title, saved by a headless
LibreOffice as the GUI's save writes it."""

from __future__ import annotations

import io
import pathlib
from typing import Any

from _common import hotkey, press, put_cloud, put_download, typewrite
from _impress import doc_bytes, office, save_keep_format, saved_by_office

NAME = "13_0.pptx"
PATH = f"/home/user/Desktop/{NAME}"
#: (title, has a photo of people)
SLIDES = [("Company Overview", False), ("Introduction", True), ("Our Team", True)]
TITLE = "Let's start"


def _deck(done: bool) -> bytes:
    from PIL import Image
    from pptx import Presentation
    from pptx.dml.color import RGBColor
    from pptx.util import Inches

    p = Presentation()
    for i, (title, photo) in enumerate(SLIDES):
        s = p.slides.add_slide(p.slide_layouts[5])
        s.shapes.title.text = TITLE if done and i == 1 else title
        if photo:
            buf = io.BytesIO()
            Image.new("RGB", (320, 240), (150, 110, 90)).save(buf, format="PNG")
            buf.seek(0)
            s.shapes.add_picture(buf, Inches(3), Inches(2.5), Inches(4), Inches(3))
            if done:
                s.background.fill.solid()
                s.background.fill.fore_color.rgb = RGBColor(0xFF, 0xFF, 0x00)
    return doc_bytes(p)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, saved_by_office(_deck(False), ".pptx"))
    put_cloud(cache, "13_0_Gold.pptx", saved_by_office(_deck(True), ".pptx"))


def _yellow(env: Any) -> None:
    """The shown slide's background: the sidebar's Background list to Color, then Yellow
    (the standard palette's second row, first) from the color box."""
    env.step("pyautogui.click(1747, 261)", pause=1.0)  # Background: None
    env.step(press("down"), pause=0.5)  # Color
    env.step(press("enter"), pause=1.5)
    env.step("pyautogui.click(1747, 299)", pause=1.5)  # the color box, under it
    env.step("pyautogui.click(1664, 380)", pause=1.5)  # Yellow


def solve(env: Any) -> None:
    office(env, NAME)
    env.step("pyautogui.click(220, 700)", pause=1.0)  # the grey canvas beside the slide
    env.step(press("pagedown"), pause=1.5)  # slide 2
    _yellow(env)
    env.step("pyautogui.click(220, 700)", pause=1.0)
    env.step(press("tab"), pause=0.5)  # the title
    env.step(press("enter"), pause=0.8)  # edit its text
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite("Let'"), pause=0.5)
    env.step(hotkey("ctrl", "z"), pause=0.5)  # undo the autocorrect to a curly apostrophe
    env.step(typewrite("s start"), pause=1.0)
    env.step(press("escape", 2), pause=0.5)
    env.step("pyautogui.click(220, 700)", pause=1.0)
    env.step(press("pagedown"), pause=1.5)  # slide 3
    _yellow(env)
    save_keep_format(env, PATH)
