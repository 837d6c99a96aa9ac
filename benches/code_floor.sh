#!/usr/bin/env bash
# What a fresh VS Code costs on this host, outside any sandbox (issue 41, item 6): the
# `osworld` profile's `code` starts code-server, waits for its health route, then opens
# its Chromium app window; a VS Code reset waits for the window's "Visual Studio Code"
# title. Three ways, interleaved, in one run:
#   serial  as `code` does it, a fresh window profile each time (as every reset has);
#   warm    the same, the window profile kept from the runs before (Chromium's HTTP
#           and V8 code caches filled: what a template home holding them would give);
#   beside  Chromium's browser process started beside code-server (`--no-startup-window`),
#           the window opened into it once the server answers.
#
#   bash benches/code_floor.sh [ROUNDS]      (default 3; needs code-server, Xvfb, xdotool)
#
# Runs as root on the host, so Chromium gets --no-sandbox (the profile's runs as a user).
set -euo pipefail
rounds="${1:-3}"
CS=/usr/local/lib/code-server/out/node/entry.js
[ -f "$CS" ] || { echo "code_floor: no code-server (scripts/install-code-server.sh)" >&2; exit 1; }
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
Xvfb -displayfd 3 -screen 0 1280x720x24 -nolisten tcp 3>"$work/display" >/dev/null 2>&1 &
xvfb=$!
until [ -s "$work/display" ]; do sleep 0.05; done
export DISPLAY=":$(cat "$work/display")"
pids=("$xvfb")
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/data/User" "$work/data/Machine" "$work/ext"
# As the profile's machine settings: the title the reset waits for.
echo '{"window.title": "${dirty}${activeEditorShort}${separator}${rootName}${separator}Visual Studio Code", "workbench.startupEditor": "none"}' \
  >"$work/data/Machine/settings.json"
flags=(--no-sandbox --no-first-run --no-default-browser-check --disable-background-networking
       --disable-component-update --disable-sync --password-store=basic --disable-smooth-scrolling)
up() { python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/healthz', timeout=1)" 2>/dev/null; }
now() { date +%s.%N; }

# One start: prints "server_s title_s".
start() {
  local mode="$1" win="$2" t0 t1 t2 server browser=""
  t0="$(now)"
  node "$CS" --user-data-dir "$work/data" --extensions-dir "$work/ext" --auth none \
    --bind-addr "127.0.0.1:$port" --app-name "Visual Studio Code" --disable-telemetry \
    --disable-update-check --disable-workspace-trust --disable-getting-started-override \
    >/dev/null 2>&1 &
  server=$!
  pids+=("$server")
  if [ "$mode" = beside ]; then
    chromium --user-data-dir="$win" --no-startup-window "${flags[@]}" >/dev/null 2>&1 &
    browser=$!
  fi
  until up; do sleep 0.05; done
  t1="$(now)"
  chromium --user-data-dir="$win" --app="http://127.0.0.1:$port/" "${flags[@]}" >/dev/null 2>&1 &
  until xdotool search --name "Visual Studio Code" >/dev/null 2>&1; do sleep 0.05; done
  t2="$(now)"
  pkill -f -- "--user-data-dir=$win" || true
  [ -n "$browser" ] && wait "$browser" 2>/dev/null
  kill "$server"; wait "$server" 2>/dev/null || true
  # Until the window is gone, so the next title search does not find this one.
  while xdotool search --name "Visual Studio Code" >/dev/null 2>&1; do sleep 0.05; done
  python3 -c "print(f'{$t1 - $t0:.2f} {$t2 - $t0:.2f}')"
}

declare -A server title
for m in serial warm beside; do server[$m]=""; title[$m]=""; done
# The warm profile's first two loads fill its caches (V8 caches code on a script's
# second run); they are not counted.
for _ in 1 2; do start serial "$work/warm" >/dev/null; done
for r in $(seq "$rounds"); do
  for m in serial warm beside; do
    win="$work/win-$m-$r"
    [ "$m" = warm ] && win="$work/warm"
    read -r s t < <(start "$m" "$win")
    server[$m]+=" $s"; title[$m]+=" $t"
  done
done
echo "host: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $rounds rounds, interleaved"
echo
echo "| start | server answers, s | window titled, s (p50) | each |"
echo "|---|---|---|---|"
for m in serial warm beside; do
  python3 - "$m" "${server[$m]}" "${title[$m]}" <<'EOF'
import statistics, sys
m, s, t = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
print(f"| {m} | {statistics.median(s):.2f} | {statistics.median(t):.2f} | {', '.join(f'{x:.2f}' for x in t)} |")
EOF
done
echo
echo "warm window profile: $(du -sh "$work/warm" | cut -f1)"
