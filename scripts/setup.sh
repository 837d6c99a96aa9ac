#!/usr/bin/env bash
# Installs what deskgym needs on Debian 12: system packages (as root, or through sudo),
# then the Python client with its test extras into ./.venv. Safe to run again.
# `--desktop` also installs what the bundled `desktop` profile runs (bubblewrap,
# openbox, D-Bus, AT-SPI, terminal, file manager, editor, Chromium, LibreOffice...);
# `--osworld` adds the `osworld` profile's applications (GIMP, VLC, Thunderbird...);
# `--web` what the `web` profile (MiniWoB++ tasks) runs: bubblewrap and Chromium, and
# the `miniwob` package whose pages the server lists as tasks.
# `DESKGYM_SETUP_ONLY=system` stops before .venv, `=python` does only .venv (scripts/test.sh
# builds the Rust side while .venv installs).
set -euo pipefail
cd "$(dirname "$0")/.."
ONLY="${DESKGYM_SETUP_ONLY:-}"
case "$ONLY" in ""|system|python) ;; *) echo "setup: DESKGYM_SETUP_ONLY is system or python, not $ONLY" >&2; exit 2;; esac
DESKTOP=0
WEB=0
[ "${1:-}" = "--desktop" ] && DESKTOP=1 && WEB=1
[ "${1:-}" = "--web" ] && WEB=1
OSWORLD=0
[ "${1:-}" = "--osworld" ] && OSWORLD=1 && DESKTOP=1 && WEB=1

# xvfb: the displays; xfonts-base: the task app's 10x20 font; python3-venv: .venv;
# GStreamer: headers to build, plugins for per-episode H.264 video (x264enc is in
# -ugly, h264parse/openh264enc/nvcodec in -bad, qtdemux (tests read the MP4s back) in -good; -libav's FFmpeg decoder
# checks, in the tests, that videos decode as Python readers decode them).
PKGS=(xvfb xfonts-base python3-venv python3-pip pkg-config
      libgstreamer1.0-dev libgstreamer-plugins-base1.0-dev gstreamer1.0-tools
      gstreamer1.0-plugins-base gstreamer1.0-plugins-good gstreamer1.0-plugins-bad gstreamer1.0-plugins-ugly gstreamer1.0-libav)
# The `desktop` profile (server/profiles/catalog.toml lists each program's package).
DESKTOP_PKGS=(bubblewrap openbox dbus dbus-x11 at-spi2-core pulseaudio gnome-terminal pcmanfm
      mousepad chromium libreoffice-writer libreoffice-calc libreoffice-impress libreoffice-gtk3
      git unzip python-is-python3 python3-tk python3-dev wmctrl xdotool xdg-utils socat
      libglib2.0-bin dconf-cli dconf-gsettings-backend locales python3-pyatspi chromium-driver)
# The `osworld` profile adds the applications and tools of OSWorld's Ubuntu image;
# gnome-shell-common only for GNOME Shell's settings schema, which tasks read and write
# (favourite apps); passt brings `pasta`, the per-env network stack of the `network` grant;
# jq, zip and expect for the tasks whose setup runs `sudo apt install` of them (the sandbox's
# sudo answers an install of what the host has, decision 168); ffmpeg, which OSWorld's image
# has and a task's check script runs; PyMuPDF and pygame, which tasks `pip install` (offline,
# pip answers "already satisfied" from the system Python, decision 206); gedit, Ubuntu's text
# editor, the profile's default for text files.
OSWORLD_PKGS=(gimp vlc thunderbird evince xsel sysstat jq zip expect gnome-shell-common passt ffmpeg
      python3-fitz python3-pygame gedit)
((DESKTOP)) && PKGS+=("${DESKTOP_PKGS[@]}")
((OSWORLD)) && PKGS+=("${OSWORLD_PKGS[@]}")
((WEB)) && PKGS+=(bubblewrap chromium chromium-driver)
((WEB)) && DESKGYM_PIP_EXTRAS="${DESKGYM_PIP_EXTRAS:+$DESKGYM_PIP_EXTRAS,}miniwob"
# System packages, the locale, the system Python's modules and the `osworld` home.
system() {
  missing=()
  for p in "${PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  if ((${#missing[@]})); then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi

  if ((DESKTOP)); then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    if ! locale -a 2>/dev/null | grep -qi '^en_US.utf8$'; then
      $SUDO sed -i 's/^# *en_US.UTF-8 UTF-8/en_US.UTF-8 UTF-8/' /etc/locale.gen
      $SUDO locale-gen >/dev/null
    fi
    # pyautogui for the system Python the sandboxes run (`python`, `python3`).
    # (Found, not imported: importing pyautogui opens the X display.)
    if ! /usr/bin/python3 -c 'import importlib.util as u, sys; sys.exit(u.find_spec("pyautogui") is None)'; then
      $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --disable-pip-version-check pyautogui
    fi
  fi

  # pysrt, which a task's postconfig installs with `sudo pip install pysrt` on OSWorld's
  # image: the sandbox's sudo answers that from the system Python (decision 204), and
  # Debian's python3-pysrt (1.0.1) cannot open a file on Python 3.11.
  if ((OSWORLD)) && ! /usr/bin/python3 -c 'import importlib.util as u, sys; sys.exit(u.find_spec("pysrt") is None)'; then
    $SUDO /usr/bin/python3 -m pip install -q --break-system-packages --disable-pip-version-check pysrt
  fi
  # The `osworld` profile's home: each application started once on this machine.
  if ((OSWORLD)); then $SUDO /usr/bin/python3 scripts/osworld-home.py; fi
}
if [ "$ONLY" != python ]; then system; fi
[ "$ONLY" = system ] && { echo "setup: system ok"; exit 0; }
if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install Rust >= 1.85 (https://rustup.rs) and run again" >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# Builds the gRPC stubs from ./proto as part of the install (python-client/setup.py).
.venv/bin/pip install -q --disable-pip-version-check "./python-client[test${DESKGYM_PIP_EXTRAS:+,$DESKGYM_PIP_EXTRAS}]"
echo "setup: ok (python: .venv/bin/python)"
