"""Time to first action: axstream's streaming executor vs parsing the response after it ends.

A model writes the recorded response (python-client/tests/axstream/drag_response.txt:
narration, two fences, seven action lines) at a steady token rate (default 50 tokens/s,
4 characters a token, in 4-character chunks). Two runs on the same env and seed, in the
same process:

- streaming: each chunk goes to ``Executor.feed`` as it is written; a line runs when its
  newline arrives;
- whole response (the baseline): wait for the last chunk, then send the response at once
  (what a runtime that parses the finished answer does).

Reported per run: time from the first token to the end of the first action (TTFA) and to
the end of the last line, medians over ``--runs``.

    source scripts/start-server.sh && start_server target/release/deskgym-server
    .venv/bin/python benches/axstream_ttfa.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import time

import deskgym
from deskgym.axstream import Executor, Report

RESPONSE = (pathlib.Path(__file__).resolve().parents[1] / "python-client/tests/axstream/drag_response.txt").read_text()


def generate(rate_chars_s: float, chunk: int = 4):
    """Yields the response in chunks at the model's pace."""
    t0 = time.perf_counter()
    for i in range(0, len(RESPONSE), chunk):
        due = t0 + (i + chunk) / rate_chars_s
        time.sleep(max(0.0, due - time.perf_counter()))
        yield RESPONSE[i:i + chunk]


def first_act(reports: list[Report], t_end: dict[int, float]) -> float:
    return min(t_end[r.line] for r in reports if r.op == "act" and r.status == "executed")


def run(env, streaming: bool, rate: float) -> tuple[float, float]:
    env.reset(seed=11)
    ex = Executor(env)
    t0 = time.perf_counter()
    t_end: dict[int, float] = {}
    reports: list[Report] = []

    def took(rs: list[Report]) -> None:
        now = time.perf_counter() - t0
        for r in rs:
            t_end[r.line] = now
        reports.extend(rs)

    if streaming:
        for c in generate(rate):
            took(ex.feed(c))
    else:
        text = "".join(generate(rate))
        took(ex.feed(text))
    took(ex.close())
    assert [r.status for r in reports] == ["executed"] * 7, [str(r) for r in reports]
    return first_act(reports, t_end), max(t_end.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", default=deskgym.client.DEFAULT_ADDRESS)
    p.add_argument("--tokens-per-s", type=float, default=50.0)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    rate = a.tokens_per_s * 4
    env = deskgym.make("drag-to-zone", address=a.address, screen=(320, 240))
    try:
        res: dict[str, list[tuple[float, float]]] = {"streaming": [], "whole": []}
        for _ in range(a.runs):
            for mode in ("streaming", "whole"):
                res[mode].append(run(env, mode == "streaming", rate))
    finally:
        env.close()
    med = {m: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for m, v in res.items()}
    print(f"response: {len(RESPONSE)} chars at {a.tokens_per_s:g} tokens/s = {len(RESPONSE) / rate:.2f} s to write")
    for m, (ttfa, last) in med.items():
        print(f"{m:>10}: first action done at {ttfa * 1e3:7.0f} ms, last line at {last * 1e3:7.0f} ms")
    print(f"TTFA ratio (whole / streaming): {med['whole'][0] / med['streaming'][0]:.1f}x; "
          f"completion ratio: {med['whole'][1] / med['streaming'][1]:.2f}x")


if __name__ == "__main__":
    main()
