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
#: Terminations decided by the task itself (the rest: closed, reset, restore, env_crash).
FINISHED = ("success", "failure", "max_steps")
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


def open(  # noqa: A001 - the natural name here
    path: str | pathlib.Path, *, address: str | None = None, token: str | None = None,
    cache_dir: str | pathlib.Path = "deskgym-recordings",
) -> dict[str, Any]:
    """``{"episodes": pa.Table, "steps": ..., "frames": ..., "events": ...}``.

    ``path``: a bundle on this machine; or, with ``address``, a run name on that server
    (yours), fetched into ``cache_dir`` first (resumable; see
    :meth:`deskgym.Client.download_recording`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if address is not None:
        from deskgym.client import Client

        client = Client(address, token, lease_ttl_s=None)
        try:
            path = client.download_recording(str(path), cache_dir)
        finally:
            client.close()
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
    why = ep.column("termination").to_pylist() if n_ep else []
    # Episodes cut short by the trainer (close, an early reset, a restore) or by a crash
    # say nothing about the agent: the success rate counts only episodes that ended by
    # the task's own rules.
    finished = [w for w in why if w in FINISHED]
    successes = finished.count("success")
    observed = m["counts"]["frames_observed"]
    stored = frames.num_rows if frames is not None else 0
    size = sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return {
        "run": m["run_id"],
        "task": m["task"],
        "status": m["status"],
        "episodes": n_ep,
        "episodes_finished": len(finished),
        "steps": steps.num_rows if steps is not None else 0,
        "success_rate": successes / len(finished) if finished else 0.0,
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


#: The export formats.
EXPORT_FORMATS = ("hf", "lerobot", "chat")


def export(path: str | pathlib.Path, out: str | pathlib.Path, fmt: str = "hf", rows_per_file: int = 10_000, *,
           dialect: str = "tools", images: bool = True) -> pathlib.Path:
    """Writes the bundle as Hugging Face ``datasets`` Parquet (``fmt="hf"``), as a
    LeRobot v3-style layout (``fmt="lerobot"``) or as chat examples for supervised
    fine-tuning (``fmt="chat"``, see :func:`_export_chat`; ``dialect`` and ``images`` are
    its options). Returns the output directory."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    src, dst = pathlib.Path(path), pathlib.Path(out)
    m = manifest(src)
    tables = open(src)
    obs = _observations(tables)
    if fmt == "hf":
        cols = ["episode_id", "env_id", "step_index", "action_verb", "action_x", "action_y", "action_to_x",
                "action_to_y", "action_text", "action_keys", "action_json", "reward", "terminated", "truncated",
                "frame_hash_before", "image"]
        ep = tables["episodes"]
        start = pc.cast(ep.column("start_time"), pa.int64()).to_pylist()
        info = dict(zip(ep.column("episode_id").to_pylist(), zip(ep.column("instruction").to_pylist(),
                                                                  ep.column("task").to_pylist(),
                                                                  ep.column("seed").to_pylist(), start)))
        # Episodes in the order they started (episode ids sort "…/10" before "…/2").
        e_col = obs.column("episode_id").to_pylist()
        order = sorted(range(obs.num_rows), key=lambda i: (info.get(e_col[i], ("", "", 0, 0))[3], e_col[i],
                                                          obs.column("step_index")[i].as_py()))
        obs = obs.take(pa.array(order, pa.int64()))
        rows = [info.get(e, ("", m["task"], None, 0)) for e in obs.column("episode_id").to_pylist()]
        data = obs.select(cols).rename_columns([c if c != "frame_hash_before" else "frame_hash" for c in cols])
        data = data.append_column("instruction", pa.array([r[0] for r in rows], pa.string()))
        data = data.append_column("task", pa.array([r[1] for r in rows], pa.string()))
        data = data.append_column("seed", pa.array([r[2] for r in rows], pa.uint64()))
        (dst / "data").mkdir(parents=True, exist_ok=True)
        n = max(1, -(-data.num_rows // rows_per_file))
        for i in range(n):
            part = _with_hf_metadata(data.slice(i * rows_per_file, rows_per_file), {"image"})
            pq.write_table(part, dst / "data" / f"train-{i:05d}-of-{n:05d}.parquet")
            _progress("export hf", i + 1, n)
        return dst
    if fmt == "lerobot":
        return _export_lerobot(src, dst, m, tables, obs)
    if fmt == "chat":
        return _export_chat(dst, m, tables, obs, dialect=dialect, images=images, rows_per_file=rows_per_file)
    raise BundleError(f"unknown export format {fmt!r}; use {', '.join(EXPORT_FORMATS)}")


#: How the assistant's action is written in a chat export: ``tools`` as a structured
#: tool call (``tool_calls``, arguments as a JSON string), or as text in a grammar of
#: :mod:`deskgym.dialect` (:data:`deskgym.dialect.WRITE_FORMATS`).
CHAT_DIALECTS = ("tools", "tool_call", "xml")

_CHAT_SYSTEM = (
    "You operate a computer's desktop to complete the user's task. You see a screenshot of the screen; "
    "coordinates are pixels of the screenshot, (0, 0) at its top left. Actions: click(x, y), double_click(x, y), "
    "right_click(x, y), move(x, y), drag(x, y, to_x, to_y), scroll(x, y, dy, dx), type_text(text), key(keys) "
    "(X key names joined by '+', e.g. 'ctrl+s'), wait(ms)."
)
_CHAT_WRITE = {
    "tools": "Answer with one tool call.",
    "tool_call": 'Answer with one <tool_call>{"name": ..., "arguments": {...}}</tool_call> block.',
    "xml": 'Answer with one element, e.g. <click x="10" y="20"/> or <type_text>hello</type_text>.',
}


def _chat_schema(images: bool) -> Any:
    """Arrow types of the chat columns: every message has every key (absent ones null),
    as Hugging Face ``datasets`` needs one struct type per column."""
    import pyarrow as pa

    content = pa.list_(pa.struct([("type", pa.string()), ("text", pa.string())]))
    call = pa.struct([("type", pa.string()),
                      ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
    message = pa.struct([("role", pa.string()), ("content", content), ("tool_calls", pa.list_(call))])
    fields = [("messages", pa.list_(message))]
    if images:
        fields.append(("images", pa.list_(pa.struct([("bytes", pa.binary()), ("path", pa.string())]))))
    return fields


def _export_chat(dst: pathlib.Path, m: dict[str, Any], tables: dict[str, Any], obs: Any, *, dialect: str,
                 images: bool, rows_per_file: int) -> pathlib.Path:
    """One conversation per step, the layout TRL's ``SFTTrainer`` and ``datasets`` load
    (``messages``, ``images``): a system message (the action vocabulary), a user message
    (the episode's instruction, the actions taken so far in the episode, and the screen
    the action was taken on as an image part), the assistant's answer (the step's
    action, as a tool call or as text in ``dialect``). Provenance columns:
    ``episode_id``, ``step_index``, ``task``, ``seed``, ``reward`` (the step's),
    ``episode_return`` and ``success`` (the episode's: filter to train on good runs).
    Failed steps are left out (they ran nothing); so are actions no call names (window
    and app verbs, element targets), counted in ``chat.json`` beside the data."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from deskgym.dialect import DialectError, tool_call, write_action

    if dialect not in CHAT_DIALECTS:
        raise BundleError(f"unknown chat dialect {dialect!r}; use {', '.join(CHAT_DIALECTS)}")
    ep = {e["episode_id"]: e for e in tables["episodes"].to_pylist()} if tables["episodes"] is not None else {}
    w, h = m["screen"]
    system = {"role": "system", "content": [{"type": "text", "text": f"{_CHAT_SYSTEM} {_CHAT_WRITE[dialect]}"}],
              "tool_calls": None}
    rows: dict[str, list[Any]] = {k: [] for k in ("messages", "images", "episode_id", "step_index", "task", "seed",
                                                  "reward", "episode_return", "success")}
    skipped: dict[str, int] = {}
    history: dict[str, list[str]] = {}
    cols = ("episode_id", "step_index", "action_json", "reward", "image", "error_code")
    for eid, step, action_json, reward, image, error in zip(*(obs.column(c).to_pylist() for c in cols)):
        if error:
            continue
        action = json.loads(action_json)
        try:
            name, args = tool_call(action)
        except DialectError:
            skipped[action.get("verb", "")] = skipped.get(action.get("verb", ""), 0) + 1
            continue
        e = ep.get(eid, {})
        done = history.setdefault(eid, [])
        said = (f"Task: {e.get('instruction', '')}\nThe screen is {w}x{h} pixels.\n"
                + ("Actions so far: " + "; ".join(done) if done else "No action taken yet."))
        user = [{"type": "text", "text": said}] + ([{"type": "image", "text": None}] if images else [])
        answer: dict[str, Any]
        if dialect == "tools":
            answer = {"role": "assistant", "content": [],
                      "tool_calls": [{"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
        else:
            answer = {"role": "assistant", "content": [{"type": "text", "text": write_action(action, dialect)}],
                      "tool_calls": None}
        done.append(f"{name}({', '.join(f'{k}={v!r}' for k, v in args.items())})")
        rows["messages"].append([system, {"role": "user", "content": user, "tool_calls": None}, answer])
        rows["images"].append([{"bytes": image["bytes"], "path": None}])
        rows["episode_id"].append(eid)
        rows["step_index"].append(step)
        rows["task"].append(e.get("task", m["task"]))
        rows["seed"].append(e.get("seed"))
        rows["reward"].append(reward)
        rows["episode_return"].append(e.get("episode_return"))
        rows["success"].append(e.get("success"))
    if not rows["messages"]:
        raise BundleError("the bundle has no step a chat example can be written for"
                          + (f" (skipped: {skipped})" if skipped else ""))
    fields = dict(_chat_schema(images))
    table = pa.table({
        "messages": pa.array(rows["messages"], fields["messages"]),
        **({"images": pa.array(rows["images"], fields["images"])} if images else {}),
        "episode_id": pa.array(rows["episode_id"], pa.string()),
        "step_index": pa.array(rows["step_index"], pa.uint32()),
        "task": pa.array(rows["task"], pa.string()),
        "seed": pa.array(rows["seed"], pa.uint64()),
        "reward": pa.array(rows["reward"], pa.float64()),
        "episode_return": pa.array(rows["episode_return"], pa.float64()),
        "success": pa.array(rows["success"], pa.bool_()),
    })
    (dst / "data").mkdir(parents=True, exist_ok=True)
    n = max(1, -(-table.num_rows // rows_per_file))
    for i in range(n):
        part = table.slice(i * rows_per_file, rows_per_file)
        meta = {"info": {"features": _chat_features(images, part.schema)}}
        part = part.replace_schema_metadata({b"huggingface": json.dumps(meta).encode()})
        pq.write_table(part, dst / "data" / f"train-{i:05d}-of-{n:05d}.parquet")
        _progress("export chat", i + 1, n)
    (dst / "chat.json").write_text(json.dumps({"examples": table.num_rows, "dialect": dialect, "images": images,
                                               "skipped": skipped}, indent=2))
    return dst


def _chat_features(images: bool, schema: Any) -> dict[str, Any]:
    """``datasets`` features of a chat export: ``images`` as a list of ``Image`` (decoded
    to PIL on access, as ``SFTTrainer`` wants them), the rest as their Arrow types."""
    plain = _hf_features(schema.remove(schema.get_field_index("images")) if images else schema, set())
    for name in ("messages",):
        plain[name] = _value_feature(schema.field(name).type)
    if images:
        plain["images"] = {"feature": {"_type": "Image"}, "_type": "List"}
    return plain


def _value_feature(t: Any) -> Any:
    """The ``datasets`` feature of a nested Arrow type (lists as ``List``, structs as
    dicts of their fields)."""
    import pyarrow as pa

    if pa.types.is_list(t):
        return {"feature": _value_feature(t.value_type), "_type": "List"}
    if pa.types.is_struct(t):
        return {t.field(i).name: _value_feature(t.field(i).type) for i in range(t.num_fields)}
    if pa.types.is_string(t):
        return {"dtype": "string", "_type": "Value"}
    return {"dtype": str(t), "_type": "Value"}


#: Frames decoded for image statistics (evenly spaced), as LeRobot samples them too.
STATS_IMAGES = 500


def _pandas_index_metadata(index: str, columns: dict[str, str]) -> dict[bytes, bytes]:
    """Schema metadata that makes pandas read column ``index`` as the DataFrame index
    (LeRobot looks tasks up by their text, the index of ``meta/tasks.parquet``)."""
    cols = [{"name": n, "field_name": n, "pandas_type": t, "numpy_type": "object" if t == "unicode" else t,
             "metadata": None} for n, t in columns.items()]
    meta = {"index_columns": [index], "column_indexes": [], "columns": cols, "creator": {"library": "deskgym"},
            "pandas_version": "2.2.0"}
    return {b"pandas": json.dumps(meta).encode()}


def _stats(values: Any) -> dict[str, Any]:
    """min/max/mean/std/count over axis 0 of a (n, ...) array, as LeRobot's stats.json."""
    import numpy as np

    a = np.asarray(values, dtype=np.float64)
    return {"min": a.min(axis=0).tolist(), "max": a.max(axis=0).tolist(), "mean": a.mean(axis=0).tolist(),
            "std": a.std(axis=0).tolist(), "count": [int(a.shape[0])]}


def _image_stats(images: list[Any]) -> dict[str, Any]:
    """Per-channel stats of PNG frames scaled to [0, 1], shaped (3, 1, 1) as LeRobot's."""
    import io

    import numpy as np
    from PIL import Image

    step = max(1, len(images) // STATS_IMAGES)
    sums, sq, lo, hi, n = np.zeros(3), np.zeros(3), np.ones(3), np.zeros(3), 0
    for img in images[::step]:
        a = np.asarray(Image.open(io.BytesIO(img["bytes"])).convert("RGB"), dtype=np.float64) / 255.0
        px = a.reshape(-1, 3)
        sums += px.sum(axis=0)
        sq += (px**2).sum(axis=0)
        lo, hi, n = np.minimum(lo, px.min(axis=0)), np.maximum(hi, px.max(axis=0)), n + px.shape[0]
    mean = sums / max(n, 1)
    std = np.sqrt(np.maximum(sq / max(n, 1) - mean**2, 0.0))

    def shaped(v: Any) -> Any:
        return [[[float(x)]] for x in v]

    return {"min": shaped(lo), "max": shaped(hi), "mean": shaped(mean), "std": shaped(std),
            "count": [len(images[::step])]}


#: The LeRobot feature the episodes' videos are.
LEROBOT_VIDEO = "observation.video"


def _lerobot_episodes(episodes: Any, obs: Any) -> tuple[list[str], dict[str, list[int]], dict[str, int]]:
    """The episodes to export, in start order (those with at least one step, each cut at
    its first failed step), each one's observation rows, and its row in ``episodes``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    start = pc.cast(episodes.column("start_time"), pa.int64()).to_pylist()
    ep_rows = sorted(zip(start, range(episodes.num_rows)))
    by_episode: dict[str, list[int]] = {}
    errors = obs.column("error_code").to_pylist() if "error_code" in obs.column_names else [None] * obs.num_rows
    cut: set[str] = set()
    for i, (e, err) in enumerate(zip(obs.column("episode_id").to_pylist(), errors)):
        if e in cut:
            continue
        if err:
            cut.add(e)
            continue
        by_episode.setdefault(e, []).append(i)  # obs is sorted by step_index within an episode
    ep_ids_all = episodes.column("episode_id").to_pylist()
    order = [ep_ids_all[j] for _, j in ep_rows if by_episode.get(ep_ids_all[j])]
    if not order:
        raise BundleError("the bundle has no episode with a step to export")
    row_of = {e: j for _, j in ep_rows for e in [ep_ids_all[j]]}
    return order, by_episode, row_of


def _lerobot_videos(src: pathlib.Path, dst: pathlib.Path, m: dict[str, Any], vids: list[Any], order: list[str],
                    row_of: dict[str, int], lengths: list[int], fps: int) -> dict[str, Any] | None:
    """Copies one video per episode and returns the episode table's video columns, or
    ``None`` when the bundle's videos cannot serve. LeRobot v3 allows several episodes
    per file (the from/to timestamps say where each one is); all or none: a video key
    must cover every episode. Only constant-rate videos have a frame at every ``k / fps``
    (a variable-rate recording, --record-video-variable-rate, keeps its images but not
    its videos here)."""
    import shutil

    import pyarrow as pa

    have_video = m.get("video_fps") is not None and bool(m.get("video_constant_rate")) and all(
        vids[row_of[e]] and (src / vids[row_of[e]]).exists() for e in order)
    if not have_video:
        return None
    vdir = dst / "videos" / LEROBOT_VIDEO / "chunk-000"
    vdir.mkdir(parents=True, exist_ok=True)
    for k, e in enumerate(order):
        shutil.copyfile(src / vids[row_of[e]], vdir / f"file-{k:03d}.mp4")
    return {
        f"videos/{LEROBOT_VIDEO}/chunk_index": pa.array([0] * len(order), pa.int64()),
        f"videos/{LEROBOT_VIDEO}/file_index": pa.array(range(len(order)), pa.int64()),
        f"videos/{LEROBOT_VIDEO}/from_timestamp": pa.array([0.0] * len(order), pa.float64()),
        f"videos/{LEROBOT_VIDEO}/to_timestamp": pa.array([n / fps for n in lengths], pa.float64()),
    }


def _lerobot_info(screen: tuple[int, int], fps: int, episodes: int, frames: int, tasks: int,
                  have_video: bool) -> dict[str, Any]:
    """``meta/info.json``: the dataset's shape and every feature's type."""
    w, h = screen
    return {
        "codebase_version": "v3.0",
        "robot_type": "deskgym",
        "fps": fps,
        "total_episodes": episodes,
        "total_frames": frames,
        "total_tasks": tasks,
        "chunks_size": 1000,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4" if have_video else None,
        "features": {
            **({LEROBOT_VIDEO: {"dtype": "video", "shape": [h - h % 2, w - w % 2, 3],
                                "names": ["height", "width", "channel"],
                                "info": {"video.codec": "h264", "video.fps": fps, "video.pix_fmt": "yuv420p",
                                         "video.height": h - h % 2, "video.width": w - w % 2, "video.channels": 3,
                                         "video.is_depth_map": False, "has_audio": False}}}
               if have_video else {}),
            "observation.image": {"dtype": "image", "shape": [h, w, 3], "names": ["height", "width", "channel"]},
            "action": {"dtype": "float32", "shape": [4], "names": ["x", "y", "to_x", "to_y"]},
            "action.verb": {"dtype": "string", "shape": [1], "names": None},
            "action.json": {"dtype": "string", "shape": [1], "names": None},
            "next.reward": {"dtype": "float32", "shape": [1], "names": None},
            "next.done": {"dtype": "bool", "shape": [1], "names": None},
            "timestamp": {"dtype": "float32", "shape": [1], "names": None},
            "frame_index": {"dtype": "int64", "shape": [1], "names": None},
            "episode_index": {"dtype": "int64", "shape": [1], "names": None},
            "index": {"dtype": "int64", "shape": [1], "names": None},
            "task_index": {"dtype": "int64", "shape": [1], "names": None},
        },
    }


def _export_lerobot(src: pathlib.Path, dst: pathlib.Path, m: dict[str, Any], tables: dict[str, Any],
                    obs: Any) -> pathlib.Path:
    """A LeRobot v3.0 dataset that ``LeRobotDataset(repo_id, root=dst)`` loads offline.

    - Episodes in start order with contiguous indices; only those with at least one
      step (an episode cut by ``close()`` right after its reset has no frames).
    - Row ``k`` of an episode is its ``k``-th step: the observation the action was taken
      on, ``frame_index = k`` and ``timestamp = k / fps``; rows are stored in episode
      order, so ``dataset_from_index``/``dataset_to_index`` are contiguous ranges. An
      episode is cut at its first failed step (no observation follows it).
    - The recorder's per-episode MP4s are constant frame rate (one frame per reset or
      step), so the frame for row ``k`` is at ``k / fps`` in its episode's file.
    - ``meta/stats.json`` for the numeric and image features.
    """
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    fps = int(m.get("video_fps") or 10)
    episodes = tables["episodes"]
    order, by_episode, row_of = _lerobot_episodes(episodes, obs)
    instr = episodes.column("instruction").to_pylist()
    tasks = sorted({instr[row_of[e]] for e in order})
    task_index = {t: i for i, t in enumerate(tasks)}
    take = [i for e in order for i in by_episode[e]]
    rows = obs.take(pa.array(take, pa.int64()))
    lengths = [len(by_episode[e]) for e in order]
    ep_of_row = [k for k, n in enumerate(lengths) for _ in range(n)]
    frame_index = [f for n in lengths for f in range(n)]
    actions = [[float(v or 0) for v in row] for row in zip(*(rows.column(c).to_pylist() for c in
               ("action_x", "action_y", "action_to_x", "action_to_y")))]
    rewards = pc.cast(rows.column("reward"), pa.float32())
    data = pa.table({
        "index": pa.array(range(rows.num_rows), pa.int64()),
        "episode_index": pa.array(ep_of_row, pa.int64()),
        "frame_index": pa.array(frame_index, pa.int64()),
        "timestamp": pa.array([f / fps for f in frame_index], pa.float32()),
        "task_index": pa.array([task_index[instr[row_of[order[k]]]] for k in ep_of_row], pa.int64()),
        "action": pa.array(actions, pa.list_(pa.float32(), 4)),
        "action.verb": rows.column("action_verb"),
        "action.json": rows.column("action_json"),
        "observation.image": rows.column("image"),
        "next.reward": rewards,
        "next.done": pc.or_(rows.column("terminated"), rows.column("truncated")),
    })
    (dst / "data" / "chunk-000").mkdir(parents=True, exist_ok=True)
    (dst / "meta" / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    pq.write_table(_with_hf_metadata(data, {"observation.image"}), dst / "data" / "chunk-000" / "file-000.parquet")
    _progress("export lerobot", 1, 3)
    starts = [sum(lengths[:k]) for k in range(len(lengths))]
    video_cols = _lerobot_videos(src, dst, m, episodes.column("video_file").to_pylist(), order, row_of, lengths, fps)
    have_video = video_cols is not None
    pq.write_table(pa.table({
        "episode_index": pa.array(range(len(order)), pa.int64()),
        "tasks": pa.array([[instr[row_of[e]]] for e in order], pa.list_(pa.string())),
        "length": pa.array(lengths, pa.int64()),
        "dataset_from_index": pa.array(starts, pa.int64()),
        "dataset_to_index": pa.array([s + n for s, n in zip(starts, lengths)], pa.int64()),
        "data/chunk_index": pa.array([0] * len(order), pa.int64()),
        "data/file_index": pa.array([0] * len(order), pa.int64()),
        "deskgym/episode_id": pa.array(order, pa.string()),
        **(video_cols or {}),
    }), dst / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    tasks_table = pa.table({"task": pa.array(tasks, pa.string()),
                            "task_index": pa.array(range(len(tasks)), pa.int64())})
    tasks_table = tasks_table.replace_schema_metadata(
        _pandas_index_metadata("task", {"task": "unicode", "task_index": "int64"}))
    pq.write_table(tasks_table, dst / "meta" / "tasks.parquet")
    _progress("export lerobot", 2, 3)
    image_stats = _image_stats(rows.column("image").to_pylist())
    stats = {
        "action": _stats(actions),
        "next.reward": _stats([[r] for r in rewards.to_pylist()]),
        "observation.image": image_stats,
        **({LEROBOT_VIDEO: image_stats} if have_video else {}),
        "timestamp": _stats([[f / fps] for f in frame_index]),
        "frame_index": _stats([[f] for f in frame_index]),
    }
    (dst / "meta" / "stats.json").write_text(json.dumps(stats))
    info = _lerobot_info(m["screen"], fps, len(order), data.num_rows, len(tasks), have_video)
    (dst / "meta" / "info.json").write_text(json.dumps(info, indent=2))
    _progress("export lerobot", 3, 3)
    return dst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deskgym.datasets", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    ins = sub.add_parser("inspect", help="summarise a bundle")
    ins.add_argument("path")
    ins.add_argument("--json", action="store_true", help="print JSON")
    exp = sub.add_parser("export", help="write a Hugging Face, LeRobot v3-style or chat (SFT) dataset")
    exp.add_argument("path")
    exp.add_argument("out_dir", nargs="?", help="the output folder (or --out)")
    exp.add_argument("--format", choices=EXPORT_FORMATS, default="hf")
    exp.add_argument("--out")
    exp.add_argument("--dialect", choices=CHAT_DIALECTS, default="tools",
                     help="chat: the assistant's action as a tool call (tools) or as text in a grammar")
    exp.add_argument("--no-images", action="store_true", help="chat: no screenshots (text-only models)")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "export":
            out = args.out or args.out_dir
            if not out or (args.out and args.out_dir):
                parser.error("export: give the output folder once, as OUT or --out OUT")
            print(export(args.path, out, args.format, dialect=args.dialect, images=not args.no_images))
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
