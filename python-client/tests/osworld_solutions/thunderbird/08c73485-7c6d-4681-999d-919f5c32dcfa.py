"""Apply message filters automatically to subfolders (superuser's answer): in the Config
Editor (Settings > Config Editor…), add `mail.server.default.applyIncomingFilters` as
true and toggle `mail.imap.use_status_for_biff` to false. On OSWorld's profile (`_tb`).

The metric's postconfig closes the window of class `Mail.thunderbird` (`wmctrl -x`,
strict); Debian's Thunderbird names its class `thunderbird-default` (application.ini
RemotingName), so that step finds no window: recorded as failed and excused (decision
166), as OSWorld's server answers 200 whatever wmctrl found; the prefs the metric reads
reach prefs.js without that close (0 with no action, 1 after)."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import hotkey
from _tb import config_editor, main_window, put_profile, set_pref


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_profile(cache, task)


def solve(env: Any) -> None:
    main_window(env)
    config_editor(env)
    set_pref(env, "mail.server.default.applyIncomingFilters", "Add")
    set_pref(env, "mail.imap.use_status_for_biff", "Toggle")
    env.step(hotkey("ctrl", "w"), pause=1.0)  # the Config Editor's tab closed, as a user leaves it
