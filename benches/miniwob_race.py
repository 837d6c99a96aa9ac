"""MiniWoB++ on deskgym vs MiniWoB++'s own environment, same machine, same run.

For each task and env count: N envs through ``deskgym.make_vec("miniwob/<task>")`` and
N envs through MiniWoB++'s own ``gymnasium.make_vec("miniwob/<task>-v1",
vectorization_mode="async")`` (Selenium + headless Chromium per env, Debian's
chromium-driver), both stepped with the same random policy (a click at a uniform
point of the 160x210 task area; on text tasks every third action types a word), with
Gymnasium's next-step autoreset: env-steps/s, batch step p50/p99; then one env's
reset and step p50, and memory per env (PSS of every process the env side runs: for deskgym the
server's children, Xvfb, sandbox, Chromium; for MiniWoB the vector env's workers,
chromedriver and Chromium).

    export DESKGYM_MINIWOB_DIR=$(.venv/bin/python -c 'from deskgym.registration import miniwob_dir; print(miniwob_dir())')
    source scripts/start-server.sh && start_server target/release/deskgym-server --max-envs 64
    .venv/bin/python benches/miniwob_race.py --address "$DESKGYM_ADDRESS" --server-pid "$DESKGYM_SERVER_PID"
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import time
from typing import Any

import gymnasium as gym
import numpy as np

import deskgym


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for k in kids.get(p, []):
            out.append(k)
            todo.append(k)
    return out


def tree_pss_mib(pid: int) -> float:
    return sum(pss_kib(p) for p in descendants(pid)) / 1024


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


class Policy:
    """Random clicks in the task area; on a text task every third action types."""

    def __init__(self, seed: int, text: bool) -> None:
        self.rng = random.Random(seed)
        self.text = text
        self.n = 0

    def next(self) -> tuple[str, Any]:
        self.n += 1
        if self.text and self.n % 3 == 0:
            return ("type", self.rng.choice(["abc", "Myron", "hello"]))
        return ("click", (self.rng.randrange(160), self.rng.randrange(50, 210)))


def ours(kind_arg: tuple[str, Any]) -> dict[str, Any]:
    kind, arg = kind_arg
    return {"verb": "click", "x": arg[0], "y": arg[1]} if kind == "click" else {"verb": "type_text", "text": arg}


def run_deskgym(address: str, task: str, n: int, steps: int, text: bool) -> dict[str, Any]:
    env = deskgym.make_vec(f"miniwob/{task}", n, address=address, seed=0, autoreset_mode="next_step")
    try:
        env.reset(seed=0)
        pols = [Policy(i, text) for i in range(n)]
        for _ in range(5):  # warm
            env.step([ours(p.next()) for p in pols])
        ts = []
        t0 = time.perf_counter()
        while len(ts) * n < steps:
            acts = [ours(p.next()) for p in pols]
            s = time.perf_counter()
            env.step(acts)
            ts.append(time.perf_counter() - s)
        wall = time.perf_counter() - t0
        return {"steps_s": len(ts) * n / wall, "p50": pct(ts, 0.5), "p99": pct(ts, 0.99)}
    finally:
        env.close()


def miniwob_vec(task: str, n: int) -> Any:
    import miniwob

    gym.register_envs(miniwob)
    # Its observations (DOM lists) have no fixed shape: no shared memory.
    return gym.make_vec(f"miniwob/{task}-v1", num_envs=n, vectorization_mode="async",
                        vector_kwargs={"shared_memory": False})


def miniwob_actions(types: list[Any], pols: list[Policy]) -> dict[str, Any]:
    """The policies' next actions in the batched form of MiniWoB's action space."""
    from miniwob.action import ActionTypes

    kinds = [p.next() for p in pols]
    n = len(pols)
    return {
        "action_type": np.array([types.index(ActionTypes.CLICK_COORDS if k == "click" else ActionTypes.TYPE_TEXT)
                                 for k, _ in kinds]),
        "coords": np.array([arg if k == "click" else (0, 0) for k, arg in kinds], dtype=np.float32),
        "field": np.zeros(n, dtype=np.int64),
        "key": np.zeros(n, dtype=np.int64),
        "ref": np.zeros(n, dtype=np.int64),
        "text": tuple(arg if k == "type" else "a" for k, arg in kinds),
    }


def run_miniwob(task: str, n: int, steps: int, text: bool) -> dict[str, Any]:
    env = miniwob_vec(task, n)
    try:
        env.reset(seed=0)
        from miniwob.action import ActionSpaceConfig

        # The environment's default action space (its Discrete action_type indexes these).
        types = list(ActionSpaceConfig.get_preset("all_supported").action_types)
        pols = [Policy(i, text) for i in range(n)]
        for _ in range(5):
            env.step(miniwob_actions(types, pols))
        ts = []
        t0 = time.perf_counter()
        while len(ts) * n < steps:
            acts = miniwob_actions(types, pols)
            s = time.perf_counter()
            env.step(acts)
            ts.append(time.perf_counter() - s)
        wall = time.perf_counter() - t0
        mem = tree_pss_mib(os.getpid()) / n
        return {"steps_s": len(ts) * n / wall, "p50": pct(ts, 0.5), "p99": pct(ts, 0.99), "pss": mem}
    finally:
        env.close()


def p50_of(call: Any, k: int) -> float:
    """Median seconds of ``call(i)`` for i in 0..k-1."""
    ts = []
    for i in range(k):
        t0 = time.perf_counter()
        call(i)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def single_env(address: str, task: str, k: int) -> dict[str, float]:
    """One env: reset p50 (seeds 0..k-1) and the p50 of k steps that click an empty
    corner of the task area, deskgym's and MiniWoB++'s own."""
    out: dict[str, float] = {}
    env = deskgym.make(f"miniwob/{task}", address=address)
    try:
        env.reset(seed=0)
        out["ours_reset"] = p50_of(lambda s: env.reset(seed=s), k)
        out["ours_step"] = p50_of(lambda _: env.step({"verb": "click", "x": 150, "y": 5}), k)
    finally:
        env.close()
    env = deskgym.make(f"miniwob/{task}", address=address, task_options={"reload": "always"})
    try:
        env.reset(seed=0)
        out["ours_reload_reset"] = p50_of(lambda s: env.reset(seed=s), k)
    finally:
        env.close()
    import miniwob
    from miniwob.action import ActionTypes

    # MiniWoB++'s own interface on deskgym: each reset and step also reads the page's
    # elements (the DOM observation) over the same call.
    iface = gym.make(f"deskgym/miniwob-{task}-v0", address=address)
    try:
        iface.reset(seed=0)
        out["iface_reset"] = p50_of(lambda s: iface.reset(seed=s), k)
        click = iface.unwrapped.create_action(ActionTypes.CLICK_COORDS, coords=np.array([150, 5]))
        out["iface_step"] = p50_of(lambda _: iface.step(click), k)
    finally:
        iface.close()
    gym.register_envs(miniwob)
    m = gym.make(f"miniwob/{task}-v1")
    try:
        m.reset(seed=0)
        out["theirs_reset"] = p50_of(lambda s: m.reset(seed=s), k)
        click = m.unwrapped.create_action(ActionTypes.CLICK_COORDS, coords=np.array([150, 5]))
        out["theirs_step"] = p50_of(lambda _: m.step(click), k)
    finally:
        m.close()
    return out


def deskgym_pss(address: str, task: str, n: int, server_pid: int) -> float:
    before = tree_pss_mib(server_pid)
    env = deskgym.make_vec(f"miniwob/{task}", n, address=address, seed=0)
    try:
        env.reset(seed=0)
        env.step([{"verb": "click", "x": 80, "y": 120}] * n)
        return (tree_pss_mib(server_pid) - before) / n
    finally:
        env.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--server-pid", type=int, required=True)
    p.add_argument("--tasks", default="click-button,enter-text")
    p.add_argument("--envs", default="4,16")
    p.add_argument("--steps", type=int, default=400, help="env-steps per run")
    p.add_argument("--single-only", action="store_true", help="only the one-env figures")
    a = p.parse_args()
    os.environ.setdefault("MINIWOB_CHROME_BINARY", shutil.which("chromium") or "chromium")
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", shutil.which("chromedriver") or "chromedriver")
    print(f"{'task':<14} {'envs':>4} | {'deskgym st/s':>12} {'p50 ms':>7} {'p99 ms':>7} | "
          f"{'miniwob st/s':>12} {'p50 ms':>7} {'p99 ms':>7} | {'ratio':>6}")
    for task in a.tasks.split(","):
        text = task != "click-button"
        for n in () if a.single_only else (int(x) for x in a.envs.split(",")):
            d = run_deskgym(a.address, task, n, a.steps, text)
            m = run_miniwob(task, n, a.steps, text)
            print(f"{task:<14} {n:>4} | {d['steps_s']:>12.1f} {d['p50'] * 1e3:>7.1f} {d['p99'] * 1e3:>7.1f} | "
                  f"{m['steps_s']:>12.1f} {m['p50'] * 1e3:>7.1f} {m['p99'] * 1e3:>7.1f} | {d['steps_s'] / m['steps_s']:>5.1f}x",
                  flush=True)
            if n == 4:
                mem_d = deskgym_pss(a.address, task, n, a.server_pid)
                print(f"{'':<14} memory per env (PSS): deskgym {mem_d:.0f} MiB, miniwob {m['pss']:.0f} MiB", flush=True)
        one = single_env(a.address, task, 20)
        for what in ("reset", "step"):
            o, i, t = one[f"ours_{what}"], one[f"iface_{what}"], one[f"theirs_{what}"]
            print(f"{'':<14} one env, {what} p50: deskgym {o * 1e3:.1f} ms, deskgym with MiniWoB++'s "
                  f"interface {i * 1e3:.1f} ms, miniwob {t * 1e3:.1f} ms ({t / o:.1f}x, {t / i:.1f}x)", flush=True)
        print(f"{'':<14} one env, reset p50 with reload=always: deskgym {one['ours_reload_reset'] * 1e3:.1f} ms",
              flush=True)


if __name__ == "__main__":
    main()
