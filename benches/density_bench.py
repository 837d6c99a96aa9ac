"""Desktops per host (issue 28's density figure): how many envs of one profile this
machine holds with each stepping at an agent's pace (``--rate`` steps a second per env,
spread evenly) while the step p99 stays under ``--p99-ms``. Envs are added ``--add`` at a
time; at each size the bench steps every env for ``--seconds`` and reports step p50 and
p99, the memory of everything the server runs (PSS of its process tree, per env) and
the machine's CPU use. Starts its own release server; stops at ``--max`` envs, at the
first size over the p99 bound, or when the server refuses more desktops.

    cargo build --release --bins
    .venv/bin/python benches/density_bench.py [--task click-target --screen 640x480 --max 300]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import statistics
import subprocess
import threading
import time

import deskgym
from deskgym.actions import to_proto
from deskgym.errors import DeskgymError

REPO = pathlib.Path(__file__).resolve().parents[1]


def tree(pid: int) -> list[int]:
    """`pid` and every descendant."""
    children: dict[int, list[int]] = {}
    for d in pathlib.Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def pss_mib(pids: list[int]) -> float:
    total = 0
    for p in pids:
        try:
            for line in pathlib.Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine."""
    f = [float(x) for x in pathlib.Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = f[3] + f[4]
    return sum(f) - idle, sum(f)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", default=str(REPO / "target" / "release" / "deskgym-server"))
    p.add_argument("--task", default="click-target")
    p.add_argument("--screen", default="640x480")
    p.add_argument("--rate", type=float, default=1.0, help="steps a second per env")
    p.add_argument("--add", type=int, default=25)
    p.add_argument("--max", type=int, default=300)
    p.add_argument("--seconds", type=float, default=15.0)
    p.add_argument("--p99-ms", type=float, default=100.0)
    a = p.parse_args()
    w, h = (int(x) for x in a.screen.split("x"))
    proc = subprocess.Popen([a.server, "--listen", "127.0.0.1:0", "--idle-timeout-s", "0",
                             "--max-envs", str(a.max + 8)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    assert proc.stdout is not None
    address = proc.stdout.readline().split()[-1]
    client = deskgym.Client(address)
    envs: list[str] = []
    pools = []
    noop = to_proto({"verb": "noop"})
    print(f"{a.task} at {w}x{h}, each env {a.rate:g} step/s (noop, raw frames), {a.seconds:g} s per size; "
          f"{os.cpu_count()} cores")
    print("| envs | step p50 | step p99 | PSS per env | machine CPU |")
    print("|---|---|---|---|---|")
    try:
        while len(envs) < a.max:
            try:
                pool = client.create_pool(a.task, a.add, screen=(w, h), encoding="raw", max_steps=1_000_000)
            except DeskgymError as e:
                print(f"(no more desktops: {e.code}: {e.message[:120]})")
                break
            pools.append(pool)
            for e in pool.env_ids:
                client.reset(e, seed=len(envs))
                envs.append(e)
            time.sleep(2.0)  # the new desktops settle
            # Every env steps at `rate`, the starts spread evenly over the period.
            latencies: list[float] = []
            lock = threading.Lock()
            period = 1.0 / a.rate
            t0 = time.perf_counter() + 0.2
            end = t0 + a.seconds

            # An agent steps again only once its last step answered: on an overloaded
            # host a step may outlast the period, and the next then waits for it.
            turns = {e: threading.Lock() for e in envs}

            def one(env: str, at: float) -> None:
                delay = at - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                with turns[env]:
                    s = time.perf_counter()
                    client.step(env, noop, encoding="raw")
                    with lock:
                        latencies.append((time.perf_counter() - s) * 1e3)

            busy0, total0 = cpu_times()
            with concurrent.futures.ThreadPoolExecutor(max_workers=32) as ex:
                futures = []
                k = 0
                while t0 + k * period < end:
                    for i, e in enumerate(envs):
                        futures.append(ex.submit(one, e, t0 + k * period + i * period / len(envs)))
                    k += 1
                for f in futures:
                    f.result()
            busy1, total1 = cpu_times()
            lat = sorted(latencies)
            p50, p99 = statistics.median(lat), lat[min(len(lat) - 1, int(len(lat) * 0.99))]
            mem = pss_mib(tree(proc.pid)) / len(envs)
            cpu = 100 * (busy1 - busy0) / max(1.0, total1 - total0)
            print(f"| {len(envs)} | {p50:.1f} ms | {p99:.1f} ms | {mem:.0f} MiB | {cpu:.0f} % |", flush=True)
            if p99 > a.p99_ms:
                print(f"(p99 over {a.p99_ms:g} ms at {len(envs)} envs: stopping)")
                break
    finally:
        for pool in pools:
            client.release(pool)
        client.close()
        proc.terminate()
        proc.wait(60)


if __name__ == "__main__":
    main()
