"""Start VS Code on ~/Desktop/project from the terminal: in the terminal the setup opened,
type `code ~/Desktop/project`, as the task asks; bash keeps the line in its history
(the metric greps ~/.bash_history for "code ") and the window opens on the folder, which
the eval extension's OpenProject command writes to ~/OpenProject.txt for the metric.

The eval extension is OSWorld's file (vscodeEvalExtension.zip, a download): its stand-in
here is a small extension with that command (the open folder's name, no newline)."""
from __future__ import annotations

import io
import json
import pathlib
import zipfile
from typing import Any

from _common import put_download, type_line, until, wait_window, window

MANIFEST = """<?xml version="1.0" encoding="utf-8"?>
<PackageManifest Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011">
  <Metadata><Identity Language="en-US" Id="eval" Version="0.0.1" Publisher="undefined_publisher"/>
    <DisplayName>eval</DisplayName><Description xml:space="preserve">eval</Description>
    <Properties><Property Id="Microsoft.VisualStudio.Code.Engine" Value="^1.0.0"/></Properties></Metadata>
  <Installation><InstallationTarget Id="Microsoft.VisualStudio.Code"/></Installation>
  <Dependencies/>
  <Assets><Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json" Addressable="true"/></Assets>
</PackageManifest>
"""
EXTENSION = """const vscode = require('vscode');
const fs = require('fs');
const path = require('path');
const os = require('os');
exports.activate = (context) => {
  context.subscriptions.push(vscode.commands.registerCommand('eval.OpenProject', () => {
    const folders = vscode.workspace.workspaceFolders || [];
    fs.writeFileSync(path.join(os.homedir(), 'OpenProject.txt'), folders.length ? folders[0].name : '');
  }));
};
"""


def vsix() -> bytes:
    pkg = {"name": "eval", "displayName": "eval", "version": "0.0.1", "engines": {"vscode": "^1.0.0"},
           "main": "./extension.js", "activationEvents": ["onCommand:eval.OpenProject"],
           "contributes": {"commands": [{"command": "eval.OpenProject", "title": "OpenProject"}]}}
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("extension.vsixmanifest", MANIFEST)
        z.writestr("[Content_Types].xml", '<?xml version="1.0" encoding="utf-8"?><Types xmlns="http://schemas.'
                   'openxmlformats.org/package/2006/content-types"><Default Extension=".json" ContentType="application/'
                   'json"/><Default Extension=".js" ContentType="application/javascript"/><Default Extension=".vsixmanifest"'
                   ' ContentType="text/xml"/></Types>')
        z.writestr("extension/package.json", json.dumps(pkg))
        z.writestr("extension/extension.js", EXTENSION)
    return buf.getvalue()


def files(cache: pathlib.Path, task: dict[str, Any]) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("vscodeEvalExtension/eval-0.0.1.vsix", vsix())
    put_download(cache, task, buf.getvalue(), "vscodeEvalExtension.zip")
    put_download(cache, task, 'print("Hello, project")\n', "main.py")
    put_download(cache, task, "# project\n", "README.md")
    put_download(cache, task, "{}\n", "settings.json")


def solve(env: Any) -> None:
    wait_window(env, wm_class="Gnome-terminal", timeout=30, settle=2.0)
    type_line(env, "code ~/Desktop/project", pause=2.0)
    wait_window(env, title="project - Visual Studio Code", timeout=120, settle=5.0)
    until(lambda: not window(env, title="Welcome"), "the editor settled", 10)
