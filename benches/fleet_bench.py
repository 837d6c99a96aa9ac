"""Fleet figures, in one script against the servers it is given:

1. async vs sync with one slow env: ``n`` envs of click-target (320x240) where env 0
   waits ``--slow-ms`` per step (a slow desktop) and the others move the pointer;
   env-steps/s of ``make_vec`` (one StepBatch per step: every step waits for env 0) vs
   ``make_vec(batch_size=n//2)`` (StepStream: recv the first n//2 done);
2. sharding overhead: env-steps/s of ``n`` envs on one server vs the same ``n`` spread
   over two servers (``--address`` twice), same machine;
3. the slowest shard: per-server StepBatch latencies (one server's), and the expected
   max over 10 and 100 servers drawn from that distribution (a step of a sharded env
   waits for its slowest shard).

    source scripts/start-server.sh && start_server target/release/deskgym-server; A=$DESKGYM_ADDRESS
    start_server target/release/deskgym-server --data-dir /tmp/dg2; B=$DESKGYM_ADDRESS
    .venv/bin/python benches/fleet_bench.py --address "$A" --address "$B"
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import deskgym


def moves(ids: list[int], t: int) -> list[dict[str, object]]:
    return [{"verb": "move", "x": (23 * i + 5 * t) % 320, "y": (31 * i + 3 * t) % 240} for i in ids]


def slow_actions(ids: list[int], t: int, slow_ms: int) -> list[dict[str, object]]:
    return [{"verb": "wait", "ms": slow_ms} if i == 0 else moves([i], t)[0] for i in ids]


def sync_rate(address: str | list[str], n: int, seconds: float, slow_ms: int) -> tuple[float, list[float]]:
    env = deskgym.make_vec("click-target", n, address=address, screen=(320, 240), seed=0, max_steps=1_000_000)
    lat = []
    try:
        env.reset(seed=0)
        steps, t, t0 = 0, 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            a = time.perf_counter()
            env.step(slow_actions(list(range(n)), t, slow_ms) if slow_ms else moves(list(range(n)), t))
            lat.append(time.perf_counter() - a)
            steps += n
            t += 1
        return steps / (time.perf_counter() - t0), lat
    finally:
        env.close()


def async_rate(address: str, n: int, k: int, seconds: float, slow_ms: int) -> float:
    env = deskgym.make_vec("click-target", n, batch_size=k, address=address, screen=(320, 240), seed=0,
                           max_steps=1_000_000)
    try:
        env.async_reset(seed=0)
        steps, t, t0 = 0, 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            _, _, _, _, info = env.recv()
            ids = [int(i) for i in info["env_id"]]
            env.send(slow_actions(ids, t, slow_ms), ids)
            steps += len(ids)
            t += 1
        return steps / (time.perf_counter() - t0)
    finally:
        env.close()


def expected_max(samples: list[float], servers: int, draws: int = 2000) -> float:
    rng = np.random.default_rng(0)
    return float(np.mean(rng.choice(samples, size=(draws, servers)).max(axis=1)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", action="append", required=True)
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--slow-ms", type=int, default=50)
    a = p.parse_args()
    n, one = a.envs, a.address[0]
    s, _ = sync_rate(one, n, a.seconds, a.slow_ms)
    k = n // 2
    x = async_rate(one, n, k, a.seconds, a.slow_ms)
    print(f"one slow env ({a.slow_ms} ms a step) among {n}: sync StepBatch {s:.0f} env-steps/s, "
          f"async batch_size={k} {x:.0f} env-steps/s ({x / s:.1f}x)")
    single, lat = sync_rate(one, n, a.seconds, 0)
    p50 = statistics.median(lat) * 1e3
    print(f"{n} envs, one server: {single:.0f} env-steps/s (StepBatch p50 {p50:.2f} ms)")
    if len(a.address) > 1:
        sharded, _ = sync_rate(a.address[:2], n, a.seconds, 0)
        print(f"{n} envs over two servers: {sharded:.0f} env-steps/s ({sharded / single:.2f}x one server)")
    for m in (10, 100):
        e = expected_max(lat, m) * 1e3
        print(f"expected slowest of {m} shards per step: {e:.2f} ms ({e / p50:.1f}x one shard's p50)")


if __name__ == "__main__":
    main()
