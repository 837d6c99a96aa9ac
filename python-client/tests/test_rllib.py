"""RLlib's PPO trains on a bundled task through the example's env creator, in RLlib's
own venv (scripts/setup-rllib.sh: RLlib pins a Gymnasium the rest cannot use)."""

from __future__ import annotations

import re
import subprocess

from conftest import REPO


def test_the_rllib_example_trains_ppo_on_deskgym_envs(address: str) -> None:
    python = REPO / ".venv-rllib" / "bin" / "python"
    assert python.exists(), "run scripts/setup-rllib.sh (scripts/test.sh does)"
    r = subprocess.run(
        [str(python), str(REPO / "python-client" / "examples" / "rllib_ppo.py"), "--address", address, "--iterations", "2"],
        capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    steps = [float(m) for m in re.findall(r"^iteration \d: ([\d.]+) env steps", r.stdout, re.M)]
    # Two iterations of 64 sampled steps each, from envs stepping on the deskgym server.
    assert len(steps) == 2 and steps[0] >= 64 and steps[1] > steps[0], r.stdout
