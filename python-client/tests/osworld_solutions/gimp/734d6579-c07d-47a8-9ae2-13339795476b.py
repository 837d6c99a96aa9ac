"""Fill the background layer with green, the object layer left as is: Layer > Stack >
Select Bottom Layer (the object layer is the active one), the foreground color set to
00ff00 in its dialog (a click on the toolbox's swatch, the HTML notation field), Edit >
Fill with FG Color (Ctrl+,); the postconfig exports green_background_with_object.png.

The files: OSWorld's image has two layers, a white background and the object; its gold
is the PNG of the two, where the metric takes every pixel that is not black for
background. Here the object is a black disc on a transparent layer over a white one, and
the PNG (the download and the gold: one URL) the two flattened, so that only a green
background passes (the stand-ins are one-layer images unlike each other)."""

from __future__ import annotations

import io
import pathlib
from typing import Any

from _common import hotkey, put_cloud, put_download, typewrite, until, wait_window, window
from _gimp import keys, ready, xcf

SIZE = 128  # square: the metric indexes its pixel arrays [x, y]


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    from PIL import Image, ImageDraw

    obj = Image.new("RGBA", (SIZE, SIZE), (0, 0, 0, 0))
    ImageDraw.Draw(obj).ellipse((32, 24, 96, 104), fill=(0, 0, 0, 255))
    bg = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    flat = bg.copy()
    flat.paste(obj, (0, 0), obj)
    buf = io.BytesIO()
    flat.save(buf, format="PNG")
    put_download(cache, task, xcf(SIZE, SIZE, [("object", obj), ("background", bg)]),
                 "white_background_with_object.xcf")
    put_download(cache, task, buf.getvalue(), "white_background_with_object.png")
    put_cloud(cache, "white_background_with_object.png", buf.getvalue())


def solve(env: Any) -> None:
    gimp = ready(env, "white_background_with_object.xcf")
    keys(env, "alt+l", "k", "b", "enter")  # Layer > Stack > Select Bottom Layer (the first B)
    env.step(f"pyautogui.click({gimp.x + 85}, {gimp.y + 151})", pause=1.0)  # the foreground swatch
    fg = wait_window(env, title="Foreground Color", timeout=15)
    env.step(f"pyautogui.click({fg.x + 354}, {fg.y + 223})", pause=0.5)  # HTML notation
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite("00ff00\n"), pause=0.5)
    keys(env, "alt+o")
    until(lambda: not window(env, title="Foreground Color"), "the color dialog closed", timeout=10)
    env.step(hotkey("ctrl", ","), pause=1.0)  # Edit > Fill with FG Color
    until(lambda: window(env, title="*white_background_with_object"), "the image changed", timeout=10)
