"""Move slide 2's image to the right: on slide 2 (Page Down), Tab selects the slide's
objects one by one (the title, then the image), F4 opens Position and Size, and the
image's X position typed there (6") puts it on the slide's right half; then a save as .pptx.

The input has two slides, the second with a title and a picture on the left; the
metric compares the result with the original deck (the gold is the input itself) and
wants slide 2's picture further right than there and past 4,320,000 EMU (4.7"), all the
rest unchanged. Both files are written by a headless LibreOffice, as the GUI's save
writes them."""

from __future__ import annotations

import io
import pathlib
from typing import Any

from _common import hotkey, press, put_cloud, put_download, typewrite
from _impress import doc_bytes, office, save_keep_format, saved_by_office

NAME = "201_6.pptx"
PATH = f"/home/user/Desktop/{NAME}"


def _deck() -> bytes:
    from PIL import Image
    from pptx import Presentation
    from pptx.util import Inches

    p = Presentation()
    s = p.slides.add_slide(p.slide_layouts[0])
    s.shapes.title.text = "Quarterly Review"
    s.placeholders[1].text = "Team results"
    s = p.slides.add_slide(p.slide_layouts[5])
    s.shapes.title.text = "Our Product"
    buf = io.BytesIO()
    Image.new("RGB", (300, 300), (40, 120, 200)).save(buf, format="PNG")
    buf.seek(0)
    s.shapes.add_picture(buf, Inches(0.5), Inches(2.5), Inches(3), Inches(3))
    return doc_bytes(p)


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    deck = saved_by_office(_deck(), ".pptx")
    put_download(cache, task, deck)
    put_cloud(cache, "201_6_Original.pptx", deck)


def solve(env: Any) -> None:
    office(env, NAME)
    env.step("pyautogui.click(220, 700)", pause=1.0)  # the grey canvas beside the slide
    env.step(press("pagedown"), pause=1.5)  # slide 2
    env.step(press("tab", 2), pause=1.0)  # the title, then the picture
    env.step(press("f4"), pause=2.5)  # Position and Size
    env.step(hotkey("alt", "x"), pause=0.5)  # Position X
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite('6"'), pause=0.5)
    env.step(press("enter"), pause=1.5)
    save_keep_format(env, PATH)
