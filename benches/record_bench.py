"""Recording overhead: make_vec step throughput with recording off vs on, same script,
same server, alternating runs; and frames stored vs frames observed.

    python benches/record_bench.py --address 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

import numpy as np

import deskgym
import deskgym.datasets as ds


def run(address: str, n: int, seconds: float, record: str | None, task: str, max_steps: int,
        screen: tuple[int, int]) -> tuple[float, str]:
    env = deskgym.make_vec(task, n, address=address, screen=screen, max_steps=max_steps,
                           record=record, seed=1)
    w, h = screen
    rng = np.random.default_rng(0)
    try:
        env.reset(seed=1)
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            xs, ys = rng.integers(0, w, n), rng.integers(32, h, n)
            env.step([{"verb": "click", "x": int(x), "y": int(y)} for x, y in zip(xs, ys)])
            steps += n
        return steps / (time.perf_counter() - t0), env.recording_path
    finally:
        env.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--envs", type=int, default=4)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--task", default="drag-to-zone")
    p.add_argument("--max-steps", type=int, default=20, help="episode length (each episode has its own video)")
    p.add_argument("--screen", default="640x480", help="WxH")
    a = p.parse_args()
    screen = tuple(int(v) for v in a.screen.split("x"))
    off, on, paths = [], [], []
    for _ in range(a.rounds):  # alternate, so drift on a shared machine hits both
        off.append(run(a.address, a.envs, a.seconds, None, a.task, a.max_steps, screen)[0])
        sps, path = run(a.address, a.envs, a.seconds, f"bench-{uuid.uuid4().hex[:8]}", a.task, a.max_steps, screen)
        on.append(sps)
        paths.append(path)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"\n## Recording overhead ({a.envs} envs, {a.screen}, {a.task}, {a.max_steps}-step episodes, random clicks)\n")
    print("| recording | env-steps/s (median of %d) | vs off |" % a.rounds)
    print("|---|---|---|")
    print(f"| off | {m_off:.0f} | 1.00 |")
    print(f"| on | {m_on:.0f} | {m_on / m_off:.2f} ({(1 - m_on / m_off) * 100:+.1f}% cost) |")
    s = ds.inspect(paths[-1])
    print(f"\nlast recorded run: {s['steps']} steps, {s['frames_observed']} frames observed, "
          f"{s['frames_stored']} stored (dedup {s['dedup_ratio']:.1f}x), {s['bytes'] / 1e6:.1f} MB, "
          f"dropped {s['dropped_records']}")


if __name__ == "__main__":
    main()
