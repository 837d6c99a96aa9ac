"""Have Chrome delete browsing data when it closes: open chrome://settings/content/siteData
and choose "Delete data sites have saved to your device when you close all windows" with a
click, as a user does; Chrome writes the content setting to its Preferences, which the
metric reads after a restart (the solve still does that, for a Chrome that lets it count).

Unsolvable here: the getter scores 1 when `profile.default_content_setting_values` merely
exists, and Chromium 156 writes `default_content_setting_values.has_migrated_local_network_access`
into every profile it opens (its local-network-access migration; Chrome on OSWorld's image
predates it). The key lives inside the dict the getter tests, so no home state keeps the
dict absent once the browser has started: the no-action score is 1 whatever the home holds."""
from __future__ import annotations

from typing import Any

from _apps import click_named, open_url

UNSOLVABLE = ("scores 1 with no action: Chromium 156 writes profile.default_content_setting_values."
              "has_migrated_local_network_access into every profile it opens, and the getter only tests that "
              "default_content_setting_values exists (OSWorld's older Chrome writes no such key)")

CHOICE = "Delete data sites have saved to your device when you close all windows"


def solve(env: Any) -> None:
    open_url(env, "chrome://settings/content/siteData")
    click_named(env, "radio-button", CHOICE)
    env.step("WAIT", pause=2.0)  # Chrome saves its Preferences a moment after a change
