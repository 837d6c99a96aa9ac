"""Acting helpers for the chrome and multi_apps solutions: the browser's window, and a
click on a control found by its name in the accessibility tree (what an agent with the
a11y observation does: read the control's screen box, click its middle)."""

from __future__ import annotations

import re
from typing import Any

from _common import hotkey, type_line, until, window

__all__ = ["a11y_box", "browser", "click_named", "open_url"]


def browser(env: Any, timeout: float = 60) -> Any:
    """The browser's window (deskgym's ``google-chrome`` is Chromium: the class says which)."""
    return until(lambda: window(env, wm_class="Chromium") or window(env, wm_class="Google-chrome"), "browser", timeout)


def open_url(env: Any, url: str) -> None:
    """Types ``url`` into the focused browser's address bar (Ctrl+L) and opens it."""
    browser(env)
    env.step("WAIT", pause=1.0)
    env.step(hotkey("ctrl", "l"), pause=0.5)
    type_line(env, url, pause=2.0)


def a11y_box(env: Any, role: str, name: str) -> tuple[int, int, int, int] | None:
    """The screen box (x, y, w, h) of the first showing ``role`` element whose name is
    ``name`` in the desktop's accessibility tree, or None."""
    tree = env.controller.get_accessibility_tree() or ""
    pat = rf'<{role} name="{re.escape(name)}"[^>]*cp:screencoord="\((-?\d+), (-?\d+)\)" cp:size="\((\d+), (\d+)\)"'
    for m in re.finditer(pat, tree):
        x, y, w, h = (int(v) for v in m.groups())
        if w > 0 and h > 0 and x >= 0 and y >= 0:
            return x, y, w, h
    return None


def click_named(env: Any, role: str, name: str, timeout: float = 30) -> None:
    """Waits for the control in the accessibility tree and clicks its middle."""
    x, y, w, h = until(lambda: a11y_box(env, role, name), f"{role} {name!r}", timeout, every=1.0)
    env.step(f"pyautogui.click({x + w // 2}, {y + h // 2})", pause=1.0)
