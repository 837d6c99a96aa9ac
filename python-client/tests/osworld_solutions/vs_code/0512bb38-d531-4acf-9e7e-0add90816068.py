"""Install the extension in ~/test.vsix: in a terminal, `code --install-extension`
(VS Code's CLI). The .vsix is a minimal extension with no publisher (so VS Code names it
undefined_publisher.test, as the metric expects)."""

from __future__ import annotations

import pathlib
from typing import Any

from _common import put_download, terminal, type_line, until
from _vscode import ready

from deskgym.osworld.standins import vsix


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    put_download(cache, task, vsix("test", main_js="exports.activate = () => {};\n"))


def solve(env: Any) -> None:
    ready(env)
    terminal(env)
    type_line(env, "code --install-extension ~/test.vsix", pause=3.0)
    until(lambda: "undefined_publisher.test" in env.deskgym.exec(["code", "--list-extensions"], timeout=60).stdout,
          "the extension installed", timeout=60, every=2.0)
