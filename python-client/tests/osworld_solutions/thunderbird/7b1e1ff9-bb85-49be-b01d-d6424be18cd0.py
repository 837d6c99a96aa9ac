"""Open the About Profiles tab inside Thunderbird: Help > Troubleshooting Information,
then its "about:profiles" link (Application Basics, Profiles). On OSWorld's profile (an
account: `_tb`), so Thunderbird opens on its three-pane window, not on its account setup."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import until
from _tb import a11y_box, click_named, main_window, menu_item, put_profile, scroll_to


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_profile(cache, task)


def solve(env: Any) -> None:
    w = main_window(env)
    menu_item(env, "h", "Troubleshooting Information")
    until(lambda: a11y_box(env, "page-tab", "Troubleshooting Information"), "the Troubleshooting tab", 30)
    scroll_to(env, "link", "about:profiles", (w.x + w.width // 2, w.y + w.height // 2))
    click_named(env, "link", "about:profiles")
    until(lambda: a11y_box(env, "page-tab", "About Profiles"), "the About Profiles tab", 30)
