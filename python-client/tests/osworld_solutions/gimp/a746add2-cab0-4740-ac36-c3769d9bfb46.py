"""Open the Vignette filter's window: Filters > Light and Shadow > Vignette... by keyboard
(Alt+R, L, V). GIMP records the action (`filters-vignette`) in action-history, which it
writes when the postconfig quits it."""

from __future__ import annotations

from typing import Any

from _gimp import dialog, ready


def solve(env: Any) -> None:
    ready(env, "dog_with_background")
    dialog(env, "Vignette", "alt+r", "l", "v")
