#!/usr/bin/env bash
# Installs code-server (VS Code served to a browser; npm's `code-server` package) under
# /usr/local/lib/code-server, where the `osworld` profile's `code` finds it. VS Code is
# not in Debian. Safe to run again; does nothing when this version is there.
#
# Only npm's registry and Debian's packages are used: `npm install -g code-server` would
# fetch a dependency from GitHub (vscode-proxy-agent, pinned to a commit) and ripgrep's
# binary from GitHub releases, so this unpacks the package itself, points that one
# dependency at its registry release (the same version), takes ripgrep from Debian, and
# builds the native modules against the installed Node's headers. Needs Node 20
# (code-server 4.96's; Debian 12's own nodejs is 18).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
VERSION=4.96.4
DEST=/usr/local/lib/code-server-$VERSION
LINK=/usr/local/lib/code-server
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo

if [ -f "$DEST/.installed" ] && [ "$(readlink "$LINK" 2>/dev/null)" = "$DEST" ]; then
  exit 0
fi
node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
if [ "$node_major" != 20 ]; then
  echo "install-code-server: code-server $VERSION needs Node 20; this host has ${node_major:-none}" >&2
  exit 1
fi
PKGS=(build-essential python3 pkg-config libx11-dev libxkbfile-dev libsecret-1-dev libkrb5-dev ripgrep)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
nodedir="$(dirname "$(dirname "$(command -v node)")")"  # headers in <prefix>/include/node
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack -q "code-server@$VERSION" >/dev/null)
$SUDO rm -rf "$DEST"
$SUDO mkdir -p "$DEST"
$SUDO tar xzf "$work/code-server-$VERSION.tgz" -C "$DEST" --strip-components=1
npm_q=(--omit=dev --no-audit --no-fund --loglevel=error)
cd "$DEST"
$SUDO npm ci "${npm_q[@]}" --ignore-scripts
$SUDO npm rebuild --nodedir="$nodedir" argon2 >/dev/null
cd lib/vscode
$SUDO python3 - <<'EOF'
import json
p = "npm-shrinkwrap.json"
d = json.load(open(p))
e = d["packages"]["node_modules/@vscode/proxy-agent"]
if e["resolved"].startswith("git"):
    e["resolved"] = f"https://registry.npmjs.org/@vscode/proxy-agent/-/proxy-agent-{e['version']}.tgz"
    e.pop("integrity", None)
json.dump(d, open(p, "w"), indent=2)
EOF
$SUDO npm install "${npm_q[@]}" --ignore-scripts
$SUDO mkdir -p node_modules/@vscode/ripgrep/bin
$SUDO ln -sf /usr/bin/rg node_modules/@vscode/ripgrep/bin/rg
$SUDO npm rebuild --nodedir="$nodedir" kerberos @parcel/watcher @vscode/deviceid @vscode/spdlog native-watchdog node-pty >/dev/null
# What code-server's own postinstall does once the modules are there.
$SUDO ln -sfn node_modules node_modules.asar
(cd bin/remote-cli && $SUDO ln -sfn code-linux.sh code-server)
(cd bin/helpers && $SUDO ln -sfn browser-linux.sh browser.sh)
(cd extensions && $SUDO npm ci "${npm_q[@]}")
node "$DEST/out/node/entry.js" --version >/dev/null
$SUDO touch "$DEST/.installed"
$SUDO ln -sfn "$DEST" "$LINK"
echo "install-code-server: code-server $VERSION in $LINK"
# A home built before code-server was here lacks VS Code's first-start state
# (~/.config/Code/User): build it again now that the editor can start.
if [ -d /var/lib/deskgym/homes/osworld ]; then
  $SUDO /usr/bin/python3 "$HERE/osworld-home.py"
fi
