"""Figures of the `desktop` profile, each read against a baseline run in the same script:

- `Exec` of `true` round trip vs an OSWorld-style `/execute` (HTTP POST, the in-desktop
  server runs the command with `subprocess.run` and answers JSON), same machine;
- start-up of a `desktop` env vs a `tasks` env (CreatePool of one);
- reset of a used `desktop` env (sandbox restarted, home copied again) vs a `tasks` reset,
  and with a warm spare;
- memory (PSS) of a `desktop` env with a terminal and Chromium open vs a `tasks` env;
- step latency typing into the terminal (default settle: XDamage quiet window) vs typing
  into the bundled `type-word` task (default settle: SYNC).

    source scripts/start-server.sh && start_server target/release/deskgym-server --allow-capabilities exec
    .venv/bin/python benches/desktop_bench.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import deskgym


def p50(ts: list[float]) -> float:
    return statistics.median(ts) * 1e3


class Execute(BaseHTTPRequestHandler):
    """OSWorld's in-VM `/execute`: run the command, capture its output, answer JSON."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", 0))
        req = json.loads(self.rfile.read(n))
        r = subprocess.run(req["command"], shell=req.get("shell", False), capture_output=True, text=True)
        body = json.dumps({"status": "success", "output": r.stdout, "error": r.stderr, "returncode": r.returncode})
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def bench_exec(c: deskgym.Client, env_id: str, n: int) -> dict[str, float]:
    c.exec(env_id, ["true"])
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        assert c.exec(env_id, ["true"]).ok
        ts.append(time.perf_counter() - t)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Execute)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
    conn.connect()
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    base = []
    for i in range(n + 1):
        t = time.perf_counter()
        conn.request("POST", "/execute", json.dumps({"command": ["true"]}), {"Content-Type": "application/json"})
        assert json.loads(conn.getresponse().read())["returncode"] == 0
        if i:
            base.append(time.perf_counter() - t)
    server.shutdown()
    return {"exec": p50(ts), "osworld_execute": p50(base)}


def pss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def pids_of_uid(uid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}").st_uid == uid:
                    out.append(int(d))
            except OSError:
                pass
    return out


def xvfb_pid(display: str) -> list[int]:
    r = subprocess.run(["pgrep", "-f", f"Xvfb {display} "], capture_output=True, text=True)
    return [int(p) for p in r.stdout.split()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", default=os.environ.get("DESKGYM_ADDRESS", deskgym.DEFAULT_ADDRESS))
    ap.add_argument("-n", type=int, default=200)
    args = ap.parse_args()
    c = deskgym.Client(args.address)
    res: dict[str, float] = {}

    def create(profile: str, task: str, spares: int = 0) -> deskgym.Pool:
        return c.create_pool(task, 1, screen=(1280, 720), profile=profile, warm_spares=spares, max_steps=10**6,
                             capabilities=["exec"] if profile == "desktop" else [])

    # Start-up.
    for profile, task in (("tasks", "click-target"), ("desktop", "blank")):
        ts = []
        for _ in range(5):
            t = time.perf_counter()
            p = create(profile, task)
            ts.append(time.perf_counter() - t)
            c.close_pool(p.pool_id)
        res[f"startup_{profile}"] = p50(ts)

    desk = create("desktop", "blank")
    tasks = create("tasks", "type-word")
    spare = create("desktop", "blank", spares=1)
    try:
        e, te, se = desk.env_ids[0], tasks.env_ids[0], spare.env_ids[0]
        res.update(bench_exec(c, e, args.n))

        # Reset of a used env.
        for label, env_id, dirty in (("tasks", te, False), ("desktop", e, True), ("desktop_spare", se, True)):
            c.reset(env_id, seed=0)
            ts = []
            for _ in range(10):
                if dirty:
                    c.exec(env_id, "touch ~/used", shell=True)
                time.sleep(0.3)  # let a spare refill
                t = time.perf_counter()
                c.reset(env_id, seed=0)
                ts.append(time.perf_counter() - t)
            res[f"reset_{label}"] = p50(ts)

        # Typing: into the bundled type-word task, and into a real terminal.
        c.reset(te, seed=1)
        ts = []
        for _ in range(30):
            t = time.perf_counter()
            c.step(te, deskgym.to_proto({"verb": "type_text", "text": "a"}), encoding="png")
            ts.append(time.perf_counter() - t)
        res["type_tasks"] = p50(ts)
        r = c.reset(e, seed=0)
        display = r.info.extra["display"]
        c.exec(e, "gnome-terminal >/dev/null 2>&1 &", shell=True)
        for _ in range(100):
            if "gnome-terminal" in c.exec(e, "wmctrl -l -x", shell=True).stdout.lower():
                break
            time.sleep(0.1)
        time.sleep(1.0)
        ts = []
        for _ in range(30):
            t = time.perf_counter()
            c.step(e, deskgym.to_proto({"verb": "type_text", "text": "a"}), encoding="png")
            ts.append(time.perf_counter() - t)
        res["type_terminal"] = p50(ts)

        # Memory: terminal + Chromium open, vs the tasks env.
        c.exec(e, "google-chrome about:blank >/dev/null 2>&1 &", shell=True)
        time.sleep(8.0)
        uid = 2_000_000 + int(display.lstrip(":"))
        res["pss_desktop_mib"] = (pss_kib(pids_of_uid(uid)) + pss_kib(xvfb_pid(display))) / 1024
        tdisplay = c.reset(te, seed=0).info.extra["display"]
        app = subprocess.run(["pgrep", "-f", "deskgym-task-app"], capture_output=True, text=True).stdout.split()
        res["pss_tasks_mib"] = (pss_kib(xvfb_pid(tdisplay)) + pss_kib([int(p) for p in app][:1])) / 1024
    finally:
        for p in (desk, tasks, spare):
            c.close_pool(p.pool_id)
    for k, v in res.items():
        print(f"{k:24s} {v:10.2f}")
    print(f"exec vs osworld_execute   {res['osworld_execute'] / res['exec']:.2f}x faster")
    print(f"startup desktop/tasks     {res['startup_desktop'] / res['startup_tasks']:.2f}x")
    print(f"reset desktop/tasks       {res['reset_desktop'] / res['reset_tasks']:.2f}x")
    print(f"reset desktop spare/none  {res['reset_desktop_spare'] / res['reset_desktop']:.2f}x")
    print(f"type terminal/tasks       {res['type_terminal'] / res['type_tasks']:.2f}x")


if __name__ == "__main__":
    main()
