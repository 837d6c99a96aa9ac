"""Turn on Chrome's warning for unsafe sites (Safe Browsing), which the setup turned off:
open chrome://settings/security and choose "Standard protection" with a click, as a user
does; Chrome writes it to its Preferences, which the metric reads after a restart."""
from __future__ import annotations

from typing import Any

from _apps import a11y_box, click_named, open_url
from _common import until


def solve(env: Any) -> None:
    open_url(env, "chrome://settings/security")
    click_named(env, "radio-button", "Standard protection")
    until(lambda: a11y_box(env, "radio-button", "Standard protection"), "the choice", 10)
    env.step("WAIT", pause=2.0)  # Chrome saves its Preferences a moment after a change
