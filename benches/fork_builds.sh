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
PY="${PYTHON:-.venv/bin/python}"
cargo build -q --bins
cargo build -q --release --bins
dir="$(mktemp -d)"
"$PY" benches/fork_depth.py --write-profile "$dir/catalog.toml"
wob="$("$PY" -c 'from deskgym.registration import miniwob_dir; print(miniwob_dir())')"
# shellcheck source=../scripts/start-server.sh
source scripts/start-server.sh
for build in debug release; do
  start_server "target/$build/deskgym-server" --max-envs 8 --idle-timeout-s 0 \
    --profiles "$dir/catalog.toml" --miniwob-dir "$wob"
  declare "ADDR_$build=$DESKGYM_ADDRESS"
done
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at start"
for p in ${PROFILES//,/ }; do
  for build in debug release; do
    addr="ADDR_$build"
    "$PY" benches/fork_depth.py --address "${!addr}" --profiles "$p" --depths "$DEPTHS" \
      --rounds 1 --tag "$build: " "${@:3}"
  done
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
