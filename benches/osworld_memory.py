"""Memory of one `osworld` desktop per application OSWorld's tasks run, measured inside
the sandbox as the sum of every process's proportional set size (PSS: shared pages
split between the processes sharing them), after the app's window is up and a settle.
The baseline is the same desktop with no application (session only: D-Bus, openbox,
AT-SPI, PulseAudio) in the same run. Xvfb (outside the sandbox) is not counted.

    source scripts/start-server.sh && start_server target/release/deskgym-server --allow-capabilities exec,files
    .venv/bin/python benches/osworld_memory.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import time

import deskgym

#: (name, command started in the desktop, a word of its window title)
APPS = [
    ("session only", None, None),
    ("Chrome (google-chrome)", "google-chrome about:blank", "Chrom"),
    ("LibreOffice Calc", "libreoffice --calc", "Calc"),
    ("GIMP", "gimp", "GIMP"),
    ("VLC", "vlc", "VLC"),
    ("Thunderbird", "thunderbird", "Thunderbird"),
    ("VS Code (code-server)", "code", "Visual Studio Code"),
]

PSS = "cat /proc/[0-9]*/smaps_rollup 2>/dev/null | awk '/^Pss:/ {s += $2} END {print s}'"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address")
    p.add_argument("--settle", type=float, default=5.0, help="seconds after the window shows")
    a = p.parse_args()
    env = deskgym.make("blank", address=a.address, profile="osworld", screen=(1920, 1080),
                       capabilities=("exec", "windows"), obs_type="jpeg")
    print("| desktop | PSS MiB | over the session |\n|---|---|---|")
    base = None
    try:
        for name, cmd, word in APPS:
            env.reset(seed=0)
            if cmd:
                env.exec(["sh", "-c", f"setsid -f {cmd} >/dev/null 2>&1"])
                t0 = time.monotonic()
                while not any(word in w.title for w in env.windows()):
                    if time.monotonic() - t0 > 90:
                        raise SystemExit(f"{name}: no window within 90 s")
                    time.sleep(0.5)
            time.sleep(a.settle)
            mib = int(env.exec(["sh", "-c", PSS]).stdout.strip() or 0) / 1024
            base = mib if base is None else base
            print(f"| {name} | {mib:.0f} | {'-' if cmd is None else f'+{mib - base:.0f}'} |", flush=True)
    finally:
        env.close()


if __name__ == "__main__":
    main()
