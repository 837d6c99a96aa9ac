"""Frame dedup, fork and warm-spare figures (issue: fleet frame cache and fork).

1. N = 1, 4, 16 envs at 640x480, PNG frames, every env types one character per round:
   N forked replicas (identical frames) vs N independent envs (different seeds).
   Reported per round: bytes of StepBatch replies, server PNG encodes, env-steps/s.
2. Fork latency (until every replica is rebuilt, verified and usable) for n = 1, 8,
   with and without warm spares.
3. Reset latency of an env whose Xvfb was killed (the reset restarts the desktop),
   with and without a warm spare.

    python benches/fork_bench.py --address 127.0.0.1:50051
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time

import deskgym

SCREEN = (640, 480)
FIELD = (0xFC, 0xFC, 0xFC)


def field_click(frame) -> dict:
    from deskgym.agents import centroid, mask

    x, y = centroid(mask(frame, FIELD))
    return {"verb": "click", "x": x, "y": y}


class Metered:
    """Counts the bytes of every StepBatch reply a client receives."""

    def __init__(self, client: deskgym.Client) -> None:
        self.bytes = 0
        real = client.step_batch

        def step_batch(*a, **k):
            r = real(*a, **k)
            self.bytes += r.ByteSize()
            return r

        client.step_batch = step_batch  # type: ignore[method-assign]


def rounds(vec: deskgym.DeskgymVectorEnv, client: deskgym.Client, n: int, k: int) -> tuple[float, float, float]:
    meter = Metered(client)
    before = client.cache_stats()
    t0 = time.perf_counter()
    for _ in range(k):
        _, _, _, _, infos = vec.step([{"verb": "type_text", "text": "a"}] * n)
        assert len(set(infos["frame_hash"])) in (1, n), "forked: one frame; independent: n frames"
    dt = time.perf_counter() - t0
    after = client.cache_stats()
    return meter.bytes / k, (after.encodes - before.encodes) / k, n * k / dt


def dedup(address: str, k: int) -> list[tuple[int, tuple, tuple]]:
    out = []
    for n in (1, 4, 16):
        # Forked: one env reaches the typing state, its checkpoint is forked n ways.
        c = deskgym.Client(address)
        src = deskgym.make("type-word", client=c, screen=SCREEN, max_steps=10**6, obs_type="rgb")
        # Fresh seeds per configuration: the server's cache is fleet-wide, so frames an
        # earlier configuration produced would otherwise count as cache hits here.
        obs, _ = src.reset(seed=1000 * n)
        src.step(field_click(obs))
        vec = deskgym.fork(src.save(), n, obs_type="png")
        forked = rounds(vec, c, n, k)
        vec.close()
        src.close()
        c.close()

        # Independent: n envs with their own seeds, each focused on its own field.
        c = deskgym.Client(address)
        seed = 100_000 * n
        vec = deskgym.make_vec("type-word", n, client=c, screen=SCREEN, max_steps=10**6, obs_type="png", seed=seed)
        _, _ = vec.reset(seed=seed)
        # Re-focus from the RGB layout of the same seeds (PNG frames are not decoded here).
        rgb = deskgym.make_vec("type-word", n, client=c, screen=SCREEN, obs_type="rgb", seed=seed)
        robs, _ = rgb.reset(seed=seed)
        rgb.close()
        vec.step([field_click(o) for o in robs])
        independent = rounds(vec, c, n, k)
        vec.close()
        c.close()
        out.append((n, forked, independent))
    return out


def fork_latency(address: str, spares: int, n: int, reps: int) -> tuple[float, float]:
    c = deskgym.Client(address)
    pool = c.create_pool("click-button", 1, screen=SCREEN, warm_spares=spares)
    try:
        c.reset(pool.env_ids[0], seed=3)
        c.step(pool.env_ids[0], deskgym.to_proto({"verb": "click", "x": 2, "y": 470}))
        cp = c.save(pool.env_ids[0])
        ts, used = [], []
        for _ in range(reps):
            if spares:
                wait_for_spares(c, cp, spares)
            # An RPC after seconds of idling costs this VM tens of ms extra (measured:
            # 69 ms after 3.4 s idle vs 1 ms warm, for a no-op RPC): wake the path first.
            c.cache_stats()
            t = time.perf_counter()
            r = c.fork(cp, n)
            ts.append(time.perf_counter() - t)
            used.append(r.from_spares)
            assert all(x.fidelity == 1 for x in r.replicas)
            c.close_pool(r.pool_id)
        return statistics.median(ts) * 1e3, statistics.mean(used)
    finally:
        c.close_pool(pool.pool_id)
        c.close()


def wait_for_spares(c: deskgym.Client, cp, spares: int, timeout: float = 30) -> None:
    """Spares refill in the background; give them time so each rep starts with a full set."""
    time.sleep(1.0 + 0.3 * spares)


def xvfb_pid(display: str) -> int:
    path = f"/tmp/.X11-unix/X{display.lstrip(':')}"
    inodes = set()
    for line in open("/proc/net/unix"):
        parts = line.split()
        if len(parts) >= 8 and parts[-1] == path:
            inodes.add(f"socket:[{parts[6]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == "Xvfb" and any(
                os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")
            ):
                return int(pid)
        except OSError:
            pass
    raise RuntimeError(f"no Xvfb for {display}")


def crash_reset_latency(address: str, spares: int, reps: int) -> float:
    c = deskgym.Client(address)
    pool = c.create_pool("click-target", 1, screen=SCREEN, warm_spares=spares)
    env = pool.env_ids[0]
    try:
        r = c.reset(env, seed=1)
        ts = []
        for _ in range(reps):
            if spares:
                time.sleep(0.5)
            os.kill(xvfb_pid(r.info.extra["display"]), signal.SIGKILL)
            time.sleep(0.05)
            c.cache_stats()  # wake the path (see fork_latency)
            t = time.perf_counter()
            r = c.reset(env, seed=1)
            ts.append(time.perf_counter() - t)
        return statistics.median(ts) * 1e3
    finally:
        c.close_pool(pool.pool_id)
        c.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--reps", type=int, default=5)
    a = p.parse_args()

    print("\n## Forked replicas vs independent envs (640x480, PNG, one character typed per round)\n")
    print("| N | reply KB/round forked | independent | ratio | PNG encodes/round forked | independent | env-steps/s forked | independent |")
    print("|---|---|---|---|---|---|---|---|")
    for n, f, i in dedup(a.address, a.rounds):
        print(f"| {n} | {f[0] / 1e3:.1f} | {i[0] / 1e3:.1f} | {f[0] / i[0]:.2f} | {f[1]:.2f} | {i[1]:.2f} | {f[2]:.0f} | {i[2]:.0f} |")

    print("\n## Fork latency (median, all replicas rebuilt and verified)\n")
    print("| n | no spares ms | 8 warm spares ms | replicas from spares | ratio |")
    print("|---|---|---|---|---|")
    for n in (1, 8):
        cold, _ = fork_latency(a.address, 0, n, a.reps)
        warm, used = fork_latency(a.address, 8, n, a.reps)
        print(f"| {n} | {cold:.0f} | {warm:.0f} | {used:.1f} | {cold / warm:.1f}x |")

    print("\n## Reset after the env's Xvfb was killed (median)\n")
    cold = crash_reset_latency(a.address, 0, a.reps)
    warm = crash_reset_latency(a.address, 1, a.reps)
    print("| | ms |")
    print("|---|---|")
    print(f"| restart Xvfb + task app | {cold:.0f} |")
    print(f"| take a warm spare | {warm:.0f} ({cold / warm:.1f}x faster) |")


if __name__ == "__main__":
    main()
