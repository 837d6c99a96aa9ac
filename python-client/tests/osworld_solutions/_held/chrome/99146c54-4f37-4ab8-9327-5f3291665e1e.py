"""Have Chrome delete browsing data when it closes: open chrome://settings/content/siteData
and choose "Delete data sites have saved to your device when you close all windows" with a
click, as a user does; Chrome writes the content setting to its Preferences, which the
metric reads after a restart."""
from __future__ import annotations

from typing import Any

from _apps import click_named, open_url

CHOICE = "Delete data sites have saved to your device when you close all windows"


def solve(env: Any) -> None:
    open_url(env, "chrome://settings/content/siteData")
    click_named(env, "radio-button", CHOICE)
    env.step("WAIT", pause=2.0)  # Chrome saves its Preferences a moment after a change
