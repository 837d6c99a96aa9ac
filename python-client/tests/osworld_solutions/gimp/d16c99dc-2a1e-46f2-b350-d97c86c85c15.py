"""Resize the dog layer to a height of 512 px, keeping its aspect ratio: Layer > Scale
Layer (Alt+L, S; the dog layer is the active one), 512 typed into Height (the chain keeps
the ratio: the width follows), Scale; the postconfig exports resized.png.

The files: the metric measures the export's opaque part (its alpha's box) and compares it,
scaled back, with dog_with_background.png. So here the dog layer is that picture (a
textured photo-like image, 480x640) over an empty transparent layer: scaled, it leaves
the canvas around it transparent, 512 px high. The stand-ins (one opaque layer, a gold
unlike it) could not pass whatever was done.

The postconfig's first step activates "GNU Image Manipulation Program", a title GIMP's
window has only with no image open; OSWorld's server answers 200 whatever `wmctrl -a`
found, and deskgym records the step as failed and excused (decision 166), so the task is
scored: 0 with no action, 1 after this solution."""

from __future__ import annotations

import io
import pathlib
from typing import Any

from _common import hotkey, put_cloud, put_download, typewrite, until, window
from _gimp import dialog, keys, ready, textured, xcf

W, H = 480, 640


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    from PIL import Image

    dog = textured(W, H, None, noise=0)  # no noise: scaled down and back up, it stays alike
    buf = io.BytesIO()
    dog.save(buf, format="PNG")
    empty = Image.new("RGBA", (W, H), (0, 0, 0, 0))
    put_download(cache, task, xcf(W, H, [("dog", dog), ("background", empty)]), "dog_with_background_two_layers.xcf")
    put_download(cache, task, buf.getvalue(), "dog_with_background.png")
    put_cloud(cache, "dog_with_background.png", buf.getvalue())


def solve(env: Any) -> None:
    ready(env, "dog_with_background_two_layers.xcf")
    scale = dialog(env, "Scale Layer", "alt+l", "s")
    env.step(f"pyautogui.click({scale.x + 165}, {scale.y + 110})", pause=0.5)  # Height
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite("512"), pause=0.3)
    keys(env, "tab", "alt+s")
    until(lambda: not window(env, title="Scale Layer"), "the layer scaled", timeout=20)
