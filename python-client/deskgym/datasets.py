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


def _progress(label: str, done: int, total: int) -> None:
    width = 30
    filled = int(width * done / max(total, 1))
    end = "\n" if done >= total else ""
    if sys.stderr.isatty() or done >= total:
        sys.stderr.write(f"\r{label} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}{end}")
        sys.stderr.flush()


def _hf_features(schema: Any, image_columns: set[str]) -> dict[str, Any]:
    """Hugging Face ``datasets`` feature metadata for a flat schema."""
    import pyarrow as pa

    def value(t: Any) -> dict[str, Any]:
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            return {"dtype": "string", "_type": "Value"}
        if pa.types.is_timestamp(t):
            return {"dtype": f"timestamp[{t.unit}, tz={t.tz}]" if t.tz else f"timestamp[{t.unit}]", "_type": "Value"}
        if pa.types.is_list(t):
            return {"feature": value(t.value_type), "_type": "Sequence"}
        return {"dtype": str(t), "_type": "Value"}

    return {f.name: {"_type": "Image"} if f.name in image_columns else value(f.type) for f in schema}


def _with_hf_metadata(table: Any, image_columns: set[str]) -> Any:
    meta = {b"huggingface": json.dumps({"info": {"features": _hf_features(table.schema, image_columns)}}).encode()}
    return table.replace_schema_metadata(meta)


def _observations(tables: dict[str, Any]) -> Any:
    """Steps joined with the frame each action was taken on (the observation)."""
    steps, frames = tables["steps"], tables["frames"]
    if steps is None or frames is None:
        raise BundleError("the bundle has no steps or frames to export")
    import pyarrow as pa

    # Arrow joins cannot carry struct columns: look frames up by position instead.
    pos = {h: i for i, h in enumerate(frames.column("frame_hash").to_pylist())}
    idx = pa.array([pos.get(h) for h in steps.column("frame_hash_before").to_pylist()], pa.int64())
    obs = steps.append_column("image", frames.column("image").take(idx))
    return obs.sort_by([("episode_id", "ascending"), ("step_index", "ascending")])


