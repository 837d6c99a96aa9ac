"""Frames without copies: shared-memory frames against gRPC bytes, in one run.

Starts two servers of the same binary with default settings: one on a unix socket
(where clients get their frames through shared memory by default) and one on TCP
(today's path for every client). Then, for each:

(a) a raw 1280x720 step into numpy, one env: click an empty spot, then the frame;
    also gRPC bytes over the same unix socket (``frames="bytes"``), to split the
    transport from the copies;
(b) ``make_vec`` at 16 envs, 640x480, random clicks, default settings: env-steps/s.

With ``--baseline-server`` (a build of an earlier commit) that server's TCP path runs
in the same rounds too, as "today's path" before a change.

    python benches/shm_bench.py [--server target/release/deskgym-server] [--steps 300]
                                [--baseline-server /tmp/base-target/release/deskgym-server]
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import numpy as np

import deskgym

REPO = pathlib.Path(__file__).resolve().parents[1]


@contextmanager
def server(binary: str, listen: str) -> Iterator[str]:
    p = subprocess.Popen([binary, "--listen", listen, "--max-envs", "40"], stdout=subprocess.PIPE, text=True,
                         stderr=subprocess.DEVNULL)
    assert p.stdout is not None
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        raise SystemExit(f"server did not start: {line!r}")
    try:
        yield line.strip().rsplit(" ", 1)[-1]
    finally:
        p.terminate()
        p.wait(timeout=30)


def single(address: str, frames: str, steps: int) -> float:
    """p50 ms of a raw 1280x720 step whose frame ends in a numpy array."""
    c = deskgym.Client(address, frames=frames)
    pool = c.create_pool("click-target", 1, screen=(1280, 720), max_steps=10**6)
    env = pool.env_ids[0]
    click = deskgym.to_proto({"verb": "click", "x": 3, "y": 715})
    try:
        c.reset(env, seed=1)
        ts = []
        for k in range(steps + 10):
            t = time.perf_counter()
            r = c.step(env, click, encoding="rgb")
            frame, _ = c.resolve(r.observation)
            assert isinstance(frame, np.ndarray) and frame.shape == (720, 1280, 3)
            if k >= 10:
                ts.append(time.perf_counter() - t)
            del frame
        if frames == "shm":
            assert c.ring is not None and c.ring.delivered >= steps
        return float(np.percentile(np.array(ts) * 1e3, 50))
    finally:
        c.close()


def vector(address: str, frames: str, seconds: float, n: int = 16) -> float:
    """env-steps/s of make_vec(n) at 640x480 with random clicks."""
    client = deskgym.Client(address, frames=frames)
    env = deskgym.make_vec("click-target", n, client=client, screen=(640, 480), max_steps=10**6)
    rng = np.random.default_rng(0)

    def actions() -> list[dict[str, object]]:
        xs, ys = rng.integers(0, 640, n), rng.integers(0, 480, n)
        return [{"verb": "click", "x": int(x), "y": int(y)} for x, y in zip(xs, ys)]

    try:
        env.reset(seed=0)
        env.step(actions())
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            obs, *_ = env.step(actions())
            assert obs.shape == (n, 480, 640, 3)
            steps += n
        return steps / (time.perf_counter() - t0)
    finally:
        env.close()
        client.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--server", default=str(REPO / "target" / "release" / "deskgym-server"))
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--baseline-server", help="an earlier build, measured over TCP in the same rounds")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as d, server(a.server, f"unix:{d}/deskgym.sock") as unix, \
            server(a.server, "127.0.0.1:0") as tcp, \
            (server(a.baseline_server, "127.0.0.1:0") if a.baseline_server else nullcontext()) as base:
        rows: dict[str, list[float]] = {}
        # Rounds alternate the paths so a noisy neighbour hurts each alike.
        for _ in range(a.rounds):
            if base:
                rows.setdefault("single bytes (tcp, baseline)", []).append(single(base, "bytes", a.steps))
                rows.setdefault("vec16 bytes (tcp, baseline)", []).append(vector(base, "bytes", a.seconds))
            rows.setdefault("single shm (unix)", []).append(single(unix, "shm", a.steps))
            rows.setdefault("single bytes (unix)", []).append(single(unix, "bytes", a.steps))
            rows.setdefault("single bytes (tcp)", []).append(single(tcp, "bytes", a.steps))
            rows.setdefault("vec16 shm (unix)", []).append(vector(unix, "shm", a.seconds))
            rows.setdefault("vec16 bytes (unix)", []).append(vector(unix, "bytes", a.seconds))
            rows.setdefault("vec16 bytes (tcp)", []).append(vector(tcp, "bytes", a.seconds))
        med = {k: float(np.median(v)) for k, v in rows.items()}
        for k, v in rows.items():
            print(f"{k:24s} " + " ".join(f"{x:8.2f}" for x in v) + f"   median {med[k]:.2f}")
        print(f"single step p50: shm {med['single shm (unix)']:.2f} ms, bytes over tcp "
              f"{med['single bytes (tcp)']:.2f} ms -> {med['single bytes (tcp)'] / med['single shm (unix)']:.1f}x; "
              f"bytes over unix {med['single bytes (unix)']:.2f} ms -> "
              f"{med['single bytes (unix)'] / med['single shm (unix)']:.1f}x")
        print(f"make_vec 16 @640x480: shm {med['vec16 shm (unix)']:.0f} env-steps/s, bytes over tcp "
              f"{med['vec16 bytes (tcp)']:.0f} -> {med['vec16 shm (unix)'] / med['vec16 bytes (tcp)']:.2f}x; "
              f"bytes over unix {med['vec16 bytes (unix)']:.0f}")
        if base:
            print(f"vs the baseline server over tcp: single {med['single bytes (tcp, baseline)']:.2f} ms -> "
                  f"{med['single bytes (tcp, baseline)'] / med['single shm (unix)']:.1f}x; make_vec 16 "
                  f"{med['vec16 bytes (tcp, baseline)']:.0f} env-steps/s -> "
                  f"{med['vec16 shm (unix)'] / med['vec16 bytes (tcp, baseline)']:.2f}x")


if __name__ == "__main__":
    main()
