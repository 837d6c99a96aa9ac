#!/usr/bin/env bash
# Sourced by the other scripts: starts $SERVER_BIN on a free loopback port in the
# background, sets DESKGYM_ADDRESS, and stops it (SIGTERM), with any other server it
# started, when the shell exits.
start_server() {
  local bin="$1"; shift
  local log
  log="$(mktemp -d)"
  "$bin" --listen 127.0.0.1:0 "$@" >"$log/out" 2>"$log/err" &
  DESKGYM_SERVER_PID=$!
  # Every server this shell started stops with it (a fleet bench starts several).
  DESKGYM_SERVER_PIDS="${DESKGYM_SERVER_PIDS:-} $DESKGYM_SERVER_PID"
  trap 'for p in $DESKGYM_SERVER_PIDS; do kill -TERM "$p" 2>/dev/null; done; for p in $DESKGYM_SERVER_PIDS; do wait "$p" 2>/dev/null || true; done' EXIT
  for _ in $(seq 1 100); do
    if grep -q "listening on" "$log/out" 2>/dev/null; then
      DESKGYM_ADDRESS="$(awk '/listening on/ {print $NF}' "$log/out")"
      export DESKGYM_ADDRESS
      echo "server: $bin on $DESKGYM_ADDRESS (log: $log/err)"
      # With --console-listen, its address is the next line.
      if [[ " $* " == *" --console-listen "* ]]; then
        for _ in $(seq 1 50); do
          if grep -q "console on" "$log/out" 2>/dev/null; then
            DESKGYM_CONSOLE="$(awk '/console on/ {print $NF}' "$log/out")"
            export DESKGYM_CONSOLE
            echo "console: open $DESKGYM_CONSOLE to watch the desktops live"
            break
          fi
          sleep 0.1
        done
      fi
      return 0
    fi
    sleep 0.1
  done
  echo "server did not start; its log:" >&2
  cat "$log/err" >&2
  return 1
}
