"""Raise VLC's maximum volume to 200 %: Tools > Preferences, Show settings: All,
Interface > Main interfaces > Qt, "Maximum Volume displayed" 200, Save (superuser's
answer)."""

from __future__ import annotations

from typing import Any

from _common import hotkey, typewrite
from _vlc import advanced_qt_page, save_preferences


def solve(env: Any) -> None:
    advanced_qt_page(env)
    env.step("pyautogui.click(1846, 797)", pause=0.5)  # Maximum Volume displayed
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite("200"), pause=0.5)
    save_preferences(env)
