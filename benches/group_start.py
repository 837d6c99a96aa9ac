"""Group starts (issue 42 item 7): N sessions at one start state, by ``deskgym.make_group``
(route ``auto``: one pool of N, one StepBatch of seeded resets, the hashes checked; and
route ``fork``: one desktop reset, saved, forked N - 1 times) against N independent
``deskgym.make`` + ``reset(seed=)`` (one after another, and from 16 threads), on the same
server in the same run. Each figure is the median wall time until every session is
ready (closing not counted), with whether the N start frames were identical.

    deskgym-server --listen 127.0.0.1:50051 --max-envs 80 &
    python benches/group_start.py --address 127.0.0.1:50051 --sizes 8 64 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import deskgym


def independent(address: str, task: str, seed: int, n: int, screen: tuple[int, int], threads: int) -> tuple[list, set]:
    """N envs made and reset with ``seed`` each, as a trainer's env factory would."""

    def one(_: int) -> tuple[deskgym.DeskgymEnv, str]:
        env = deskgym.make(task, address=address, screen=screen)
        _, info = env.reset(seed=seed)
        return env, info["frame_hash"]

    if threads <= 1:
        made = [one(i) for i in range(n)]
    else:
        with ThreadPoolExecutor(threads) as ex:
            made = list(ex.map(one, range(n)))
    return [e for e, _ in made], {h for _, h in made}


def timed(start: Callable[[], tuple[Callable[[], None], bool]], rounds: int, pause: float) -> tuple[float, bool]:
    """Median seconds of ``start`` (which returns its closer and whether it was
    identical) over ``rounds``, and whether every round was identical. After each
    close, ``pause`` seconds (not counted): the server stops the closed desktops in the
    background, and a start that overlaps their teardown measures the teardown too."""
    secs, same = [], True
    for _ in range(rounds):
        t0 = time.perf_counter()
        close, ok = start()
        secs.append(time.perf_counter() - t0)
        same = same and ok
        close()
        time.sleep(pause)
    return statistics.median(secs), same


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--address", default="127.0.0.1:50051")
    p.add_argument("--task", default="click-target")
    p.add_argument("--sizes", type=int, nargs="+", default=[8, 64])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--screen", default="640x480")
    p.add_argument("--pause", type=float, default=2.0, help="seconds after each close, not counted")
    args = p.parse_args()
    screen = tuple(int(v) for v in args.screen.split("x"))
    assert len(screen) == 2
    scr = (screen[0], screen[1])

    def group(n: int, route: str) -> Callable[[], tuple[Callable[[], None], bool]]:
        def start() -> tuple[Callable[[], None], bool]:
            g = deskgym.make_group(args.task, 3, n, route=route, address=args.address, screen=scr)
            return g.close, g.report.identical
        return start

    def solo(n: int, threads: int) -> Callable[[], tuple[Callable[[], None], bool]]:
        def start() -> tuple[Callable[[], None], bool]:
            envs, hashes = independent(args.address, args.task, 3, n, scr, threads)

            def close() -> None:
                for e in envs:
                    e.close()
            return close, len(hashes) == 1
        return start

    print(f"{args.task} at {args.screen}, median of {args.rounds} rounds (s, identical starts)")
    print("| N | make_group auto (seed) | make_group fork | N x make+reset | N x make+reset, 16 threads | "
          "sequential / group | threads / group |")
    print("|---|---|---|---|---|---|---|")
    for n in args.sizes:
        g, g_ok = timed(group(n, "auto"), args.rounds, args.pause * max(1, n // 8))
        f, f_ok = timed(group(n, "fork"), args.rounds, args.pause * max(1, n // 8))
        s, s_ok = timed(solo(n, 1), args.rounds, args.pause * max(1, n // 8))
        t, t_ok = timed(solo(n, 16), args.rounds, args.pause * max(1, n // 8))
        print(f"| {n} | {g:.2f} ({g_ok}) | {f:.2f} ({f_ok}) | {s:.2f} ({s_ok}) | {t:.2f} ({t_ok}) | "
              f"{s / g:.1f}x | {t / g:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
