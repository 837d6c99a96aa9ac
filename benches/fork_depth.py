"""Fork latency against the length of the history behind it (issue 28, item 4).

For each depth, one env takes that many steps, is saved, and the checkpoint is forked
into N replicas; the figure is the Fork call's wall time (every replica rebuilt by
replay and compared with the checkpoint's frame), with each replica's fidelity.

- ``tasks``: the bundled ``type-word`` task, a letter typed per step (every 8th step a
  click on the field), depths 10 / 100 / 1000.
- ``desktop`` (``blank`` task, ``launch_app`` granted): the first step opens
  gnome-terminal (``launch_app terminal``, which waits for its window) and the second
  waits a second, then one key a step typing shell commands (``echo <n>`` and Enter),
  depths 10 / 100 / 300.
- ``office`` (same, ``--office``): LibreOffice Writer, typing a paragraph.

    python benches/fork_depth.py --address 127.0.0.1:50051 [--profiles tasks,desktop]
"""

from __future__ import annotations

import argparse
import os
import time

import deskgym
from deskgym.v1 import deskgym_pb2 as pb

SCREEN = (1280, 720)


def keys_for(n: int, office: bool) -> list[dict]:
    """``n`` one-key steps: shell commands in a terminal, or prose in a document."""
    out: list[dict] = []
    k = 0
    while len(out) < n:
        words = f"line {k} of the text " if office else f"echo {k}"
        out += [{"verb": "type_text", "text": ch} for ch in words]
        out.append({"verb": "key", "keys": "Return"})
        k += 1
    return out[:n]


def history(profile: str, depth: int) -> list[dict]:
    if profile == "tasks":
        acts = []
        for i in range(depth):
            if i % 8 == 7:
                acts.append({"verb": "click", "x": 320, "y": 200})
            else:
                acts.append({"verb": "type_text", "text": "abcdefgh"[i % 8]})
        return acts
    app = "writer" if profile == "office" else "terminal"
    # As an agent would: open the app, give it a second, then type.
    opened = [{"verb": "launch_app", "app": app}, {"verb": "wait", "ms": 1000}]
    return opened + keys_for(depth - len(opened), profile == "office")


def measure(c: deskgym.Client, profile: str, depth: int, n: int) -> tuple[float, list[str]]:
    if profile == "tasks":
        pool = c.create_pool("type-word", 1, screen=(640, 480), max_steps=10**6)
    else:
        pool = c.create_pool("blank", 1, screen=SCREEN, profile="desktop", max_steps=10**6,
                             capabilities=["launch_app"])
    forked = None
    try:
        e = pool.env_ids[0]
        c.reset(e, seed=3)
        for a in history(profile, depth):
            c.step(e, deskgym.to_proto(a), encoding="png")
        cp = c.save(e)
        t = time.perf_counter()
        forked = c.fork(cp, n, encoding="png")
        dt = time.perf_counter() - t
        fid = [pb.Fidelity.Name(r.fidelity).replace("FIDELITY_", "").lower() for r in forked.replicas]
        return dt, fid
    finally:
        if forked is not None:
            c.close_pool(forked.pool_id)
        c.close_pool(pool.pool_id)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", default=os.environ.get("DESKGYM_ADDRESS", deskgym.DEFAULT_ADDRESS))
    ap.add_argument("--profiles", default="tasks,desktop")
    ap.add_argument("-n", type=int, default=2, help="replicas per fork")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    c = deskgym.Client(args.address)
    depths = {"tasks": (10, 100, 1000), "desktop": (10, 100, 300), "office": (10, 100, 300)}
    print(f"\n## Fork of {args.n} after a history (median of {args.rounds})\n")
    print("| profile | steps before the fork | fork | vs 10 steps | fidelity of the replicas |")
    print("|---|---|---|---|---|")
    for profile in args.profiles.split(","):
        first = None
        for depth in depths[profile]:
            runs = [measure(c, profile, depth, args.n) for _ in range(args.rounds)]
            ms = sorted(r[0] for r in runs)[len(runs) // 2] * 1000
            first = first or ms
            fid = ", ".join("/".join(r[1]) for r in runs)
            print(f"| {profile} | {depth} | {ms:.0f} ms | {ms / first:.2f}x | {fid} |", flush=True)


if __name__ == "__main__":
    main()
