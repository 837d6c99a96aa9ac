"""Play the music video on the Desktop in VLC: Media > Open File (Ctrl+O), its path typed
into the file dialog, Enter. The stand-in is a small two-minute H.264 video under the
task's file name (the metric reads the name VLC's web interface reports while playing),
so it still plays when the status is read; with no action VLC plays nothing."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import hotkey, put_download, typewrite, until, wait_window, window
from _vlc import mp4, player

NAME = "Rick Astley - Never Gonna Give You Up (Official Music Video).mp4"


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, mp4(120))


def solve(env: Any) -> None:
    w = player(env)
    env.step(f"pyautogui.click({w.x + w.width // 2}, {w.y + w.height // 2})", pause=0.5)
    env.step(hotkey("ctrl", "o"), pause=1.5)
    wait_window(env, title="Select one or more files", timeout=30, settle=1.5)
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite(f"/home/user/Desktop/{NAME}\n"), pause=2.0)
    until(lambda: not window(env, title="Select one or more files"), "the file dialog closed", 20)
    until(lambda: window(env, title="Never Gonna Give You Up"), "VLC playing the video", 30)
