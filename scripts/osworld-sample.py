#!/usr/bin/env python3
"""Draw the known-good-solution sample of OSWorld tasks (issue 41 item 3): per domain, a
seeded random draw among the tasks that can run offline (no live web page in their setup
or evaluation, no Google account, not marked `proxy`, not infeasible), so the sample is
not picked for ease. Writes python-client/tests/osworld_solutions/sample.json.

    python3 scripts/osworld-sample.py            # rewrite the sample (seed 41)
    python3 scripts/osworld-sample.py --check    # fail if the file differs from a fresh draw
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "python-client/tests/osworld_tasks/evaluation_examples"
OUT = ROOT / "python-client/tests/osworld_solutions/sample.json"
SEED = 41
# Per domain, about one in six of its offline tasks, at least four.
QUOTA = {"os": 7, "vs_code": 6, "thunderbird": 4, "vlc": 5, "chrome": 5, "gimp": 6,
         "libreoffice_calc": 8, "libreoffice_impress": 7, "libreoffice_writer": 6, "multi_apps": 8}


def _strings(o: Any) -> Iterator[str]:
    if isinstance(o, dict):
        for v in o.values():
            yield from _strings(v)
    elif isinstance(o, list):
        for v in o:
            yield from _strings(v)
    elif isinstance(o, str):
        yield o


def offline(t: dict[str, Any]) -> bool:
    """True when nothing but the file cache (downloads, cloud files) reaches the web."""
    if t.get("proxy"):
        return False
    for step in t.get("config", []):
        if step["type"] in ("googledrive", "login"):
            return False
        if step["type"] != "download" and any("http" in s for s in _strings(step.get("parameters", {}))):
            return False
    ev = t["evaluator"]
    if ev.get("func") == "infeasible":
        return False
    for key in ("result", "expected"):
        getters = ev.get(key)
        for g in getters if isinstance(getters, list) else [getters]:
            if g and g.get("type") != "cloud_file" and any("http" in s for s in _strings(g)):
                return False
    return True


def draw() -> dict[str, list[str]]:
    rng = random.Random(SEED)
    every = json.loads((EXAMPLES / "test_all.json").read_text())
    out = {}
    for domain, ids in every.items():
        ok = sorted(i for i in ids if offline(json.loads((EXAMPLES / "examples" / domain / f"{i}.json").read_text())))
        out[domain] = rng.sample(ok, min(QUOTA[domain], len(ok)))
    return out


def main() -> int:
    text = json.dumps(draw(), indent=1) + "\n"
    if "--check" in sys.argv:
        if OUT.read_text() != text:
            print(f"{OUT} differs from a fresh draw; run scripts/osworld-sample.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"{sum(map(len, json.loads(text).values()))} tasks -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
