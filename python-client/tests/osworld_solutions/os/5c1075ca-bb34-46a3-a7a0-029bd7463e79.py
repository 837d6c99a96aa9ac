"""Copy every "*failed.ipynb" under the current tree into ./fails keeping the folders:
`find . -name '*failed.ipynb' -exec cp --parents {} fails \\;` in the terminal the setup
opened in ~/test_environment. `setup.sh` makes that tree and `eval.sh` checks the copy,
as OSWorld's (not fetchable here) do."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import put_download, type_line, wait_window

SETUP = """#!/bin/bash
rm -rf test_environment
mkdir -p test_environment/dir1/sub test_environment/dir2 test_environment/dir3
cd test_environment
echo '{}' > dir1/a_failed.ipynb
echo '{}' > dir1/sub/b_failed.ipynb
echo '{}' > dir2/c_failed.ipynb
echo '{}' > dir2/c_passed.ipynb
echo '{}' > dir3/notes.txt
"""
EVAL = """#!/bin/bash
cd ~/test_environment || { echo "Evaluation failed: no test_environment"; exit 0; }
want="./fails/dir1/a_failed.ipynb ./fails/dir1/sub/b_failed.ipynb ./fails/dir2/c_failed.ipynb"
got=$(find ./fails -type f 2>/dev/null | sort | tr '\\n' ' ' | sed 's/ $//')
if [ "$got" = "$want" ]; then echo "Evaluation successful."; else echo "Evaluation failed: $got"; fi
"""


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, SETUP, "setup.sh")
    put_download(cache, task, EVAL, "eval.sh")


def solve(env: Any) -> None:
    wait_window(env, wm_class="Gnome-terminal", timeout=30, settle=1.5)
    type_line(env, "cd ~/test_environment && mkdir -p fails && "
                   "find . -path ./fails -prune -o -name '*failed.ipynb' -exec cp --parents {} fails \\;")
