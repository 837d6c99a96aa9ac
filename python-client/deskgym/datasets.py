"""Reading ``.skn`` recordings: ``open`` returns pyarrow tables; ``inspect`` summarises.

    python -m deskgym.datasets inspect deskgym-data/my-run.skn

A bundle is a directory with ``manifest.json`` and one folder of Parquet chunks per
table (``episodes``, ``steps``, ``frames``, ``events``). Chunks are renamed into place
only once complete, so every ``*.parquet`` is readable, even after a crash; DuckDB
reads a table with ``read_parquet('<bundle>/steps/*.parquet')``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Any

TABLES = ("episodes", "steps", "frames", "events")
FORMAT = "deskgym.skn"


class BundleError(Exception):
    """The path is not a readable ``.skn`` bundle (missing, foreign or damaged)."""


def manifest(path: str | pathlib.Path) -> dict[str, Any]:
    """The bundle's ``manifest.json``, checked to be a deskgym bundle."""
    p = pathlib.Path(path)
    try:
        m = json.loads((p / "manifest.json").read_text())
    except FileNotFoundError:
        raise BundleError(f"{p} is not a .skn bundle: no manifest.json") from None
    except (OSError, ValueError) as e:
        raise BundleError(f"{p} is not a readable .skn bundle: manifest.json: {e}") from None
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise BundleError(f"{p} is not a .skn bundle: manifest format is {m.get('format') if isinstance(m, dict) else m!r}")
    return m


def open(path: str | pathlib.Path) -> dict[str, Any]:  # noqa: A001 - the natural name here
    """``{"episodes": pa.Table, "steps": ..., "frames": ..., "events": ...}``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    p = pathlib.Path(path)
    manifest(p)
    out = {}
    for t in TABLES:
        files = sorted((p / t).glob("*.parquet"))
        try:
            tables = [pq.read_table(f) for f in files]
        except (OSError, pa.ArrowInvalid) as e:
            raise BundleError(f"{p}: a {t} chunk cannot be read: {e}") from None
        out[t] = pa.concat_tables(tables) if tables else None
    return out


def inspect(path: str | pathlib.Path) -> dict[str, Any]:
    """A summary: episodes, steps, success rate, distinct frames, dedup ratio, bytes."""
    p = pathlib.Path(path)
    m = manifest(p)
    tables = open(p)
    ep, steps, frames = tables["episodes"], tables["steps"], tables["frames"]
    n_ep = ep.num_rows if ep is not None else 0
    successes = sum(ep.column("success").to_pylist()) if n_ep else 0
    observed = m["counts"]["frames_observed"]
    stored = frames.num_rows if frames is not None else 0
    size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return {
        "run": m["run_id"],
        "task": m["task"],
        "status": m["status"],
        "episodes": n_ep,
        "steps": steps.num_rows if steps is not None else 0,
        "success_rate": successes / n_ep if n_ep else 0.0,
        "frames_observed": observed,
        "frames_stored": stored,
        "dedup_ratio": observed / stored if stored else 0.0,
        "bytes": size,
        "dropped_records": m["dropped_records"],
        "lost_chunks": m["lost_chunks"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deskgym.datasets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser("inspect", help="summarise a bundle")
    ins.add_argument("path")
    ins.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    try:
        s = inspect(args.path)
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(s))
    else:
        for k, v in s.items():
            print(f"{k:>16}: {v:.3f}" if isinstance(v, float) else f"{k:>16}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
