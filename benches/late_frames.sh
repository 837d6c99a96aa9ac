#!/usr/bin/env bash
# Web steps whose frame was not final when the settle returned, on two builds, under load
# (decision 219). Each build gets `late_frames.patch`: after every web reset and step, a
# second capture once X has been quiet for 150 ms, and a `DGLATE ... changed=` line on
# stderr saying whether it differs from the frame the settle returned. A MiniWoB++ page
# (click-checkboxes) has its two boxes clicked in turn, STEPS clicks per run, while two
# CPU hogs run; runs alternate between the builds, two rounds.
#
#   bash benches/late_frames.sh REV_BEFORE REV_AFTER [STEPS]     (a rev, or . for the tree)
#
# Needs the venv (scripts/setup.sh --osworld) and two debug builds (minutes each, cold;
# LATE_FRAMES_TARGET names a cargo target folder to build in and keep, warm next time).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
[ $# -ge 2 ] || { echo "usage: $0 REV_BEFORE REV_AFTER [STEPS]" >&2; exit 2; }
steps=${3:-400}
work=$(mktemp -d /tmp/deskgym-late.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work/src-"*' EXIT
for tag in before after; do
  rev=$([ $tag = before ] && echo "$1" || echo "$2")
  mkdir -p "$work/src-$tag" "$work/bin-$tag"
  if [ "$rev" = . ]; then
    git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$work/src-$tag"
  else
    git archive "$rev" | tar -xf - -C "$work/src-$tag"
  fi
  (cd "$work/src-$tag" && git apply "$repo/benches/late_frames.patch")
  target=${LATE_FRAMES_TARGET:-$work/target}
  (cd "$work/src-$tag" && CARGO_TARGET_DIR="$target" cargo build -q --bins -p deskgym-server -p deskgym-worker)
  for b in deskgym-server deskgym-sandbox-agent deskgym-task-app; do cp "$target/debug/$b" "$work/bin-$tag/"; done
done
cat > "$work/clicks.py" <<'PY'
import os, subprocess, sys
import gymnasium as gym, numpy as np
import deskgym  # noqa: F401 - registers the envs
from deskgym.registration import miniwob_dir
from miniwob.action import ActionTypes
srv = subprocess.Popen([os.environ["DESKGYM_SERVER"], "--listen", "127.0.0.1:0", "--idle-timeout-s", "0",
                        "--data-dir", sys.argv[2], "--miniwob-dir", str(miniwob_dir())], stdout=subprocess.PIPE, text=True)
env = gym.make("deskgym/miniwob-click-checkboxes-v0", address=srv.stdout.readline().strip().rsplit(" ", 1)[-1])
try:
    obs, _ = env.reset(seed=3)
    boxes = [e for e in obs["dom_elements"] if e["tag"] == "input_checkbox"]
    for t in range(int(sys.argv[1])):
        b = boxes[t % 2]
        c = np.array([b["left"][0] + b["width"][0] // 2, b["top"][0] + b["height"][0] // 2], dtype=np.float32)
        obs, _, term, trunc, _ = env.step(env.unwrapped.create_action(ActionTypes.CLICK_COORDS, coords=c))
        if term or trunc:
            obs, _ = env.reset(seed=3)
finally:
    env.close(); srv.terminate(); srv.wait()
PY
python3 -c 'while 1: pass' &
python3 -c 'while 1: pass' &
for round in 1 2; do
  for tag in before after; do
    log="$work/$tag-$round.log"
    t0=$SECONDS
    DESKGYM_SERVER="$work/bin-$tag/deskgym-server" .venv/bin/python "$work/clicks.py" "$steps" "$work/data-$tag" > "$log" 2>&1
    n=$(grep -c "DGLATE step" "$log" || true); late=$(grep "DGLATE step" "$log" | grep -c "changed=true" || true)
    rn=$(grep -c "DGLATE reset" "$log" || true); rlate=$(grep "DGLATE reset" "$log" | grep -c "changed=true" || true)
    echo "round $round $tag: steps not final at the settle $late/$n, resets $rlate/$rn, $((SECONDS - t0)) s"
  done
done
