#!/usr/bin/env bash
# A separate venv with LeRobot's own loader (lerobot 0.6 needs Python >= 3.12), used by
# python-client/tests/test_lerobot.py to load our LeRobot export the way users will.
# Safe to run again. ~3.5 min the first time (torch).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv-lerobot/bin/python ]; then
  py=""
  for c in python3.13 python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python "$HOME"/.pyenv/versions/3.13*/bin/python; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      py="$c"; break
    fi
  done
  if [ -z "$py" ]; then
    echo "setup-lerobot: no Python >= 3.12 found (LeRobot 0.6 needs one); install one (pyenv install 3.12)" >&2
    exit 1
  fi
  "$py" -m venv .venv-lerobot
fi
.venv-lerobot/bin/pip install -q --disable-pip-version-check "lerobot[dataset]==0.6.1"
echo "setup-lerobot: ok (.venv-lerobot/bin/python)"
