"""Append "<br/>" to each line of "1\\n2\\n3" into output.txt: `sed` in the terminal the
setup opened. `eval.sh` (the postconfig's download) checks ~/output.txt as OSWorld's does."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import put_download, type_line, wait_window

EVAL = """#!/bin/bash
if [ -f output.txt ] && [ "$(cat output.txt)" = "$(printf '1<br/>\\n2<br/>\\n3<br/>')" ]; then
  echo "Success: The task has been completed correctly."
else
  echo "Failure: output.txt is missing or wrong."
fi
"""


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, EVAL, "eval.sh")


def solve(env: Any) -> None:
    wait_window(env, wm_class="Gnome-terminal", timeout=30, settle=1.5)
    type_line(env, "printf '1\\n2\\n3\\n' | sed 's|$|<br/>|' > output.txt")
