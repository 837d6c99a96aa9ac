"""Unzip the extension on the Desktop (the setup does) and load it in Chrome: as a user
does, open chrome://extensions, turn on Developer mode, click "Load unpacked" and pick
~/Desktop/helloExtension in the folder dialog (by keyboard); Chrome records the unpacked extension's
path in its Preferences, which the metric reads."""
from __future__ import annotations

import io
import json
import pathlib
import zipfile
from typing import Any

from _apps import a11y_box, click_named, open_url
from _common import hotkey, press, put_download, typewrite, until, wait_window, window

FOLDER = "/home/user/Desktop/helloExtension"
PREFERENCES = "/home/user/.config/google-chrome/Default/Preferences"


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    """The extension the task downloads: a folder `helloExtension` with a Manifest V3
    extension that adds a popup."""
    manifest = {"manifest_version": 3, "name": "Hello Extensions", "version": "1.0",
                "description": "Base Level Extension", "action": {"default_popup": "hello.html"}}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("helloExtension/manifest.json", json.dumps(manifest, indent=2))
        z.writestr("helloExtension/hello.html", "<html><body><h1>Hello Extensions</h1></body></html>\n")
    put_download(cache, task, buf.getvalue())


def solve(env: Any) -> None:
    open_url(env, "chrome://extensions")
    if not a11y_box(env, "push-button", "Load unpacked"):
        click_named(env, "toggle-button", "Developer mode")
    click_named(env, "push-button", "Load unpacked")
    wait_window(env, title="Select the extension directory", timeout=30, settle=2.0)
    # The dialog opens on Recent, where the location field only searches: Alt+D goes to
    # the Desktop folder first; then Ctrl+L, the folder's path, and Enter selects it.
    env.step(hotkey("alt", "d"), pause=1.5)
    env.step(hotkey("ctrl", "l"), pause=1.0)
    env.step(typewrite(FOLDER), pause=2.0)
    env.step(press("enter"), pause=2.0)
    until(lambda: not window(env, title="Select the extension directory"), "the dialog closed", 20)
    until(lambda: "Hello Extensions" in (env.controller.get_accessibility_tree() or ""), "the extension's card", 20)
    # Chrome commits its Preferences some seconds after a change (3 s measured; a fixed
    # 2 s wait lost the race): wait until the file names the folder, reading only.
    until(lambda: env.deskgym.exec(["grep", "-q", FOLDER, PREFERENCES]).ok, "Preferences naming the extension", 30)
