"""Add ~/data1 and ~/data2 to the open workspace: the workspace file's folder list
(VS Code follows its file), edited in a terminal with jq. The workspace file holds the
project folder only."""

from __future__ import annotations

import json
import pathlib
from typing import Any

from _common import put_download, terminal, type_line
from _vscode import ready


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, json.dumps({"folders": [{"path": "project"}], "settings": {}}, indent="\t") + "\n")


def solve(env: Any) -> None:
    ready(env)
    terminal(env)
    type_line(env, "cd ~ && jq '.folders += [{\"path\": \"data1\"}, {\"path\": \"data2\"}]' project.code-workspace "
                   "> /tmp/ws.json && mv /tmp/ws.json project.code-workspace", pause=1.5)
