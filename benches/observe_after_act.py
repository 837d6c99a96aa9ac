"""What observe-after-act saves an agent loop: one action and the frame the model sees
next, on a 1280x720 bundled task, p50 over ``--n`` rounds, in one process against one
server:

- two calls (the baseline): ``Step`` (its own whole-screen frame, raw: no encode but
  2.7 MB on the wire; or JPEG: an encode but small) then ``Screenshot`` scaled to the
  model's size, JPEG;
- one call: ``Step`` with ``observe={"max_long_edge": ...}``, JPEG: the same scaled frame
  in the step's reply (ACI's observe-after-act);
- the same with ``scope="active_window"`` (the task app's window).

Each frame is checked to be the size asked for, and the two paths to deliver the same
frame hash (the same pixels). ``--changing``: every action changes the screen (a letter
typed into ``type-word``'s field, then erased), so no look finds the screen it saw last;
else a pointer move on ``click-target`` leaves it unchanged (the server's last shaped
frame is reused).

    source scripts/start-server.sh && start_server target/release/deskgym-server
    .venv/bin/python benches/observe_after_act.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import deskgym
from deskgym.a11y import tree_request
from deskgym.actions import to_proto


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--address", default=os.environ.get("DESKGYM_ADDRESS", "127.0.0.1:50051"))
    p.add_argument("--n", type=int, default=300)
    p.add_argument("--long-edge", type=int, default=1024)
    p.add_argument("--changing", action="store_true", help="type a letter each step (a new screen every time)")
    a = p.parse_args()
    c = deskgym.Client(a.address)
    task = "type-word" if a.changing else "click-target"
    pool = c.create_pool(task, 1, screen=(1280, 720), max_steps=100_000)
    env = pool.env_ids[0]
    first = c.reset(env, seed=1, tree=tree_request())
    if a.changing:
        (field,) = [e for e in first.observation.tree.elements if e.role == "text"]
        c.step(env, to_proto({"verb": "click", "ref": field.ref}))
    edge = a.long_edge

    def move(i: int) -> object:
        if a.changing:
            return to_proto({"verb": "type_text", "text": "a"} if i % 2 == 0 else {"verb": "key", "keys": "BackSpace"})
        return to_proto({"verb": "move", "x": 10 + i % 50, "y": 700})

    def two_calls(i: int, step_encoding: str = "raw") -> str:
        c.step(env, move(i), encoding=step_encoding)
        shot = c.screenshot(env, max_long_edge=edge, encoding="jpeg")
        assert max(shot.width, shot.height) == edge
        return str(shot.frame_hash)

    def two_calls_jpeg(i: int) -> str:
        return two_calls(i, "jpeg")

    def one_call(i: int) -> str:
        r = c.step(env, move(i), encoding="jpeg", observe={"max_long_edge": edge})
        assert max(r.observation.width, r.observation.height) == edge and not r.observe_error
        return str(r.observation.frame_hash)

    def one_call_window(i: int) -> str:
        r = c.step(env, move(i), encoding="jpeg", observe={"scope": "active_window", "max_long_edge": edge})
        assert not r.observe_error, r.observe_error
        return str(r.observation.frame_hash)

    paths: dict[str, Callable[[int], str]] = {
        "Step + Screenshot (two calls)": two_calls,
        "Step (JPEG) + Screenshot (two calls)": two_calls_jpeg,
        "Step with observe (one call)": one_call,
        "Step with observe, active window": one_call_window,
    }
    hashes: dict[str, set[str]] = {}
    times: dict[str, list[float]] = {k: [] for k in paths}
    for i in range(a.n):
        # Interleaved, so drift on a shared machine falls on every path alike.
        for name, f in paths.items():
            t = time.perf_counter()
            hashes.setdefault(name, set()).add(f(i))
            times[name].append(time.perf_counter() - t)
    if not a.changing:  # a changing screen differs between paths (each types its own letters)
        assert hashes["Step + Screenshot (two calls)"] == hashes["Step with observe (one call)"], "different frames"
    base = p50_ms(times["Step + Screenshot (two calls)"])
    print(f"1280x720 {task}, frames to long edge {edge} (JPEG), p50 of {a.n}")
    print("| path | p50 | vs two calls | distinct frames seen |")
    print("|---|---|---|---|")
    for name in paths:
        ms = p50_ms(times[name])
        print(f"| {name} | {ms:.2f} ms | {ms / base:.2f}x | {len(hashes[name])} |")
    c.release(pool)
    c.close()


if __name__ == "__main__":
    main()
