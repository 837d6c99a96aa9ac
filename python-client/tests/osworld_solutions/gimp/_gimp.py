"""GIMP 2.10 as a user drives it from the keyboard: its window once it takes keys, a menu
item by its mnemonics, a dialog opened that way (again if the first keys were lost)."""

from __future__ import annotations

from typing import Any

from _common import hotkey, press, until, wait_window, window

__all__ = ["dialog", "keys", "ready"]


def ready(env: Any, image: str | None = None, timeout: float = 90) -> Any:
    """GIMP's window (the image's, ``[image]`` in its title, when the task opened one),
    once it takes keys."""
    title = f"[{image}]" if image else "GNU Image Manipulation Program"
    return wait_window(env, title=title, wm_class="Gimp", timeout=timeout, settle=2.0)


def keys(env: Any, *seq: str, pause: float = 0.6) -> None:
    """Presses each of ``seq`` in turn: ``"alt+i"`` as a chord, ``"p"`` as one key."""
    for k in seq:
        env.step(hotkey(*k.split("+")) if "+" in k else press(k), pause=pause)


def dialog(env: Any, title: str, *seq: str, tries: int = 3, timeout: float = 10) -> Any:
    """Opens the dialog titled ``title`` with the keys ``seq`` (a menu and its items);
    a menu the app opened late, or not at all, is closed and the keys pressed again."""
    for _ in range(tries):
        keys(env, *seq)
        try:
            return wait_window(env, title=title, timeout=timeout, settle=1.0)
        except AssertionError:
            env.step(press("escape"), pause=0.5)
            env.step(press("escape"), pause=0.5)
    return until(lambda: window(env, title=title), f"dialog {title}", 1)
