"""Many sessions from one Python process: the asyncio client against threads and the
sync client, in one run (issue 42 item 1).

Starts one server, then drives N concurrent sessions of a bundled task (one action per
turn, T turns each; an ended episode resets) twice from this process:

- **asyncio**: one :class:`deskgym.aio.AsyncClient` (one channel), N sessions as
  coroutines on one event loop;
- **threads**: one :class:`deskgym.Client` (one channel) shared by N
  :class:`deskgym.DeskgymEnv`, each driven by its own worker of a ThreadPoolExecutor.

For each: every step's latency (p50, p99), env-steps/s, this process's CPU seconds per
step, and the lag of a ticker that asks to sleep 10 ms and measures its oversleep (the
event loop's own lag; in the threads arm, a ticker thread's, which is what the GIL and
the scheduler cost a 257th thread). Figures are read as ratios asyncio/threads.

    python benches/aio_sessions.py [--server target/release/deskgym-server] [--backend fake]
                                   [--sessions 256] [--turns 20] [--screen 160x120]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import resource
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np

import deskgym
from deskgym.aio import AsyncClient, AsyncDeskgymEnv

REPO = pathlib.Path(__file__).resolve().parents[1]
TICK_S = 0.010


@contextmanager
def server(binary: str, backend: str, max_envs: int, cpus: set[int] | None = None) -> Iterator[str]:
    p = subprocess.Popen(
        [binary, "--listen", "127.0.0.1:0", "--backend", backend, "--max-envs", str(max_envs),
         "--idle-timeout-s", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        raise SystemExit(f"server did not start: {line!r}")
    try:
        yield line.strip().rsplit(" ", 1)[-1]
    finally:
        p.terminate()
        p.wait(timeout=60)


def action(rng: np.random.Generator, w: int, h: int) -> dict[str, Any]:
    return {"verb": "click", "x": int(rng.integers(0, w)), "y": int(rng.integers(0, h))}


def figures(steps: list[float], lags: list[float], wall: float, cpu: float) -> dict[str, float]:
    s, lag = np.array(steps) * 1e3, np.array(lags or [0.0]) * 1e3
    return {
        "step_p50_ms": float(np.percentile(s, 50)),
        "step_p99_ms": float(np.percentile(s, 99)),
        "steps_per_s": len(steps) / wall,
        "cpu_ms_per_step": cpu * 1e3 / len(steps),
        "lag_p50_ms": float(np.percentile(lag, 50)),
        "lag_p99_ms": float(np.percentile(lag, 99)),
        "lag_max_ms": float(lag.max()),
    }


def cpu_s() -> float:
    """This process's CPU seconds, every thread included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def run_asyncio(address: str, args: argparse.Namespace) -> dict[str, float]:
    steps: list[float] = []
    lags: list[float] = []
    w, h = args.screen
    async with AsyncClient(address, max_in_flight=max(args.sessions, 1)) as client:
        envs = await asyncio.gather(*(client.make(args.task, screen=args.screen, obs_type=args.obs_type)
                                      for _ in range(args.sessions)))
        await asyncio.gather(*(e.reset(seed=i) for i, e in enumerate(envs)))
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                t = time.perf_counter()
                await asyncio.sleep(TICK_S)
                lags.append(time.perf_counter() - t - TICK_S)

        async def session(i: int, env: AsyncDeskgymEnv) -> None:
            rng = np.random.default_rng(i)
            for _ in range(args.turns):
                t = time.perf_counter()
                _, _, terminated, truncated, _ = await env.step(action(rng, w, h))
                steps.append(time.perf_counter() - t)
                if terminated or truncated:
                    await env.reset()

        tick = asyncio.create_task(ticker())
        t0, c0 = time.perf_counter(), cpu_s()
        await asyncio.gather(*(session(i, e) for i, e in enumerate(envs)))
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        done.set()
        await tick
        await asyncio.gather(*(e.close() for e in envs))
    return figures(steps, lags, wall, cpu)


async def idle_lag(seconds: float = 2.0) -> dict[str, float]:
    """The ticker alone on an idle loop: what this machine's scheduling costs a sleep
    with nothing else running (the floor under both arms' lag)."""
    lags = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t = time.perf_counter()
        await asyncio.sleep(TICK_S)
        lags.append(time.perf_counter() - t - TICK_S)
    lag = np.array(lags) * 1e3
    return {"lag_p50_ms": float(np.percentile(lag, 50)), "lag_p99_ms": float(np.percentile(lag, 99)),
            "lag_max_ms": float(lag.max())}


