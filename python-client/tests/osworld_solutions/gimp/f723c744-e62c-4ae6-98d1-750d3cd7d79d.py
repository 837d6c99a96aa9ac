"""Boost the picture's contrast: Colors > Brightness-Contrast (Alt+C, R: the first item
with R, then Enter), Contrast to 50 (two Tabs from the Presets box), OK; the postconfig
exports berries_contrast.png. The picture (a JPEG named berries.png, as OSWorld's is) is a
textured mid-tone image and also the gold (OSWorld's gold is the task's own picture, the
same URL): the stand-ins' unlike pair would fail the metric's SSIM whatever was done.

The postconfig's first step activates "GNU Image Manipulation Program", a title GIMP's
window has only with no image open; OSWorld's server answers 200 whatever `wmctrl -a`
found, and deskgym records the step as failed and excused (decision 166), so the task is
scored: 0 with no action, 1 after this solution."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import hotkey, put_cloud, put_download, typewrite, until, window
from _gimp import dialog, keys, ready, textured


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    picture = textured(fmt="JPEG")
    put_download(cache, task, picture)
    put_cloud(cache, "berries.png", picture)


def solve(env: Any) -> None:
    ready(env, "berries")
    dialog(env, "Brightness-Contrast", "alt+c", "r", "enter")
    keys(env, "tab", "tab")  # Presets, Brightness, Contrast
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite("50"), pause=0.3)
    keys(env, "tab", "alt+o")
    until(lambda: not window(env, title="Brightness-Contrast"), "Brightness-Contrast applied", timeout=20)
