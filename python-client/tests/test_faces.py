"""The trainer faces (OpenEnv, verifiers, SkyRL-gym) are tested by their frameworks' own
code in .venv-faces (scripts/setup-faces.sh: verifiers pins an mcp the agents extra
cannot share): this runs those tests, tests/faces/, there."""

from __future__ import annotations

import os
import subprocess

from conftest import REPO


def test_the_faces_pass_under_their_frameworks() -> None:
    python = REPO / ".venv-faces" / "bin" / "python"
    assert python.exists(), "run scripts/setup-faces.sh (scripts/test.sh does)"
    r = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REPO / "python-client" / "tests" / "faces")],
        capture_output=True, text=True, timeout=1200, cwd=REPO / "python-client", env={**os.environ},
    )
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout.splitlines()[-1] and "skipped" not in r.stdout.splitlines()[-1], r.stdout[-500:]
