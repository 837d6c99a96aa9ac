"""Install the extension in ~/test.vsix: in a terminal, `code --install-extension`
(VS Code's CLI). The .vsix is a minimal extension with no publisher (so VS Code names it
undefined_publisher.test, as the metric expects)."""

from __future__ import annotations

import io
import json
import pathlib
from typing import Any
import zipfile

from _common import put_download, terminal, type_line, until
from _vscode import ready

MANIFEST = """<?xml version="1.0" encoding="utf-8"?>
<PackageManifest Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011">
  <Metadata><Identity Language="en-US" Id="test" Version="0.0.1" Publisher="undefined_publisher"/>
    <DisplayName>test</DisplayName><Description xml:space="preserve">test</Description>
    <Properties><Property Id="Microsoft.VisualStudio.Code.Engine" Value="^1.0.0"/></Properties></Metadata>
  <Installation><InstallationTarget Id="Microsoft.VisualStudio.Code"/></Installation>
  <Dependencies/>
  <Assets><Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json" Addressable="true"/></Assets>
</PackageManifest>
"""


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    pkg = {"name": "test", "displayName": "test", "version": "0.0.1", "engines": {"vscode": "^1.0.0"},
           "main": "./extension.js", "activationEvents": []}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("extension.vsixmanifest", MANIFEST)
        z.writestr("[Content_Types].xml", '<?xml version="1.0" encoding="utf-8"?><Types xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/content-types"><Default Extension=".json" ContentType="application/'
                   'json"/><Default Extension=".js" ContentType="application/javascript"/><Default Extension=".vsixmanifest"'
                   ' ContentType="text/xml"/></Types>')
        z.writestr("extension/package.json", json.dumps(pkg))
        z.writestr("extension/extension.js", "exports.activate = () => {};\n")
    put_download(cache, task, buf.getvalue())


def solve(env: Any) -> None:
    ready(env)
    terminal(env)
    type_line(env, "code --install-extension ~/test.vsix", pause=3.0)
    until(lambda: "undefined_publisher.test" in env.deskgym.exec(["code", "--list-extensions"], timeout=60).stdout,
          "the extension installed", timeout=60, every=2.0)
