"""VS Code (code-server in a window titled "Visual Studio Code") as a user drives it:
the command palette, the user settings.json, the editor's text."""

from __future__ import annotations

from typing import Any

from _common import hotkey, press, typewrite, until, wait_window, window


def ready(env: Any) -> Any:
    """The VS Code window, once it has its title (~9 s after the launch) and takes keys."""
    return wait_window(env, title="Visual Studio Code", timeout=90, settle=3.0)


def palette(env: Any, command: str) -> None:
    """Runs ``command`` from the command palette (Ctrl+Shift+P)."""
    env.step(hotkey("ctrl", "shift", "p"), pause=1.0)
    env.step(typewrite(command), pause=1.0)
    env.step(press("enter"), pause=2.0)


def open_user_settings(env: Any) -> None:
    """The user settings.json open in the editor."""
    ready(env)
    palette(env, "Preferences: Open User Settings (JSON)")
    until(lambda: window(env, title="settings.json"), "settings.json open", timeout=30)
    env.step("WAIT", pause=1.0)


def replace_text(env: Any, text: str, final_newline: bool = False) -> None:
    """The editor's whole text replaced by ``text``: select all, delete, type (what the
    editor closed on its own, brackets and quotes, follows the cursor and is deleted), save.
    Typing over the selection instead loses the text: with the whole file selected, a
    typed ``{`` surrounds the selection (editor.autoSurround) rather than replacing it."""
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(press("delete"), pause=0.3)
    env.step(typewrite(text, interval=0.02), pause=0.5)
    env.step(press("escape"), pause=0.3)  # a suggestion list would take the Enter
    env.step(hotkey("ctrl", "shift", "end"), pause=0.3)
    env.step(press("delete"), pause=0.3)
    if final_newline:
        env.step(press("enter"), pause=0.3)
    env.step(hotkey("ctrl", "s"), pause=1.5)
