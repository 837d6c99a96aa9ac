#!/usr/bin/env bash
# Every test, Rust and Python, against real Xvfb and a real server. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's start, in seconds since this script began: a CI log then says where a slow
# run's time went (set-up, builds or a test tier), not just its total.
phase() { echo "== [+${SECONDS}s] $*"; }
phase setup
# (`--osworld` brings the desktop and web profiles' too: Chromium, chromium-driver, the miniwob
# package.) The tests also need the SB3 extra (torch, ~2 min to install the first time) and the
# static checkers; the main job's setup stays without them.
DESKGYM_PIP_EXTRAS="${DESKGYM_PIP_EXTRAS:+$DESKGYM_PIP_EXTRAS,}sb3,train,lint,osworld,agents,ray,wrappers" scripts/setup.sh --osworld
# VS Code for OSWorld's vs_code tasks (code-server; npm's registry, once per machine).
scripts/install-code-server.sh
scripts/setup-lerobot.sh
scripts/setup-rllib.sh
scripts/setup-faces.sh
# OSWorld's wheel without its dependencies (the osworld extra brings the light ones):
# the OSWorld shim's tests run its controllers, getters and metrics, and the a11y tests
# its agents' own tree filter (mm_agents) on deskgym's XML.
.venv/bin/pip install -q --disable-pip-version-check --no-deps desktop-env==1.0.2
# librosa, which one metric of the solution sample calls (compare_audios; the
# osworld-full extra has it, with easyocr's torch, which no test needs).
.venv/bin/pip install -q --disable-pip-version-check librosa
phase checks
cargo fmt --all --check
# Modules depend one way (server, env-worker, the Python package).
python3 scripts/check_layers.py
python3 scripts/check_layers.py --check-layout docs/layout.md
cargo clippy --workspace --all-targets --quiet -- -D warnings
# Binaries first: the tests spawn deskgym-task-app, deskgym-sandbox-agent and
# deskgym-server.
phase build
cargo build --workspace --bins
phase rust-tests
cargo test --workspace
(cd python-client && ../.venv/bin/python -m mypy deskgym)
phase fast-tier
# The fast tier first (in-memory desktops, no X; ~30 s): client and pool logic fails fast.
DESKGYM_TEST_BACKEND=fake DESKGYM_SERVER="$PWD/target/debug/deskgym-server" .venv/bin/python -m pytest -q -p no:cacheprovider python-client/tests
phase real-tier
# The 30 slowest tests, so a run that grew shows which.
DESKGYM_SERVER="$PWD/target/debug/deskgym-server" .venv/bin/python -m pytest -q --durations=30 python-client/tests
phase done
echo "all tests passed"
