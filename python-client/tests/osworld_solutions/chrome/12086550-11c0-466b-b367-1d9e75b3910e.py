"""Open the settings page where Chrome keeps passwords: as a user does, focus the address
bar (Ctrl+L), type chrome://password-manager/passwords and press Enter; the metric reads
the address bar from the accessibility tree."""
from __future__ import annotations

from typing import Any

from _common import hotkey, type_line, until, window

URL = "chrome://password-manager/passwords"


def browser(env: Any) -> Any:
    """The browser's window (deskgym's `google-chrome` is Chromium: the class says which)."""
    return until(lambda: window(env, wm_class="Chromium") or window(env, wm_class="Google-chrome"), "browser", 60)


def solve(env: Any) -> None:
    browser(env)
    env.step("WAIT", pause=1.0)
    env.step(hotkey("ctrl", "l"), pause=0.5)
    type_line(env, URL, pause=1.0)
    until(lambda: any("Password" in w.title for w in env.deskgym.windows()), "the password manager's page", 30)
