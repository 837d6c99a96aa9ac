"""The files OSWorld's tasks fetch, in one cache the harness fills and the desktops never
reach for: every setup and postconfig ``download``, each VS Code extension a setup
installs from the marketplace by id (its ``.vsix``, from Open VSX), the browsing-history
template and every ``cloud_file`` a metric compares with, at desktop-env's own paths
(``<dir>/<task id>/<uuid5(url)>_<name>`` for downloads, ``<dir>/<task id>/<dest>`` for
cloud files), so ``DesktopEnv(cache_dir=...)`` and ``run --cache-dir`` find them.

    python -m deskgym.osworld.cache fetch --tasks evaluation_examples/test_all.json --dir cache
    python -m deskgym.osworld.cache check --tasks evaluation_examples/test_all.json --dir cache

``fetch`` (on a machine with network) downloads what is missing, several at once, each
to a temporary name renamed into place when whole, so a stopped fetch leaves no partial
file where desktop-env looks and resumes where it stopped. ``check`` lists what is
missing. A run with ``--offline`` (``DesktopEnv(offline=True)``) then never reaches for the
network: a task whose files are not all there fails its reset at once, naming the task,
each URL and the path it belongs at.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from deskgym.osworld import standins

__all__ = ["fetch", "main", "missing"]


def _tasks(test_all: Path, examples: Path) -> Iterator[dict[str, Any]]:
    for domain, ids in json.loads(test_all.read_text()).items():
        for tid in ids:
            yield json.loads((examples / domain / f"{tid}.json").read_text())


def missing(cache_dir: str | Path, task: dict[str, Any]) -> list[tuple[str, Path]]:
    """(URL, path) of each file the task fetches that is not in the cache."""
    base = Path(cache_dir) / task["id"]
    return [(url, base / rel) for rel, _name, _tag, url in standins.needed(task) if not (base / rel).exists()]


def _download(url: str, path: Path, timeout: float) -> str | None:
    import requests

    src = url
    if url.startswith(standins.MARKETPLACE.split("{")[0]):
        # A marketplace record: the latest version's .vsix is the file it names.
        try:
            with requests.get(url, timeout=timeout) as r:
                r.raise_for_status()
                src = r.json()["files"]["download"]
        except Exception as e:  # noqa: BLE001 - reported per file; the others go on
            return f"{url}: {type(e).__name__}: {e}"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
    try:
        with os.fdopen(fd, "wb") as out, requests.get(src, stream=True, timeout=timeout) as r:
            r.raise_for_status()
            for chunk in r.iter_content(1 << 16):
                out.write(chunk)
        os.replace(tmp, path)
        return None
    except Exception as e:  # noqa: BLE001 - reported per file; the others go on
        os.unlink(tmp)
        return f"{url}: {type(e).__name__}: {e}"


def fetch(cache_dir: str | Path, tasks: Sequence[dict[str, Any]], jobs: int = 8,
          timeout: float = 60.0) -> tuple[int, list[str]]:
    """Downloads every missing file of ``tasks``; returns (files fetched, failures)."""
    todo = {path: url for t in tasks for url, path in missing(cache_dir, t)}
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        results = list(pool.map(lambda kv: _download(kv[1], kv[0], timeout), todo.items()))
    failures = [r for r in results if r]
    return len(todo) - len(failures), failures


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m deskgym.osworld.cache", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("fetch", "check"))
    p.add_argument("--tasks", type=Path, required=True, help="OSWorld's test_all.json (domain -> task ids)")
    p.add_argument("--examples", type=Path, help="folder of <domain>/<id>.json (default: beside --tasks)")
    p.add_argument("--dir", default="cache", help="the cache (desktop-env's cache_dir)")
    p.add_argument("--jobs", type=int, default=8, help="downloads at once")
    a = p.parse_args(argv)
    tasks = list(_tasks(a.tasks, a.examples or a.tasks.parent / "examples"))
    if a.command == "fetch":
        got, failures = fetch(a.dir, tasks, a.jobs)
        for f in failures:
            print(f"failed: {f}", file=sys.stderr)
        print(f"{got} files fetched into {a.dir}; {len(failures)} failed")
        return 1 if failures else 0
    gaps = [(t["id"], url, path) for t in tasks for url, path in missing(a.dir, t)]
    for tid, url, path in gaps:
        print(f"{tid}: {url} -> {path}")
    print(f"{len(tasks)} tasks; {len(gaps)} files missing from {a.dir}")
    return 1 if gaps else 0


if __name__ == "__main__":
    raise SystemExit(main())
