"""The main job: every bundled task, a random and a scripted pixel agent, N desktops
stepped through ``make_vec``; prints throughput and success rates. MiniWoB++ tasks run
too (``--tasks miniwob/click-button,miniwob/enter-text``), their scripted agent the
DOM-reading oracle of :mod:`deskgym.miniwob`. Each run is recorded
by the server as a ``.skn`` dataset (Parquet tables and per-episode H.264) in its data
directory; a summary, the episode list and a screenshot per task go to ``--out``.

    python -m deskgym.demo --address 127.0.0.1:50051 --num-envs 4 --episodes 16
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time
from typing import Any

import numpy as np

import deskgym
from deskgym.agents.reference import PixelAgent, RandomAgent
from deskgym.miniwob import OracleAgent


_last_draw = 0.0


def progress(label: str, done: int, total: int, steps: int, t0: float) -> None:
    """A one-line progress bar on stderr: redrawn at most 5 times a second on a
    terminal; elsewhere (logs, CI) only the final state is written."""
    global _last_draw
    now = time.perf_counter()
    final = done >= total
    if not final and (not sys.stderr.isatty() or now - _last_draw < 0.2):
        return
    _last_draw = now
    width = 30
    filled = int(width * done / max(total, 1))
    rate = steps / max(time.perf_counter() - t0, 1e-9)
    sys.stderr.write(f"\r  {label:<26} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} episodes  {rate:6.1f} steps/s")
    sys.stderr.flush()


def env_info(infos: dict[str, Any], i: int) -> dict[str, Any]:
    """Per-env view of a vector info dict."""
    return {k: v[i] for k, v in infos.items() if not k.startswith("_") and isinstance(v, np.ndarray)}


def screen_of(task: str, args: argparse.Namespace) -> tuple[int, int] | None:
    """``--screen``, except for a MiniWoB++ page: its own task area."""
    return None if task.startswith("miniwob/") else args.screen


def run(task: str, agent_name: str, args: argparse.Namespace, records: list[dict[str, Any]]) -> dict[str, Any]:
    env = deskgym.make_vec(
        task, args.num_envs, address=args.address, token=args.token, seed=args.seed,
        screen=screen_of(task, args), autoreset_mode="next_step", settle_ms=args.settle_ms,
        record=f"{args.run_prefix}-{task}-{agent_name}" if args.record else None,
    )
    try:
        agents = [
            RandomAgent(env.single_action_space, seed=args.seed + i) if agent_name == "random"
            else OracleAgent(env.client, env.env_ids[i], task) if task.startswith("miniwob/")
            else PixelAgent()
            for i in range(args.num_envs)
        ]
        obs, infos = env.reset(seed=args.seed)
        returns = np.zeros(args.num_envs)
        lengths = np.zeros(args.num_envs, dtype=int)
        seeds = list(infos["seed"])
        resetting = np.zeros(args.num_envs, dtype=bool)
        finished: list[dict[str, Any]] = []
        steps, t0 = 0, time.perf_counter()
        label = f"{task} / {agent_name}"
        while len(finished) < args.episodes:
            actions = [agents[i].act(obs[i], env_info(infos, i)) for i in range(args.num_envs)]
            obs, rew, term, trunc, infos = env.step(actions)
            steps += int((~resetting).sum())
            for i in range(args.num_envs):
                if resetting[i]:  # this step was the autoreset of env i
                    resetting[i] = False
                    returns[i], lengths[i], seeds[i] = 0.0, 0, int(infos["seed"][i])
                    continue
                returns[i] += rew[i]
                lengths[i] += 1
                if term[i] or trunc[i]:
                    resetting[i] = True
                    if len(finished) < args.episodes:
                        rec = {
                            "task": task, "agent": agent_name, "env": i, "seed": int(seeds[i]),
                            "return": float(returns[i]), "length": int(lengths[i]),
                            "success": bool(returns[i] > 0), "terminated": bool(term[i]),
                            "error": str(infos["error"][i]) if "error" in infos and infos["_error"][i] else None,
                        }
                        finished.append(rec)
            progress(label, len(finished), args.episodes, steps, t0)
        elapsed = time.perf_counter() - t0
        sys.stderr.write("\n")
        records.extend(finished)
        return {
            "task": task, "agent": agent_name, "episodes": len(finished),
            "success_rate": float(np.mean([r["success"] for r in finished])),
            "mean_length": float(np.mean([r["length"] for r in finished])),
            "env_steps": steps, "seconds": elapsed, "steps_per_s": steps / elapsed,
            "dataset": env.recording_path,
        }
    finally:
        env.close()


def screenshot(task: str, args: argparse.Namespace, out: pathlib.Path) -> pathlib.Path:
    c = deskgym.Client(args.address, args.token)
    pool = c.create_pool(task, 1, screen=screen_of(task, args) or (0, 0), settle_ms=args.settle_ms)
    try:
        r = c.reset(pool.env_ids[0], seed=args.seed, encoding="png")
        path = out / f"{task.replace('/', '_')}.png"
        path.write_bytes(r.observation.frame)
        return path
    finally:
        c.close_pool(pool.pool_id)
        c.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default=deskgym.DEFAULT_ADDRESS)
    p.add_argument("--token", default=None)
    p.add_argument("--num-envs", type=int, default=4)
    p.add_argument("--episodes", type=int, default=16, help="episodes per task and agent")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--screen", default="640x480", help="WIDTHxHEIGHT")
    p.add_argument("--settle-ms", type=int, default=None,
                   help="XDamage quiet window; default: the task's own policy (sync, no waiting, for the bundled tasks)")
    # The tasks the demo's scripted agent solves: the goal tasks (`blank` has none).
    p.add_argument("--tasks", default=",".join(t for t in deskgym.TASKS if t in PixelAgent.SOLVERS))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    p.add_argument("--out", default=f"runs/demo-{stamp}")
    p.add_argument("--no-record", dest="record", action="store_false", help="do not record .skn datasets")
    args = p.parse_args(argv)
    args.run_prefix = f"demo-{stamp}"
    w, h = (int(v) for v in args.screen.lower().split("x"))
    args.screen = (w, h)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    print(f"deskgym demo: {args.num_envs} desktops per run at {w}x{h}, {args.episodes} episodes per task and agent")
    print(f"server: {args.address}")
    records: list[dict[str, Any]] = []
    summary = []
    for task in args.tasks.split(","):
        screenshot(task, args, out)
        for agent in ("random", "scripted"):
            summary.append(run(task, agent, args, records))

    print()
    print(f"{'task':<24} {'agent':<9} {'episodes':>8} {'success':>8} {'mean len':>9} {'env-steps/s':>12}")
    for s in summary:
        print(f"{s['task']:<24} {s['agent']:<9} {s['episodes']:>8} {s['success_rate']:>8.0%} {s['mean_length']:>9.1f} {s['steps_per_s']:>12.1f}")
    total_steps = sum(s["env_steps"] for s in summary)
    total_s = sum(s["seconds"] for s in summary)
    print(f"\nall runs: {total_steps} env-steps in {total_s:.1f} s = {total_steps / total_s:.1f} env-steps/s")

    with open(out / "episodes.jsonl", "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    (out / "summary.json").write_text(json.dumps({"args": {k: v for k, v in vars(args).items() if k != "token"},
                                                  "runs": summary}, indent=2))
    print(f"wrote {out}/episodes.jsonl ({len(records)} episodes), {out}/summary.json and a screenshot per task ({out}/<task>.png)")
    datasets = [s["dataset"] for s in summary if s["dataset"]]
    if datasets:
        print(f"recorded {len(datasets)} datasets on the server, e.g. {datasets[-1]}")
        print(f"  inspect: python -m deskgym.datasets inspect {datasets[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
