"""Have Chrome delete browsing data when it closes: open chrome://settings/content/siteData
and choose "Delete data sites have saved to your device when you close all windows" with a
click, as a user does; Chrome writes the content setting to its Preferences, which the
metric reads after a restart.

The getter scores 1 when `profile.default_content_setting_values` merely exists; the
profile's Chrome runs without local-network-access checks, whose one-time migration
(Chromium 156) writes a key into that dict in every profile it opens, so the dict exists
only once a default is set, as with OSWorld's older Chrome (decision 215)."""
from __future__ import annotations

from typing import Any

from _apps import click_named, open_url

CHOICE = "Delete data sites have saved to your device when you close all windows"


def solve(env: Any) -> None:
    open_url(env, "chrome://settings/content/siteData")
    click_named(env, "radio-button", CHOICE)
    env.step("WAIT", pause=2.0)  # Chrome saves its Preferences a moment after a change
