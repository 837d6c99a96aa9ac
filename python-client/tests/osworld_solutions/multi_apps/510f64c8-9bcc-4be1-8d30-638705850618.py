"""Start VS Code on ~/Desktop/project from the terminal: in the terminal the setup opened,
type `code ~/Desktop/project`, as the task asks; bash keeps the line in its history
(the metric greps ~/.bash_history for "code ") and the window opens on the folder, which
the eval extension's OpenProject command writes to ~/OpenProject.txt for the metric.

The eval extension is OSWorld's file (vscodeEvalExtension.zip, a download): its stand-in
(``deskgym.osworld.standins``, the one ``--check`` uses) is a small extension with that
command (the open folder's name, no newline)."""
from __future__ import annotations

import pathlib
from typing import Any

from _common import put_download, type_line, until, wait_window, window

from deskgym.osworld.standins import stand_in


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, stand_in("vscodeEvalExtension.zip"), "vscodeEvalExtension.zip")
    put_download(cache, task, 'print("Hello, project")\n', "main.py")
    put_download(cache, task, "# project\n", "README.md")
    put_download(cache, task, "{}\n", "settings.json")


def solve(env: Any) -> None:
    wait_window(env, wm_class="Gnome-terminal", timeout=30, settle=2.0)
    type_line(env, "code ~/Desktop/project", pause=2.0)
    wait_window(env, title="project - Visual Studio Code", timeout=120, settle=5.0)
    until(lambda: not window(env, title="Welcome"), "the editor settled", 10)
