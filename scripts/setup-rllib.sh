#!/usr/bin/env bash
# A venv for RLlib (python-client/examples/rllib_ppo.py and tests/test_rllib.py): RLlib
# pins gymnasium 1.2.2, the miniwob package needs >= 1.2.3, so RLlib cannot share .venv.
# It reuses .venv's packages (torch, numpy, grpcio, deskgym) through a .pth placed after
# its own, and installs only what RLlib adds (ray, gymnasium 1.2.2, dm-tree...). Safe to
# run again; needs scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || { echo "setup-rllib: run scripts/setup.sh first" >&2; exit 1; }
if [ ! -x .venv-rllib/bin/python ]; then
  .venv/bin/python -c 'import sys; print(sys.base_prefix)' >/dev/null
  "$(.venv/bin/python -c 'import sys; print(sys._base_executable)')" -m venv .venv-rllib
fi
site() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }
site .venv/bin/python > "$(site .venv-rllib/bin/python)/deskgym-main-venv.pth"
# pip sees .venv's packages too: it notes that it leaves them alone ("outside
# environment") and that .venv's miniwob wants a newer Gymnasium; both are expected.
.venv-rllib/bin/pip install -q --disable-pip-version-check "ray[rllib]==2.60.0" 2>&1 \
  | grep -v -e "outside environment" -e "^miniwob .* requires gymnasium" -e "dependency resolver does not" \
      -e "^desktop-env .* requires" || true
.venv-rllib/bin/python -c 'import ray.rllib, gymnasium, deskgym, torch; assert gymnasium.__version__ == "1.2.2", gymnasium.__version__'
echo "setup-rllib: ok (.venv-rllib/bin/python)"
