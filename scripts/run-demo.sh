#!/usr/bin/env bash
# The main job: install what is needed, build in release, start deskgym-server on
# loopback (with the web console), run the random and the scripted pixel agent on every bundled task through
# make_vec, print what happened, write the records, stop the server.
# Extra arguments go to `python -m deskgym.demo` (e.g. --num-envs 8 --episodes 32, or
# --tasks miniwob/click-button,miniwob/enter-text for MiniWoB++ pages in Chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
case " $* " in
  *miniwob/*) scripts/setup.sh --web ;;
  *) scripts/setup.sh ;;
esac
echo "build: cargo build --release (first time: several minutes)"
cargo build --release --bins -q
source scripts/start-server.sh
# The server lists the installed miniwob package's pages as tasks miniwob/<name>.
DESKGYM_MINIWOB_DIR="$(.venv/bin/python -c 'from deskgym.registration import miniwob_dir; print(miniwob_dir() or "")')"
export DESKGYM_MINIWOB_DIR
# The console (loopback) shows every desktop live while the agents run.
start_server target/release/deskgym-server --console-listen 127.0.0.1:0
.venv/bin/python -m deskgym.demo --address "$DESKGYM_ADDRESS" "$@"
