"""Make VLC's volume slider black-ish: Tools > Preferences, Show settings: All, Interface >
Main interfaces > Qt, "Define the colors of the volume slider" set to four dark greys
(its twelve numbers are the R;G;B of the slider's four colour stops), Save (superuser's
answer). VLC writes qt-slider-colours to vlcrc; with no action the default (green to
red) stays."""

from __future__ import annotations

from typing import Any

from _common import hotkey, typewrite
from _vlc import advanced_qt_page, save_preferences

#: Four dark greys, every channel under the metric's 100.
DARK = "20;20;20;40;40;40;60;60;60;80;80;80"


def solve(env: Any) -> None:
    advanced_qt_page(env)
    env.step("pyautogui.click(1828, 617)", pause=0.5)  # Define the colors of the volume slider
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite(DARK), pause=0.5)
    save_preferences(env)
