"""Make the terminal open at 132x43 for good: the default profile's default size, set
with gsettings in a terminal (what Preferences > Profile > Initial terminal size saves)."""

from __future__ import annotations

from typing import Any

from _common import hotkey, terminal, type_line

SCHEMA = "org.gnome.Terminal.Legacy.Profile:/org/gnome/terminal/legacy/profiles:/:$P/"


def solve(env: Any) -> None:
    terminal(env)
    type_line(env, "P=$(gsettings get org.gnome.Terminal.ProfilesList default | tr -d \"'\"); "
                   f"gsettings set {SCHEMA} default-size-columns 132; gsettings set {SCHEMA} default-size-rows 43",
              pause=1.5)
    # The metric opens a terminal of its own: this one goes, as a user closes it.
    env.step(hotkey("ctrl", "shift", "q"), pause=1.0)
