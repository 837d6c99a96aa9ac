"""Set the minimal number of undo levels to 100: Edit > Preferences (System Resources, the
page it opens on), the undo-levels field by its mnemonic (Alt+U), OK; GIMP writes gimprc on
OK, where the metric reads `undo-levels`."""

from __future__ import annotations

from typing import Any

from _common import hotkey, typewrite, until, window
from _gimp import dialog, keys, ready


def solve(env: Any) -> None:
    ready(env)
    # Edit's items with P: Paste first, then Preferences.
    dialog(env, "Preferences", "alt+e", "p", "p", "enter")
    keys(env, "alt+u")
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite("100"), pause=0.3)
    keys(env, "tab", "alt+o")
    until(lambda: not window(env, title="Preferences"), "Preferences closed", timeout=10)
