"""End-to-end benchmark from Python (figures go to benches/README.md).

(a) deskgym ``Step`` (click, then the frame) at 1280x720, raw RGB and PNG;
(b) the OSWorld-style baseline (``osworld_baseline.py``) on the *same* Xvfb: POST a
    pyautogui click (one Python process per action), GET a PNG screenshot;
(c) ``make_vec`` throughput (env-steps/s) at 1, 4 and 16 envs, 640x480.

    python benches/e2e.py --address 127.0.0.1:50051 [--steps 200]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np

import deskgym

HERE = pathlib.Path(__file__).resolve().parent


def pct(xs: list[float]) -> tuple[float, float]:
    a = np.array(xs) * 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 90))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def display_xauthority(display: str) -> str:
    """The Xauthority file of the server's ``display`` (Xvfb's ``-auth`` argument; the
    bench runs on the server's host, as its user)."""
    pids = subprocess.run(["pgrep", "-f", f"Xvfb {display} "], capture_output=True, text=True).stdout.split()
    args = pathlib.Path(f"/proc/{pids[0]}/cmdline").read_bytes().split(b"\0")
    return args[args.index(b"-auth") + 1].decode()


def bench_single(address: str, steps: int) -> dict[str, tuple[float, float]]:
    c = deskgym.Client(address)
    # The default pool (the task's own settle policy: sync), then the previous
    # default (XDamage quiet window of 10 ms) on its own pool, same run.
    pool = c.create_pool("click-target", 1, screen=(1280, 720), max_steps=10**6)
    old = c.create_pool("click-target", 1, screen=(1280, 720), max_steps=10**6, settle_ms=10)
    env = pool.env_ids[0]
    try:
        r = c.reset(env, seed=1)
        c.reset(old.env_ids[0], seed=1)
        display = r.info.extra["display"]
        # A click on an empty spot: real input, a real capture, no episode end.
        click = deskgym.to_proto({"verb": "click", "x": 3, "y": 715})
        out: dict[str, tuple[float, float]] = {}
        for label, e, encs in (("default", env, ("rgb", "png")), ("damage settle_ms=10", old.env_ids[0], ("png",))):
            for enc in encs:
                c.step(e, click, encoding=enc)  # warm-up
                ts = []
                for _ in range(steps):
                    t = time.perf_counter()
                    c.step(e, click, encoding=enc)
                    ts.append(time.perf_counter() - t)
                out[f"deskgym Step, {'raw RGB' if enc == 'rgb' else 'PNG'} ({label})"] = pct(ts)

        port = free_port()
        # The display takes only clients with its cookie: the server's file for it.
        xauth = display_xauthority(display)
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "osworld_baseline.py"), str(port)],
            env={**os.environ, "DISPLAY": display, "XAUTHORITY": str(xauth)}, stdout=subprocess.PIPE, text=True,
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            conn = http.client.HTTPConnection("127.0.0.1", port)
            conn.connect()
            conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def osworld_step() -> bytes:
                body = json.dumps({"command": "pyautogui.click(3, 715)"})
                conn.request("POST", "/execute", body, {"Content-Type": "application/json"})
                res = json.loads(conn.getresponse().read())
                assert res["returncode"] == 0, res["error"]
                conn.request("GET", "/screenshot")
                png = conn.getresponse().read()
                assert png.startswith(b"\x89PNG")
                return png

            osworld_step()
            ts = []
            for _ in range(max(steps // 10, 20)):  # ~0.35 s each
                t = time.perf_counter()
                osworld_step()
                ts.append(time.perf_counter() - t)
            out["OSWorld-style (pyautogui process + PNG screenshot)"] = pct(ts)
        finally:
            proc.terminate()
            proc.wait()
        return out
    finally:
        c.close_pool(pool.pool_id)
        c.close_pool(old.pool_id)


def bench_vector(address: str, seconds: float, settle_ms: int | None) -> dict[int, float]:
    out = {}
    for n in (1, 4, 16):
        env = deskgym.make_vec("click-target", n, address=address, screen=(640, 480), settle_ms=settle_ms,
                               max_steps=10**6)
        try:
            env.reset(seed=0)
            actions = [{"verb": "click", "x": 3, "y": 475}] * n
            env.step(actions)
            steps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                env.step(actions)
                steps += n
            out[n] = steps / (time.perf_counter() - t0)
        finally:
            env.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seconds", type=float, default=5.0, help="per make_vec size")
    args = p.parse_args()

    single = bench_single(args.address, args.steps)
    base = single["OSWorld-style (pyautogui process + PNG screenshot)"][0]
    print("\n## Single-env step at 1280x720 (click, then the frame)\n")
    print("| path | p50 ms | p90 ms | p50 speed-up vs OSWorld-style |")
    print("|---|---|---|---|")
    for name, (p50, p90) in single.items():
        print(f"| {name} | {p50:.2f} | {p90:.2f} | {base / p50:.0f}x |")

    vec = bench_vector(args.address, args.seconds, None)
    old = bench_vector(args.address, args.seconds, 10)
    print("\n## make_vec throughput at 640x480 (one StepBatch per step)\n")
    print("| envs | env-steps/s, default | vs 1 env | damage settle_ms=10 (previous default) | default vs it |")
    print("|---|---|---|---|---|")
    for n, sps in vec.items():
        print(f"| {n} | {sps:.0f} | {sps / vec[1]:.2f}x | {old[n]:.0f} | {sps / old[n]:.2f}x |")


if __name__ == "__main__":
    main()
