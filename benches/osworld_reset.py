"""Reset time per OSWorld domain on one server: the first N tasks of each domain (in
``test_all.json`` order) whose downloads all have stand-ins and that open no live page.
Each reset follows a step, so OSWorld's revert (a fresh sandbox from the profile's home)
runs as it does between two tasks of a sweep.

    source scripts/start-server.sh && start_server target/release/deskgym-server --allow-capabilities exec,files
    .venv/bin/python benches/osworld_reset.py --address "$DESKGYM_ADDRESS" --per-domain 2

``--domains vs_code --per-domain 6`` measures one domain; ``--domains chrome --open-tabs``
the Chrome tasks that open tabs, which are left out otherwise (their pages are live).

To compare two builds (or a host with and without the built ``osworld`` home,
``scripts/osworld-home.py``), run it against each server in turn on the same host.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import tempfile
import time
from typing import Any

from deskgym import osworld
from deskgym.osworld import standins

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "python-client/tests/osworld_tasks/evaluation_examples"
LIVE = {"chrome_open_tabs", "open_tabs", "googledrive", "login"}


def tasks(per_domain: int, cache: str, domains: list[str] | None = None,
          open_tabs: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """The first ``per_domain`` offline tasks of each domain (of ``domains``, default
    all), their stand-ins in ``cache``; with ``open_tabs``, only tasks that open Chrome
    tabs (their live pages do not load here)."""
    live = LIVE - {"chrome_open_tabs"} if open_tabs else LIVE
    out = []
    for domain, ids in json.loads((EXAMPLES / "test_all.json").read_text()).items():
        if domains and domain not in domains:
            continue
        taken = 0
        for tid in ids:
            if taken == per_domain:
                break
            t = json.loads((EXAMPLES / "examples" / domain / f"{tid}.json").read_text())
            types = [s["type"] for s in t.get("config", [])]
            if t.get("proxy") or any(k in live for k in types) or (open_tabs and "chrome_open_tabs" not in types):
                continue
            if standins.fill(cache, t):
                continue  # a download with no stand-in
            out.append((domain, t))
            taken += 1
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", required=True)
    p.add_argument("--per-domain", type=int, default=2)
    p.add_argument("--json", help="write every task's seconds here")
    p.add_argument("--steps", action="store_true", help="print each task's setup steps' seconds as it goes")
    p.add_argument("--domains", nargs="+", help="only these domains (default: all)")
    p.add_argument("--open-tabs", action="store_true",
                   help="only tasks that open Chrome tabs: Chromium's start and the tabs' opening "
                        "(their live pages do not load here)")
    a = p.parse_args()
    cache = tempfile.mkdtemp()
    env = osworld.DesktopEnv(address=a.address, cache_dir=cache, screen_size=(1280, 720), require_a11y_tree=False)
    rows: dict[str, list[tuple[str, float, str]]] = {}
    steps: dict[str, list[tuple[str, float]]] = {}
    try:
        for domain, t in tasks(a.per_domain, cache, a.domains, a.open_tabs):
            env.step("WAIT", pause=0)
            t0 = time.monotonic()
            err = ""
            try:
                env.reset(task_config=t)
            except Exception as e:  # noqa: BLE001 - a task's failure is its row
                err = f"{type(e).__name__}: {e}"[:120]
            rows.setdefault(domain, []).append((t["id"], round(time.monotonic() - t0, 2), err))
            # Where a reset's time goes: each setup step's own seconds.
            steps[t["id"]] = [(f"{o.step} {o.type}", round(o.seconds, 2)) for o in env.setup_outcomes]
            if a.steps:
                print(domain, t["id"][:8], rows[domain][-1][1], steps[t["id"]], err, flush=True)
    finally:
        env.close()
    print("| domain | tasks | reset p50 s | each |\n|---|---|---|---|")
    for domain, rs in rows.items():
        each = ", ".join(f"{s}{' (failed)' if e else ''}" for _, s, e in rs)
        print(f"| {domain} | {len(rs)} | {statistics.median(s for _, s, _ in rs):.1f} | {each} |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps({"resets": rows, "steps": steps}, indent=1))


if __name__ == "__main__":
    main()
