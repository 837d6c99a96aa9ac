"""Copy every .jpg under ~/Desktop/photos (recursively) into ~/Desktop/cpjpg: in a
terminal, `find ... -exec cp`. Stand-ins are the photos (the metric lists file names)."""

from __future__ import annotations

from typing import Any

from _common import terminal, type_line


def solve(env: Any) -> None:
    terminal(env)
    type_line(env, "find ~/Desktop/photos -name '*.jpg' -exec cp {} ~/Desktop/cpjpg/ \\;")
