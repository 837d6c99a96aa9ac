#!/usr/bin/env bash
# Forks on two server binaries in one run (a change's before and after, or two builds):
# the bundled catalog (its desktop clock on) plus fork_depth.py's pages, each profile
# measured on A then B before the next, so the pairs see the same load.
#   benches/fork_ab.sh SERVER_A SERVER_B [PROFILES] [DEPTHS] [fork_depth.py options...]
# TAG_A / TAG_B name the rows (default A, B). A binary's sandbox agent must sit beside
# it (copy the tree's target/debug/deskgym-*).
set -euo pipefail
cd "$(dirname "$0")/.."
A="$1"; B="$2"
PROFILES="${3:-tasks,desktop,office,calc,impress,browser,miniwob}"
DEPTHS="${4:-10,100,300}"
TAG_A="${TAG_A:-A}"; TAG_B="${TAG_B:-B}"
PY="${PYTHON:-.venv/bin/python}"
dir="$(mktemp -d)"
"$PY" benches/fork_depth.py --write-profile "$dir/catalog.toml"
wob="$("$PY" -c 'from deskgym.registration import miniwob_dir; print(miniwob_dir())')"
# shellcheck source=../scripts/start-server.sh
source scripts/start-server.sh
start_server "$A" --max-envs 8 --idle-timeout-s 0 --profiles "$dir/catalog.toml" --miniwob-dir "$wob"
ADDR_A=$DESKGYM_ADDRESS
start_server "$B" --max-envs 8 --idle-timeout-s 0 --profiles "$dir/catalog.toml" --miniwob-dir "$wob"
ADDR_B=$DESKGYM_ADDRESS
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at start"
for p in ${PROFILES//,/ }; do
  "$PY" benches/fork_depth.py --address "$ADDR_A" --profiles "$p" --depths "$DEPTHS" \
    --rounds 1 --tag "$TAG_A: " "${@:5}"
  "$PY" benches/fork_depth.py --address "$ADDR_B" --profiles "$p" --depths "$DEPTHS" \
    --rounds 1 --tag "$TAG_B: " "${@:5}"
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
