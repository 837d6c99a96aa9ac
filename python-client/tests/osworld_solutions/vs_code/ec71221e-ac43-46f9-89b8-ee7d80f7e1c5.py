"""Indent lines 2 to 10 by one level: Ctrl+G to line 2, Shift+Down to select through
line 10, Tab (VS Code indents by four spaces in a file with no indentation yet), save.
The gold file is the input with lines 2-10 indented so."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import cloud_dest, hotkey, press, put_cloud, put_download, typewrite, wait_window

LINES = [f"x{i} = {i}" for i in range(1, 13)]


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, "\n".join(LINES) + "\n")
    gold = [("    " + x if 2 <= i <= 10 else x) for i, x in enumerate(LINES, 1)]
    (dest,) = cloud_dest(task)
    put_cloud(cache, dest, "\n".join(gold) + "\n")


def solve(env: Any) -> None:
    wait_window(env, title="test.py", timeout=90, settle=3.0)
    env.step(hotkey("ctrl", "g"), pause=1.0)
    env.step(typewrite("2\n"), pause=1.0)
    env.step(press("home"), pause=0.3)
    env.step("pyautogui.keyDown('shift'); pyautogui.press('down', presses=9); pyautogui.keyUp('shift')", pause=0.5)
    env.step(press("tab"), pause=0.5)
    env.step(hotkey("ctrl", "s"), pause=1.5)
