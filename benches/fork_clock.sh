#!/usr/bin/env bash
# Forks with and without the replayed desktop clock (decision 199), in one run: the same
# server binary twice, one on the bundled catalog with every profile's `clock` off (the
# apps read the host's time, the bundled default) and one with it on (the apps run on
# the clock a fork replays), each with fork_depth.py's pages; each profile is measured
# on both before the next, so the pairs see the same load.
#   benches/fork_clock.sh [SERVER_BIN] [PROFILES] [DEPTHS]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/debug/deskgym-server}"
PROFILES="${2:-calc,impress,miniwob,stamps,browser,office}"
DEPTHS="${3:-10,100}"
PY="${PYTHON:-.venv/bin/python}"
dir="$(mktemp -d)"
"$PY" benches/fork_depth.py --write-profile "$dir/without.toml" --bundled-clock off
"$PY" benches/fork_depth.py --write-profile "$dir/with.toml" --bundled-clock on
wob="$("$PY" -c 'from deskgym.registration import miniwob_dir; print(miniwob_dir())')"
# shellcheck source=../scripts/start-server.sh
source scripts/start-server.sh
start_server "$BIN" --max-envs 8 --idle-timeout-s 0 --profiles "$dir/without.toml" --miniwob-dir "$wob"
WITHOUT="$DESKGYM_ADDRESS"
start_server "$BIN" --max-envs 8 --idle-timeout-s 0 --profiles "$dir/with.toml" --miniwob-dir "$wob"
WITH="$DESKGYM_ADDRESS"
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg) at start"
for p in ${PROFILES//,/ }; do
  "$PY" benches/fork_depth.py --address "$WITHOUT" --profiles "$p" --depths "$DEPTHS" --rounds 1 \
    --tag "host's time: "
  "$PY" benches/fork_depth.py --address "$WITH" --profiles "$p" --depths "$DEPTHS" --rounds 1 \
    --tag "replayed clock: "
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg) at the end"
