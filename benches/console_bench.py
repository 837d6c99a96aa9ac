"""The console as a person sees it, in headless Chromium (Debian's, through Playwright):
glass-to-glass latency of the live view (a frame's capture on the server to its paint
in the page, one host clock) and its bytes per second at 1280x720 while an env types,
and what ``--viewers`` open env pages cost that env's step rate (phases with and
without them alternated ``--rounds`` times in one run). Starts its own server.

    cargo build --release --bins
    .venv/bin/python benches/console_bench.py [--viewers 8 --n 200]
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Any

from playwright.sync_api import sync_playwright

import deskgym
from deskgym.a11y import tree_request
from deskgym.actions import to_proto

REPO = pathlib.Path(__file__).resolve().parents[1]


def start(binary: str, data: str) -> tuple[subprocess.Popen[str], str, str]:
    proc = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--console-listen", "127.0.0.1:0",
                             "--idle-timeout-s", "0", "--data-dir", data],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    address = proc.stdout.readline().split()[-1]
    url = proc.stdout.readline().split()[-1].rstrip("/")
    return proc, address, url


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", default=str(REPO / "target" / "release" / "deskgym-server"))
    p.add_argument("--n", type=int, default=200, help="steps per phase")
    p.add_argument("--viewers", type=int, default=8)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--episode", type=int, default=1000, help="steps of the replayed episode")
    a = p.parse_args()
    data = tempfile.mkdtemp(prefix="deskgym-console-bench-")
    proc, address, url = start(a.server, data)
    c = deskgym.Client(address)
    pool = c.create_pool("type-word", 1, screen=(1280, 720), max_steps=1_000_000)
    env = pool.env_ids[0]
    first = c.reset(env, seed=1, tree=tree_request())
    (field,) = [e for e in first.observation.tree.elements if e.role == "text"]
    c.step(env, to_proto({"verb": "click", "ref": field.ref}))

    def typing(n: int, pace_s: float = 0.0) -> tuple[float, float]:
        """n steps that each change the screen; returns (steps/s, step p50 ms)."""
        times = []
        t0 = time.perf_counter()
        for i in range(n):
            act = {"verb": "type_text", "text": "a"} if i % 2 == 0 else {"verb": "key", "keys": "BackSpace"}
            t = time.perf_counter()
            c.step(env, to_proto(act), encoding="raw")
            times.append(time.perf_counter() - t)
            if pace_s:
                time.sleep(pace_s)
        return n / (time.perf_counter() - t0), statistics.median(times) * 1e3

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=shutil.which("chromium") or "chromium", args=["--no-sandbox"])

        def open_pages(k: int, codec: str = "") -> list[Any]:
            pages = []
            for _ in range(k):
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{url}/env/{env}" + (f"?codec={codec}" if codec else ""))
                page.wait_for_function("() => window.deskgymLive && window.deskgymLive.frames > 0")
                pages.append(page)
            return pages

        # Glass to glass: one viewer, a step every 100 ms (a person's view of an agent).
        print(f"1280x720 type-word, a changing screen every step, 10 steps/s, {a.n} steps, live view at 30 fps")
        print("| live view | frames painted | glass-to-glass p50 | p95 | bytes/s |")
        print("|---|---|---|---|---|")
        for codec in ("h264", "jpeg"):
            (page,) = open_pages(1, codec)
            page.evaluate("() => { window.deskgymLive.latencies.length = 0; window.deskgymLive.bytes = 0; }")
            t0 = time.perf_counter()
            typing(a.n, pace_s=0.1)
            wall = time.perf_counter() - t0
            time.sleep(0.5)
            live: dict[str, Any] = page.evaluate(
                "() => ({lat: window.deskgymLive.latencies, bytes: window.deskgymLive.bytes})")
            page.close()
            lat = sorted(live["lat"])
            print(f"| {'H.264 (WebCodecs)' if codec == 'h264' else 'JPEG'}, 1 page | {len(lat)} "
                  f"| {statistics.median(lat):.0f} ms | {lat[int(len(lat) * 0.95)]:.0f} ms "
                  f"| {live['bytes'] / wall / 1e3:.0f} kB/s |")

        # What the viewers cost the stepping env: phases alternated in one run.
        base, watched = [], []
        for _ in range(a.rounds):
            base.append(typing(a.n))
            pages = open_pages(a.viewers)  # the page's own choice: H.264 here
            watched.append(typing(a.n))
            for pg in pages:
                pg.close()
        b_rate = statistics.median(x[0] for x in base)
        w_rate = statistics.median(x[0] for x in watched)
        b_p50 = statistics.median(x[1] for x in base)
        w_p50 = statistics.median(x[1] for x in watched)
        print(f"\n{a.viewers} console pages (headless Chromium on this host) on one env stepping as fast as it can; "
              f"medians of {a.rounds}")
        print("| viewers | step p50 | steps/s | vs no viewer |")
        print("|---|---|---|---|")
        print(f"| 0 | {b_p50:.2f} ms | {b_rate:.0f} | 1 |")
        print(f"| {a.viewers} pages | {w_p50:.2f} ms | {w_rate:.0f} | {w_rate / b_rate:.2f}x |")
        # The replay view: a recorded episode of --episode steps, scrubbed to positions.
        c.release(pool)
        rec = c.create_pool("type-word", 1, screen=(1280, 720), max_steps=a.episode + 10, record="bench-replay")
        renv = rec.env_ids[0]
        first = c.reset(renv, seed=2, tree=tree_request())
        (field,) = [e for e in first.observation.tree.elements if e.role == "text"]
        c.step(renv, to_proto({"verb": "click", "ref": field.ref}))
        for i in range(a.episode - 1):
            # A growing line of text: (nearly) every frame of the episode is new.
            c.step(renv, to_proto({"verb": "type_text", "text": chr(ord("a") + i % 26)}))
        c.release(rec)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{url}/replay?run=bench-replay")
        episode = page.get_attribute("tr[data-episode]", "data-episode")
        print(f"\nreplay of a {a.episode}-step 1280x720 episode: time from a position's request to its frame shown")
        print("| position | shown in |")
        print("|---|---|")
        page.goto(f"{url}/replay?run=bench-replay&episode={episode}&k=0")
        page.wait_for_function("() => window.deskgymReplay && window.deskgymReplay.shown === 0")
        print(f"| 0 (first open: steps read, frame index built) | {page.evaluate('() => window.deskgymReplay.shownMs'):.0f} ms |")
        for k, what in ((a.episode // 2, "middle (slider jump)"), (a.episode // 2 + 1, "next (loaded ahead)")):
            page.evaluate(f"() => {{ const s = document.getElementById('position'); s.value = '{k}'; "
                          "s.dispatchEvent(new Event('input')); }")
            page.wait_for_function(f"() => window.deskgymReplay.shown === {k}")
            time.sleep(0.3)
            print(f"| {k} {what} | {page.evaluate('() => window.deskgymReplay.shownMs'):.0f} ms |")
        page.close()
        browser.close()
    c.close()
    proc.terminate()
    proc.wait(30)
    shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
