"""Helpers the known-good solutions share (the contract: /work/notes/solutions.md, and
``deskgym.osworld.suite.solution_task``). A solution module imports them by name::

    from _common import put_download, terminal, type_line, wait_window

(the loader puts this folder, and the module's own domain folder for its ``_<name>.py``
helpers, on ``sys.path``).

Two kinds: writers of a task's files, for ``files(cache, task)`` (``cache`` is the
task's own folder, ``<cache_dir_base>/<task id>``, in desktop-env 1.0.2's layout:
a ``download`` step's file at ``<uuid5(URL, url)>_<basename(path)>``, a ``cloud_file``
getter's at ``<dest>``), and acting helpers for ``solve(env)``, which go through
``env.step`` as an OSWorld agent's actions do (observing through ``env.deskgym`` is
allowed: windows, screenshots, the a11y tree).
"""

from __future__ import annotations

import os
import pathlib
import time
import uuid
from collections.abc import Callable
from typing import Any

__all__ = ["cloud_dest", "download_name", "downloads", "exec_in_desktop", "hotkey", "press", "put_cloud",
           "put_download", "read_file", "terminal", "titles", "type_line", "typewrite", "until", "wait_window",
           "window"]


# -- a task's files ------------------------------------------------------------------------


def download_name(url: str, path: str) -> str:
    """The cache file name desktop-env gives a download of ``url`` to ``path``."""
    return f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{os.path.basename(path)}"


def downloads(task: dict[str, Any]) -> list[dict[str, str]]:
    """Every ``{"url", "path"}`` the task's setup downloads, in order (config steps of
    type ``download``; a postconfig's too)."""
    steps = list(task.get("config", [])) + list((task.get("evaluator") or {}).get("postconfig", []))
    return [f for s in steps if s.get("type") == "download" for f in s["parameters"]["files"]]


def put_download(cache: pathlib.Path, task: dict[str, Any], data: bytes | str, path: str | None = None) -> pathlib.Path:
    """``data`` as the task's download to ``path`` (the desktop path, or its basename;
    default: the task's only download), where desktop-env's SetupController looks first."""
    files = [f for f in downloads(task) if path is None or f["path"] == path or os.path.basename(f["path"]) == path]
    assert len(files) == 1 or (files and path is not None), f"{task['id']}: downloads {downloads(task)}, asked {path}"
    out = pathlib.Path(cache) / download_name(files[0]["url"], files[0]["path"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data.encode() if isinstance(data, str) else data)
    return out


def cloud_dest(task: dict[str, Any]) -> list[str]:
    """The ``dest`` of each ``cloud_file`` getter of the task's evaluator (``expected``
    and ``result``), in order."""
    ev = task.get("evaluator") or {}
    out: list[str] = []
    for key in ("expected", "result"):
        specs = ev.get(key) or []
        for spec in specs if isinstance(specs, list) else [specs]:
            if spec.get("type") == "cloud_file":
                dest = spec.get("dest")
                out += dest if isinstance(dest, list) else [dest]
    return out


def put_cloud(cache: pathlib.Path, dest: str, data: bytes | str) -> pathlib.Path:
    """``data`` as a ``cloud_file`` getter's file named ``dest`` (the gold a metric
    compares with, usually)."""
    out = pathlib.Path(cache) / dest
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data.encode() if isinstance(data, str) else data)
    return out


# -- acting ----------------------------------------------------------------------------------


def until(pred: Callable[[], Any], what: str, timeout: float = 60.0, every: float = 0.3) -> Any:
    """``pred()``'s first true value, polled; AssertionError naming ``what`` after ``timeout`` s."""
    t0 = time.monotonic()
    while not (v := pred()):
        assert time.monotonic() - t0 < timeout, f"no {what} within {timeout:.0f} s"
        time.sleep(every)
    return v


def titles(env: Any) -> list[str]:
    """The titles of the desktop's windows."""
    return [w.title for w in env.deskgym.windows()]


def window(env: Any, title: str | None = None, wm_class: str | None = None) -> Any:
    """The first window whose title contains ``title`` and whose class is ``wm_class``
    (case-insensitive; either may be left out), or None."""
    for w in env.deskgym.windows():
        if title is not None and title.lower() not in w.title.lower():
            continue
        if wm_class is not None and wm_class.lower() != (w.wm_class or "").lower():
            continue
        return w
    return None


def wait_window(env: Any, title: str | None = None, wm_class: str | None = None, timeout: float = 60.0,
                settle: float = 1.0) -> Any:
    """Waits for a window as :func:`window` finds it, then ``settle`` s for the app to take
    input (keys sent while it still starts up are lost); returns it."""
    w = until(lambda: window(env, title, wm_class), f"window {title or ''} {wm_class or ''}".strip(), timeout)
    if settle:
        env.step("WAIT", pause=settle)
    return w


def typewrite(text: str, interval: float = 0.01) -> str:
    """pyautogui code typing ``text`` (an action for ``env.step``)."""
    return f"pyautogui.typewrite({text!r}, interval={interval})"


def hotkey(*keys: str) -> str:
    return f"pyautogui.hotkey({', '.join(repr(k) for k in keys)})"


def press(key: str, presses: int = 1) -> str:
    return f"pyautogui.press({key!r}, presses={presses})"


def terminal(env: Any) -> Any:
    """Opens a terminal the way a user does (Ctrl+Alt+T) and waits for its window (by
    class: the title is "user@deskgym: ~" only once bash has started). Returns it."""
    env.step(hotkey("ctrl", "alt", "t"), pause=0.3)
    return wait_window(env, wm_class="Gnome-terminal", timeout=30)


def type_line(env: Any, line: str, pause: float = 1.0) -> None:
    """Types ``line`` and Enter (into the focused window: a terminal's shell, a dialog)."""
    env.step(typewrite(line + "\n"), pause=pause)


def exec_in_desktop(env: Any, code: str, pause: float = 0.5) -> None:
    """Python ``code`` run in the desktop as an action (OSWorld's pyautogui action space
    runs any Python): for a user's edit from outside an app (a file, a setting)."""
    env.step(code, pause=pause)


def read_file(env: Any, path: str) -> str:
    """A desktop file's text (observing: what an agent could ``cat``), '' if none."""
    r = env.deskgym.exec(["cat", path])
    return str(r.stdout) if r.ok else ""