def run_threads(address: str, args: argparse.Namespace) -> dict[str, float]:
    steps: list[float] = []
    lags: list[float] = []
    lock = threading.Lock()
    w, h = args.screen
    client = deskgym.Client(address)
    with ThreadPoolExecutor(max_workers=args.sessions) as pool:
        envs = list(pool.map(lambda i: deskgym.make(args.task, client=client, screen=args.screen,
                                                    obs_type=args.obs_type), range(args.sessions)))
        list(pool.map(lambda ie: ie[1].reset(seed=ie[0]), enumerate(envs)))
        done = threading.Event()

        def ticker() -> None:
            while not done.is_set():
                t = time.perf_counter()
                time.sleep(TICK_S)
                lags.append(time.perf_counter() - t - TICK_S)

        def session(i: int) -> None:
            env, rng, mine = envs[i], np.random.default_rng(i), []
            for _ in range(args.turns):
                t = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(action(rng, w, h))
                mine.append(time.perf_counter() - t)
                if terminated or truncated:
                    env.reset()
            with lock:
                steps.extend(mine)

        tick = threading.Thread(target=ticker)
        tick.start()
        t0, c0 = time.perf_counter(), cpu_s()
        list(pool.map(session, range(args.sessions)))
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        done.set()
        tick.join()
        list(pool.map(lambda e: e.close(), envs))
    client.close()
    return figures(steps, lags, wall, cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    built = [p for p in (REPO / "target" / prof / "deskgym-server" for prof in ("release", "debug")) if p.exists()]
    ap.add_argument("--server", default=str(max(built, key=lambda p: p.stat().st_mtime)) if built else None)
    ap.add_argument("--backend", default="fake", choices=("fake", "real"))
    ap.add_argument("--sessions", type=int, default=256)
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--task", default="click-target")
    ap.add_argument("--screen", default="160x120", type=lambda s: tuple(int(v) for v in s.split("x")))
    ap.add_argument("--obs-type", default="png", choices=("rgb", "png", "jpeg"))
    ap.add_argument("--rounds", type=int, default=1, help="alternate the two arms this many times")
    ap.add_argument("--pin", action="store_true",
                    help="the server on the last core, this process on the others: the two arms' "
                    "clients then compete with each other's load only, not for the server's core")
    args = ap.parse_args()
    server_cpus = None
    if args.pin:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < 2:
            raise SystemExit("--pin needs two cores")
        server_cpus = {cores[-1]}
        os.sched_setaffinity(0, set(cores[:-1]))
    if args.server is None:
        raise SystemExit("no deskgym-server built: cargo build --release --bins (or --server PATH)")
    results: dict[str, list[dict[str, float]]] = {"threads": [], "asyncio": []}
    arms: dict[str, Callable[[str], dict[str, float]]] = {
        "threads": lambda a: run_threads(a, args),
        "asyncio": lambda a: asyncio.run(run_asyncio(a, args)),
    }
    idle = asyncio.run(idle_lag())
    print("idle ticker", {k: round(v, 2) for k, v in idle.items()}, flush=True)
    with server(args.server, args.backend, args.sessions + 8, server_cpus) as address:
        for _ in range(args.rounds):
            for name, arm in arms.items():
                results[name].append(arm(address))
                print(name, {k: round(v, 2) for k, v in results[name][-1].items()}, flush=True)
    print(f"\n{args.sessions} sessions x {args.turns} turns, {args.task} {args.screen[0]}x{args.screen[1]} "
          f"{args.obs_type}, --backend {args.backend}, {pathlib.Path(args.server).parent.name} server"
          f"{', pinned' if args.pin else ''} (medians of {args.rounds} round(s))\n")
    print("| figure | threads + sync client | asyncio client | asyncio / threads |")
    print("|---|---|---|---|")
    for k in results["threads"][0]:
        t = float(np.median([r[k] for r in results["threads"]]))
        a = float(np.median([r[k] for r in results["asyncio"]]))
        print(f"| {k} | {t:.2f} | {a:.2f} | {a / t if t else float('nan'):.2f}x |")
    print(f"\nidle ticker (no load, this machine now): lag p50 {idle['lag_p50_ms']:.2f} ms, "
          f"p99 {idle['lag_p99_ms']:.2f} ms, max {idle['lag_max_ms']:.2f} ms; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
