"""Put the playing video in fullscreen: in VLC's window, the Video menu's Fullscreen
shortcut (F), as a user does. The stand-in "Gen 2.mp4" is a small 320x240 video two
minutes long (setup starts it at 15 s), so VLC's window opens at the video's size, far
from the screen's, and is still playing when the window size is read."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import put_download, until, window
from _vlc import mp4, player


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, mp4(120))


def solve(env: Any) -> None:
    w = player(env)
    env.step(f"pyautogui.click({w.x + w.width // 2}, {w.y + w.height // 2})", pause=0.5)
    env.step("pyautogui.press('f')", pause=1.5)
    until(lambda: (v := window(env, wm_class="vlc")) and v.width >= 1920, "VLC fullscreen", 20)
