"""Create the local folders COMPANY and UNIVERSITY: Local Folders' context menu, New
Folder…, each name. The profile is OSWorld's (an account and Local Folders: `_tb`), as
the generic stand-in (no account: Thunderbird opens on its account setup, no Local
Folders) would not let a user do it."""

from __future__ import annotations

import pathlib
from typing import Any

from _tb import main_window, new_local_folder, put_profile


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_profile(cache, task)


def solve(env: Any) -> None:
    main_window(env)
    for name in ("COMPANY", "UNIVERSITY"):
        new_local_folder(env, name)
