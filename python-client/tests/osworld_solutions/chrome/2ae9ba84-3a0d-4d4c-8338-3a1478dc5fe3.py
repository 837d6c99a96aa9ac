"""Rename the Chrome profile to Thomas: open chrome://settings/manageProfile, click the
Name field, replace its text with "Thomas" and press Enter, as a user does; Chrome writes
the name to its Preferences, which the metric reads after a restart."""
from __future__ import annotations

from typing import Any

from _apps import click_named, open_url
from _common import hotkey, type_line


def solve(env: Any) -> None:
    open_url(env, "chrome://settings/manageProfile")
    click_named(env, "entry", "Name")
    env.step(hotkey("ctrl", "a"), pause=0.3)
    type_line(env, "Thomas", pause=2.0)  # Chrome saves its Preferences a moment after a change