def export(path: str | pathlib.Path, out: str | pathlib.Path, fmt: str = "hf", rows_per_file: int = 10_000) -> pathlib.Path:
    """Writes the bundle as Hugging Face ``datasets`` Parquet (``fmt="hf"``) or as a
    LeRobot v3-style layout (``fmt="lerobot"``). Returns the output directory."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    src, dst = pathlib.Path(path), pathlib.Path(out)
    m = manifest(src)
    tables = open(src)
    obs = _observations(tables)
    if fmt == "hf":
        cols = ["episode_id", "step_index", "action_verb", "action_x", "action_y", "action_to_x", "action_to_y",
                "action_text", "action_keys", "action_json", "reward", "terminated", "truncated", "image"]
        ep = tables["episodes"]
        info = dict(zip(ep.column("episode_id").to_pylist(), zip(ep.column("instruction").to_pylist(),
                                                                  ep.column("task").to_pylist())))
        rows = [info.get(e, ("", m["task"])) for e in obs.column("episode_id").to_pylist()]
        data = obs.select(cols).append_column("instruction", pa.array([r[0] for r in rows], pa.string()))
        data = data.append_column("task", pa.array([r[1] for r in rows], pa.string()))
        (dst / "data").mkdir(parents=True, exist_ok=True)
        n = max(1, -(-data.num_rows // rows_per_file))
        for i in range(n):
            part = _with_hf_metadata(data.slice(i * rows_per_file, rows_per_file), {"image"})
            pq.write_table(part, dst / "data" / f"train-{i:05d}-of-{n:05d}.parquet")
            _progress("export hf", i + 1, n)
        return dst
    if fmt == "lerobot":
        episodes = tables["episodes"].sort_by("start_time")
        ep_ids = episodes.column("episode_id").to_pylist()
        tasks = sorted(set(episodes.column("instruction").to_pylist()))
        task_index = {t: i for i, t in enumerate(tasks)}
        ep_index = {e: i for i, e in enumerate(ep_ids)}
        obs = obs.filter(pc.is_in(obs.column("episode_id"), pa.array(ep_ids)))
        instr = dict(zip(ep_ids, episodes.column("instruction").to_pylist()))
        e_col = obs.column("episode_id").to_pylist()
        t_start = pc.cast(obs.column("t_start"), pa.int64()).to_pylist()
        first: dict[str, int] = {}
        for e, t in zip(e_col, t_start):
            first.setdefault(e, t)
        actions = [[float(v or 0) for v in row] for row in zip(*(obs.column(c).to_pylist() for c in
                   ("action_x", "action_y", "action_to_x", "action_to_y")))]
        data = pa.table({
            "index": pa.array(range(obs.num_rows), pa.int64()),
            "episode_index": pa.array([ep_index[e] for e in e_col], pa.int64()),
            "frame_index": pa.array([i - 1 for i in obs.column("step_index").to_pylist()], pa.int64()),
            "timestamp": pa.array([(t - first[e]) / 1000 for e, t in zip(e_col, t_start)], pa.float32()),
            "task_index": pa.array([task_index[instr[e]] for e in e_col], pa.int64()),
            "action": pa.array(actions, pa.list_(pa.float32())),
            "action.verb": obs.column("action_verb"),
            "action.json": obs.column("action_json"),
            "observation.image": obs.column("image"),
            "next.reward": pc.cast(obs.column("reward"), pa.float32()),
            "next.done": pc.or_(obs.column("terminated"), obs.column("truncated")),
        })
        (dst / "data" / "chunk-000").mkdir(parents=True, exist_ok=True)
        (dst / "meta" / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
        pq.write_table(_with_hf_metadata(data, {"observation.image"}), dst / "data" / "chunk-000" / "file-000.parquet")
        _progress("export lerobot", 1, 3)
        lengths = [e_col.count(e) for e in ep_ids]
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        # Episode videos go to videos/, one file per episode (LeRobot v3 allows several
        # episodes per file; the from/to timestamps say where each one is).
        import shutil

        vids = episodes.column("video_file").to_pylist()
        ends = episodes.column("video_end_s").to_pylist()
        video_key = "observation.video"
        vdir = dst / "videos" / video_key / "chunk-000"
        have_video = any(v for v in vids)
        if have_video:
            vdir.mkdir(parents=True, exist_ok=True)
        for i, v in enumerate(vids):
            if v and (src / v).exists():
                shutil.copyfile(src / v, vdir / f"file-{i:03d}.mp4")
        video_cols = {}
        if have_video:
            video_cols = {
                f"videos/{video_key}/chunk_index": pa.array([0 if v else None for v in vids], pa.int64()),
                f"videos/{video_key}/file_index": pa.array([i if v else None for i, v in enumerate(vids)], pa.int64()),
                f"videos/{video_key}/from_timestamp": pa.array([0.0 if v else None for v in vids], pa.float64()),
                f"videos/{video_key}/to_timestamp": pa.array(ends, pa.float64()),
            }
        pq.write_table(pa.table({
            "episode_index": pa.array(range(len(ep_ids)), pa.int64()),
            "tasks": pa.array([[instr[e]] for e in ep_ids], pa.list_(pa.string())),
            "length": pa.array(lengths, pa.int64()),
            "dataset_from_index": pa.array(starts, pa.int64()),
            "dataset_to_index": pa.array([s + n for s, n in zip(starts, lengths)], pa.int64()),
            "data/chunk_index": pa.array([0] * len(ep_ids), pa.int64()),
            "data/file_index": pa.array([0] * len(ep_ids), pa.int64()),
            **video_cols,
        }), dst / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
        pq.write_table(pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": tasks}),
                       dst / "meta" / "tasks.parquet")
        _progress("export lerobot", 2, 3)
        w, h = m["screen"]
        info = {
            "codebase_version": "v3.0",
            "robot_type": "deskgym",
            "fps": 10,
            "total_episodes": len(ep_ids),
            "total_frames": data.num_rows,
            "total_tasks": len(tasks),
            "chunks_size": 1000,
            "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4" if have_video else None,
            "features": {
                **({video_key: {"dtype": "video", "shape": [h, w, 3], "names": ["height", "width", "channel"],
                                "info": {"video.codec": "h264", "video.fps": 10, "video.pix_fmt": "yuv420p",
                                         "video.note": "one slot per reset/step; from/to timestamps per episode"}}}
                   if have_video else {}),
                "observation.image": {"dtype": "image", "shape": [h, w, 3], "names": ["height", "width", "channel"]},
                "action": {"dtype": "float32", "shape": [4], "names": ["x", "y", "to_x", "to_y"]},
                "action.verb": {"dtype": "string", "shape": [1]},
                "action.json": {"dtype": "string", "shape": [1]},
                "next.reward": {"dtype": "float32", "shape": [1]},
                "next.done": {"dtype": "bool", "shape": [1]},
                "timestamp": {"dtype": "float32", "shape": [1]},
                "frame_index": {"dtype": "int64", "shape": [1]},
                "episode_index": {"dtype": "int64", "shape": [1]},
                "index": {"dtype": "int64", "shape": [1]},
                "task_index": {"dtype": "int64", "shape": [1]},
            },
            "deskgym": {"run_id": m["run_id"], "task": m["task"], "source": str(src)},
        }
        (dst / "meta" / "info.json").write_text(json.dumps(info, indent=2))
        _progress("export lerobot", 3, 3)
        return dst
    raise BundleError(f"unknown export format {fmt!r}; use hf or lerobot")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deskgym.datasets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser("inspect", help="summarise a bundle")
    ins.add_argument("path")
    ins.add_argument("--json", action="store_true", help="print JSON")
    exp = sub.add_parser("export", help="write a Hugging Face or LeRobot v3-style dataset")
    exp.add_argument("path")
    exp.add_argument("--format", choices=["hf", "lerobot"], default="hf")
    exp.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "export":
            print(export(args.path, args.out, args.format))
            return 0
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
