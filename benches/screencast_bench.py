"""What watching costs the watched: one env stepping as fast as it can (pointer moves on
a 1280x720 bundled task, raw frames, default settle) with 0 and with ``--viewers``
screencasts open on it at ``--fps`` (each a thread reading frames), step p50 and steps/s
over ``--n`` steps per phase, phases alternated ``--rounds`` times in one process. Also
each viewer's frames/s and the bytes/s of a viewer on a changing screen.

    source scripts/start-server.sh && start_server target/release/deskgym-server
    .venv/bin/python benches/screencast_bench.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

import deskgym
from deskgym.a11y import tree_request
from deskgym.actions import to_proto


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", default=os.environ.get("DESKGYM_ADDRESS", "127.0.0.1:50051"))
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--viewers", type=int, default=8)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    c = deskgym.Client(a.address)
    pool = c.create_pool("type-word", 1, screen=(1280, 720), max_steps=1_000_000)
    env = pool.env_ids[0]
    first = c.reset(env, seed=1, tree=tree_request())
    (field,) = [e for e in first.observation.tree.elements if e.role == "text"]
    c.step(env, to_proto({"verb": "click", "ref": field.ref}))

    def phase(viewers: int) -> tuple[float, float, float, int]:
        stop = threading.Event()
        got = [0] * viewers
        nbytes = [0] * viewers

        def view(k: int) -> None:
            frames = c.watch(env, fps=a.fps)
            for f in frames:
                got[k] += 1
                nbytes[k] += len(f.jpeg)
                if stop.is_set():
                    frames.close()
                    return

        threads = [threading.Thread(target=view, args=(k,), daemon=True) for k in range(viewers)]
        for t in threads:
            t.start()
        time.sleep(0.5 if viewers else 0)
        times = []
        t0 = time.perf_counter()
        for i in range(a.n):
            # Typing and erasing a letter: every step changes the screen.
            act = {"verb": "type_text", "text": "a"} if i % 2 == 0 else {"verb": "key", "keys": "BackSpace"}
            t = time.perf_counter()
            c.step(env, to_proto(act), encoding="raw")
            times.append(time.perf_counter() - t)
        wall = time.perf_counter() - t0
        stop.set()
        for t in threads:
            t.join(5)
        per_viewer = sum(got) / max(1, viewers) / wall
        return statistics.median(times) * 1e3, a.n / wall, per_viewer, sum(nbytes) // max(1, viewers)

    base, watched = [], []
    for _ in range(a.rounds):
        base.append(phase(0))
        watched.append(phase(a.viewers))
    b_p50 = statistics.median(x[0] for x in base)
    b_rate = statistics.median(x[1] for x in base)
    w_p50 = statistics.median(x[0] for x in watched)
    w_rate = statistics.median(x[1] for x in watched)
    fps = statistics.median(x[2] for x in watched)
    bps = statistics.median(x[3] for x in watched) / (a.n / w_rate)
    print(f"1280x720 type-word, a changing screen every step; {a.viewers} viewers at {a.fps} fps; medians of {a.rounds}")
    print("| viewers | step p50 | steps/s | vs no viewer | frames/s per viewer | bytes/s per viewer |")
    print("|---|---|---|---|---|---|")
    print(f"| 0 | {b_p50:.2f} ms | {b_rate:.0f} | 1 | - | - |")
    print(f"| {a.viewers} | {w_p50:.2f} ms | {w_rate:.0f} | {w_rate / b_rate:.2f}x | {fps:.1f} | {bps / 1e3:.0f} kB/s |")
    c.release(pool)
    c.close()


if __name__ == "__main__":
    main()
