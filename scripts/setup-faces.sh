#!/usr/bin/env bash
# A venv for the trainer faces (deskgym.openenv, deskgym_verifiers, deskgym.skyrl and
# python-client/tests/faces): verifiers 0.4.0 pins mcp==2.0.0, the `agents` extra (the MCP
# server, deskgym.mcp) needs mcp<2, so they cannot share .venv. It reuses .venv's packages
# (grpcio, numpy, gymnasium, deskgym) through a .pth placed after its own, and installs only
# what the three frameworks add (gradio, which openenv-core imports, pins Pillow < 13:
# .venv-faces gets its own Pillow 12), plus `uv`: verifiers' chat harness runs its model loop as a
# PEP 723 script that uv prepares (from PyPI the first time). Safe to run again; needs
# scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "setup-faces: run scripts/setup.sh first" >&2; exit 1; }
if [ ! -x .venv-faces/bin/python ]; then
  "$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" -m venv .venv-faces
fi
site() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
site .venv/bin/python > "$(site .venv-faces/bin/python)/deskgym-main-venv.pth"
# The pins of python-client/pyproject.toml's openenv, verifiers and skyrl extras.
# pip sees .venv's packages too and notes the ones it leaves alone; both are expected.
.venv-faces/bin/pip install -q --disable-pip-version-check "openenv-core==0.3.0" "verifiers==0.4.0" "skyrl-gym==0.4.0" uv 2>&1 \
  | grep -v -e "outside environment" -e "^pdfplumber .* requires" -e "dependency resolver does not" -e "^a2c-smcp .* requires" \
      -e "^desktop-env .* requires" || true
.venv-faces/bin/python -c 'import openenv.core, verifiers.v1, skyrl_gym, deskgym, pytest'
echo "setup-faces: ok (.venv-faces/bin/python)"
