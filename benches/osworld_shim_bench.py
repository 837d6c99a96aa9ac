"""OSWorld's DesktopEnv on deskgym (deskgym.osworld), against baselines in the same run.

- A step (``pyautogui.click`` + OSWorld's observation: the screenshot PNG through the
  shim's HTTP interface), with the click run as a deskgym action (the shim's default)
  vs run as OSWorld runs it: ``python -c "import pyautogui; ..."`` inside the desktop
  (``native_actions=False``), same machine, same kind of desktop, ``pause=0``.
- ``reset(task_config)`` of an os-domain task (e0df059f: revert + two setup commands).
- Four shim envs stepping in parallel threads vs one.
- A request to the env's Chromium debugging port (``GET /json/version``, what
  playwright's ``connect_over_cdp`` starts with) through ``chromium_port`` (the
  server's Tunnel into the sandbox), fresh connection each time, vs the same request
  to a Chromium on this host's own loopback (what a VM's forwarded port costs at best).

    source scripts/start-server.sh && start_server target/release/deskgym-server --allow-capabilities exec,files
    .venv/bin/python benches/osworld_shim_bench.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import http.client
import json
import pathlib
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

from deskgym.osworld import DesktopEnv

TASK = pathlib.Path(__file__).resolve().parents[1] / "python-client/tests/osworld_tasks/os/e0df059f-28a6-4169-924f-b9623e7184cc.json"


def steps(env: DesktopEnv, n: int) -> list[float]:
    ts = []
    for i in range(n):
        t0 = time.perf_counter()
        env.step(f"pyautogui.click({300 + i % 50}, 300)", pause=0)
        ts.append(time.perf_counter() - t0)
    return ts


CHROME_TASK = TASK.parents[1] / "chrome/2ad9387a-65d8-4e33-ad5b-7580065a27ca.json"


def cdp_gets(port: int, n: int) -> list[float]:
    """``GET /json/version`` on a fresh connection each time; waits 20 s for the port."""
    t_end = time.monotonic() + 20
    ts = []
    while len(ts) < n:
        t0 = time.perf_counter()
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            c.request("GET", "/json/version")
            ok = c.getresponse().status == 200
            c.close()
        except OSError:
            ok = False
        if not ok:
            if time.monotonic() > t_end:
                raise SystemExit(f"no browser answers on port {port}")
            time.sleep(0.3)
            continue
        ts.append(time.perf_counter() - t0)
    return ts


def cdp(kw: dict, n: int) -> None:
    med = statistics.median
    env = DesktopEnv(**kw)
    profile = tempfile.mkdtemp(prefix="deskgym-cdp-bench-")
    host = None
    try:
        env.reset(task_config=json.loads(CHROME_TASK.read_text()))
        tunnel = cdp_gets(env.chromium_port, n)
        host = subprocess.Popen(
            ["chromium", "--headless", "--no-sandbox", "--remote-debugging-port=19333", f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # --no-sandbox: benches may run as root
        direct = cdp_gets(19333, n)
        print(f"CDP GET /json/version, fresh connection, p50 of {n}: through the tunnel "
              f"{med(tunnel) * 1e3:.2f} ms, host loopback {med(direct) * 1e3:.2f} ms "
              f"({med(tunnel) / med(direct):.1f}x)")
    finally:
        if host is not None:
            host.kill()
            host.wait()
        shutil.rmtree(profile, ignore_errors=True)
        env.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("-n", type=int, default=30)
    args = ap.parse_args()
    kw = {"address": args.address, "screen_size": (1280, 720), "require_a11y_tree": False, "cache_dir": "/tmp/osw-bench"}
    task = json.loads(TASK.read_text())
    med = statistics.median
    native = DesktopEnv(**kw)
    python = DesktopEnv(native_actions=False, **kw)
    try:
        for e in (native, python):
            e.reset(task_config=task)
            steps(e, 3)
        a = steps(native, args.n)
        b = steps(python, args.n)
        print(f"step (click + screenshot), p50 of {args.n}: native {med(a) * 1e3:.0f} ms, "
              f"python -c inside the desktop (OSWorld's way) {med(b) * 1e3:.0f} ms: {med(b) / med(a):.1f}x")
        r = []
        for _ in range(5):
            t0 = time.perf_counter()
            native.reset(task_config=task)
            r.append(time.perf_counter() - t0)
        print(f"reset(task_config) of os/e0df059f, p50 of 5: {med(r) * 1e3:.0f} ms")
    finally:
        python.close()
    cdp(kw, args.n)
    envs = [native] + [DesktopEnv(**kw) for _ in range(3)]
    try:
        for e in envs[1:]:
            e.reset(task_config=task)
        one = args.n / sum(steps(native, args.n))
        done = [0.0] * 4

        def run(i: int) -> None:
            done[i] = sum(steps(envs[i], args.n))

        th = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        t0 = time.perf_counter()
        for t in th:
            t.start()
        for t in th:
            t.join()
        four = 4 * args.n / (time.perf_counter() - t0)
        print(f"throughput: 1 env {one:.1f} steps/s, 4 envs in threads {four:.1f} steps/s ({four / one:.1f}x)")
    finally:
        for e in envs:
            e.close()


if __name__ == "__main__":
    main()
