#!/usr/bin/env bash
# Every test, Rust and Python, against real Xvfb and a real server. `.ci/run` calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# Binaries first: the tests spawn deskgym-task-app and deskgym-server.
cargo build --workspace --bins
cargo test --workspace
DESKGYM_SERVER="$PWD/target/debug/deskgym-server" .venv/bin/python -m pytest -q python-client/tests
echo "all tests passed"
