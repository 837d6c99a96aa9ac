"""Turn off Pylance's missing-import reports (python.analysis.diagnosticSeverityOverrides
in the user settings.json), through the command palette and the settings file.

The task's first setup step installs ms-python.python from the marketplace by id. An
offline desktop installs it from the task's cache instead (``deskgym.osworld.cache fetch``
puts Open VSX's ``.vsix`` there; here, with no network, the stand-in: an extension of that
id with no code). The metric reads only the settings file."""

from __future__ import annotations

import json
from typing import Any

from _vscode import open_user_settings, replace_text

SETTINGS = {"python.analysis.diagnosticSeverityOverrides": {"reportMissingImports": "none"}}


def solve(env: Any) -> None:
    open_user_settings(env)
    replace_text(env, json.dumps(SETTINGS))
