"""The agent package's old import paths: README, docs, examples and benches still import
``deskgym.axstream``, ``deskgym.mcp`` and ``deskgym.smcp``, which must be the modules
under ``deskgym.agents``, name for name."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize("name", ["axstream", "mcp", "smcp"])
def test_old_path_reexports_the_agents_module(name: str) -> None:
    old = importlib.import_module(f"deskgym.{name}")
    new = importlib.import_module(f"deskgym.agents.{name}")
    public = {n for n in vars(new) if not n.startswith("_")}
    missing = sorted(n for n in public if getattr(old, n, None) is not getattr(new, n))
    assert not missing, f"deskgym.{name} lacks {missing}"


@pytest.mark.parametrize("name", ["mcp", "smcp"])
def test_old_command_still_runs(name: str) -> None:
    r = subprocess.run([sys.executable, "-m", f"deskgym.{name}", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"python -m deskgym.{name}" in r.stdout


def test_reference_agents_stay_importable_from_the_package() -> None:
    from deskgym import agents
    from deskgym.agents import reference

    for n in agents.__all__:
        assert getattr(agents, n) is getattr(reference, n)
