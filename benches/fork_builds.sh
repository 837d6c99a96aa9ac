#!/usr/bin/env bash
# Forks on the debug and the release server in one run (issue 44's "both builds"): the
# same catalog (the bundled one, its desktop clock on, plus fork_depth.py's pages), each
# profile measured on both builds before the next, so the pairs see the same load.
#   benches/fork_builds.sh [PROFILES] [DEPTHS] [fork_depth.py options...]
# Builds both first (`cargo build --bins` and `--release --bins`).
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILES="${1:-tasks,desktop,office,calc,impress,browser,miniwob}"
DEPTHS="${2:-10,100,300}"
cargo build -q --bins
cargo build -q --release --bins
TAG_A=debug TAG_B=release exec benches/fork_ab.sh target/debug/deskgym-server \
  target/release/deskgym-server "$PROFILES" "$DEPTHS" "${@:3}"
