"""Turn off Pylance's missing-import reports (python.analysis.diagnosticSeverityOverrides
in the user settings.json).

Unsolvable here: the task's first setup step installs ms-python.python from the
marketplace (`code --install-extension ms-python.python`), and the desktop is offline
(getaddrinfo open-vsx.org fails), so the setup fails and the run is invalid."""

from __future__ import annotations

UNSOLVABLE = "setup installs ms-python.python from the marketplace: the desktop is offline (open-vsx.org unreachable)"
