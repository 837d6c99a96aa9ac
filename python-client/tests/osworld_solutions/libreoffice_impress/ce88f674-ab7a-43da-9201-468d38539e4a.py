"""Make the slides portrait: the sidebar's Slide panel, Orientation: Portrait (its list
opened with a click, Down, Enter); then a click on the canvas and a save as .pptx. The stand-in presentation is landscape
(python-pptx's 10 x 7.5 in), which is all the metric looks at."""

from __future__ import annotations

from typing import Any

from _common import press
from _impress import office, save_keep_format

NAME = "AM_Last_Page_Template.pptx"
PATH = f"/home/user/Desktop/{NAME}"


def solve(env: Any) -> None:
    office(env, NAME)
    env.step("pyautogui.click(1747, 224)", pause=1.5)  # the sidebar's Slide > Orientation list
    env.step(press("down"), pause=0.5)  # Landscape to Portrait
    env.step(press("enter"), pause=2.0)
    env.step("pyautogui.click(330, 790)", pause=1.0)  # back to the slide (grey canvas beside it)
    save_keep_format(env, PATH)
