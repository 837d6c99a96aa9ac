#!/usr/bin/env bash
# Does Chromium draw the same frame for the same state? Types the fork benchmark's text
# into its page (fork_depth.py's PAGE: a 200 px textarea that starts to scroll at its
# ninth line) RUNS times per set of flags, the sets interleaved so they see the same
# load, with jittered gaps between keys as an agent's steps have, and compares each
# run's final frame with the set's first (decision 216):
#   benches/chromium_repeat.sh [RUNS] [KEYS] [FLAGS_A] [FLAGS_B]
# Outside any sandbox (Xvfb, openbox, Chromium as this user, xdotool, ffmpeg's x11grab).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${1:-8}"; KEYS="${2:-210}"
SETS=("${3:-}" "${4:---ui-disable-partial-swap}")
PY="${PYTHON:-.venv/bin/python}"
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
"$PY" -c 'import sys; sys.path.insert(0, "benches"); import fork_depth; print(fork_depth.PAGE)' > "$dir/page.html"
# The desktop profile's own Chromium flags (server/profiles/catalog.toml) without the one
# under test, so each set adds only its own; as root, Chromium runs only with
# --no-sandbox (whose infobar --test-type hides).
mapfile -t BASE_FLAGS < <("$PY" -c 'import tomllib
argv = tomllib.load(open("server/profiles/catalog.toml", "rb"))["profiles"]["desktop"]["apps"]["chromium"]
print("\n".join(a for a in argv[1:] if a != "--ui-disable-partial-swap"))')
[ "$(id -u)" = 0 ] && BASE_FLAGS+=(--no-sandbox --test-type)

one() {  # one OUT FLAGS...: a fresh display, home and browser; KEYS keys; the frame
  local out=$1; shift
  local home; home="$(mktemp -d "$dir/home.XXXX")"
  mkdir -p "$home/.config/gtk-3.0"
  printf '[Settings]\ngtk-cursor-blink = false\ngtk-enable-animations = false\n' > "$home/.config/gtk-3.0/settings.ini"
  exec {fd}<> <(:)
  Xvfb -displayfd "$fd" -screen 0 1280x720x24 -nolisten tcp >/dev/null 2>&1 & local xp=$!
  local d; read -r -u "$fd" d; exec {fd}>&-
  export DISPLAY=":$d"
  HOME="$home" openbox >/dev/null 2>&1 & local op=$!
  HOME="$home" chromium --user-data-dir="$home/c" "${BASE_FLAGS[@]}" "$@" "file://$dir/page.html" >/dev/null 2>&1 &
  local cp=$!
  for _ in $(seq 120); do xdotool search --name "fork page" >/dev/null 2>&1 && break; sleep 0.5; done
  sleep 2
  xdotool mousemove 300 200 click 1
  python3 - "$KEYS" <<'EOF' || true
import random, subprocess, sys, time
keys, k = [], 0
while len(keys) < int(sys.argv[1]):
    keys += [{" ": "space"}.get(c, c) for c in f"line {k} of the form "] + ["Return"]
    k += 1
for i, key in enumerate(keys[: int(sys.argv[1])]):
    subprocess.run(["xdotool", "key", key])
    if i == 0:  # the page has the keys once its title shows the first
        for _ in range(100):
            if subprocess.run(["xdotool", "search", "--name", "value=l"], capture_output=True).returncode == 0:
                break
            time.sleep(0.2)
        else:
            sys.exit("the page took no keys")
    time.sleep(random.uniform(0, 0.12))
EOF
  sleep 1.5
  ffmpeg -loglevel error -y -f x11grab -draw_mouse 0 -video_size 1280x720 -i "$DISPLAY" -frames:v 1 "$out"
  kill "$cp" 2>/dev/null; sleep 0.5; kill "$op" "$xp" 2>/dev/null; wait "$cp" "$op" "$xp" 2>/dev/null || true
}

for i in $(seq "$RUNS"); do
  for s in 0 1; do
    # shellcheck disable=SC2086 # a set is a list of flags
    one "$dir/s$s-r$i.ppm" ${SETS[s]}
  done
done
for s in 0 1; do
  echo "flags [${SETS[s]}]: $(python3 - "$dir"/s$s-r*.ppm <<'EOF'
import sys
def pixels(p):
    _magic, size, _max, data = open(p, "rb").read().split(b"\n", 3)
    return int(size.split()[0]), data
w, first = pixels(sys.argv[1])
same = thumb = other = 0
for p in sys.argv[2:]:
    _, d = pixels(p)
    xs = [i // 3 % w for i in range(0, len(d), 3) if d[i:i + 3] != first[i:i + 3]]
    if not xs:
        same += 1
    elif min(xs) >= 615 and max(xs) <= 640:  # the textarea's scrollbar
        thumb += 1
    else:
        other += 1
print(f"{same} of {len(sys.argv) - 2} runs drew the first run's frame; {thumb} another scrollbar thumb; "
      f"{other} another frame (keys lost or the window elsewhere: not counted)")
EOF
)"
done
