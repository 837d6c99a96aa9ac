"""Recording: .skn bundles read back with pyarrow and DuckDB, crash safety, bad input."""

from __future__ import annotations

import json
import pathlib
import shutil
import struct
import subprocess
import sys
import time
import uuid

import duckdb
import numpy as np
import pyarrow.parquet as pq
import pytest

import deskgym
import deskgym.datasets as ds
from deskgym.agents.reference import PixelAgent


def mp4_seconds(mp4: bytes) -> float:
    """Duration from the MP4's movie header (mvhd), without a decoder."""
    i = mp4.index(b"mvhd")
    if mp4[i + 4] == 0:
        timescale, duration = struct.unpack(">II", mp4[i + 16:i + 24])
    else:
        timescale, duration = struct.unpack(">IQ", mp4[i + 24:i + 36])
    return duration / timescale

from conftest import Server


def run_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def test_round_trip_50_episodes_over_4_envs(address: str) -> None:
    env = deskgym.make_vec("click-button", 4, address=address, screen=(320, 240), max_steps=3,
                           record=run_name(), seed=0)
    path = pathlib.Path(env.recording_path)
    assert path.name.endswith(".skn") and path.is_absolute()
    agent, rng = PixelAgent(), np.random.default_rng(0)
    env.action_space.seed(0)
    obs, infos = env.reset(seed=0)
    returns: list[float] = []
    running = np.zeros(4)
    resetting = np.zeros(4, dtype=bool)
    steps = 0
    try:
        while len(returns) < 50:
            sample = env.action_space.sample()
            actions = []
            for i in range(4):
                info_i = {k: v[i] for k, v in infos.items() if not k.startswith("_") and isinstance(v, np.ndarray)}
                scripted = rng.random() < 0.5 and "task" in info_i
                actions.append(agent.act(obs[i], info_i) if scripted else {k: v[i] for k, v in sample.items()})
            obs, rew, term, trunc, infos = env.step(actions)
            for i in range(4):
                if resetting[i]:
                    resetting[i] = False
                    continue
                steps += 1
                running[i] += rew[i]
                if term[i] or trunc[i]:
                    returns.append(float(running[i]))
                    running[i] = 0.0
                    resetting[i] = True
    finally:
        env.close()

    m = ds.manifest(path)
    assert m["status"] == "closed" and m["dropped_records"] == 0
    t = ds.open(path)
    ep = t["episodes"].to_pylist()
    finished = [e for e in ep if e["termination"] != "closed"]
    assert len(finished) == len(returns)
    assert sorted(e["episode_return"] for e in finished) == sorted(returns)
    assert {e["termination"] for e in finished} <= {"success", "failure", "max_steps"}
    assert t["steps"].num_rows == steps == m["counts"]["steps"]
    hashes = set(t["frames"].column("frame_hash").to_pylist())
    assert set(t["steps"].column("frame_hash_after").to_pylist()) <= hashes
    assert set(t["steps"].column("frame_hash_before").to_pylist()) <= hashes
    assert t["frames"].num_rows < m["counts"]["frames_observed"], "frames are stored once"
    img = t["frames"].column("image")[0].as_py()
    assert img["bytes"].startswith(b"\x89PNG") and img["path"] is None
    kinds = set(t["events"].column("kind").to_pylist())
    assert {"pool_created", "env_started", "reset", "encoder", "pool_closed"} <= kinds
    # One H.264 MP4 per episode: the reset frame plus one frame per step, at 10 fps.
    assert m["encoder"] in ("nvh264enc", "x264enc", "openh264enc") and m["videos"] == len(ep)
    for e in ep:
        video = (path / e["video_file"]).read_bytes()
        assert video[4:8] == b"ftyp"
        assert e["video_start_s"] == 0 and e["video_end_s"] == pytest.approx((e["length"] + 1) / 10)
        # The file itself lasts that long: one picture per slot (constant frame rate).
        assert mp4_seconds(video) == pytest.approx(e["video_end_s"], abs=0.01)
    seqs = t["events"].column("seq").to_pylist()
    assert seqs == sorted(seqs) == list(range(1, len(seqs) + 1))

    import datasets as hf

    frames_ds = hf.load_dataset("parquet", data_files=str(path / "frames" / "*.parquet"), split="train")
    assert len(frames_ds) == t["frames"].num_rows and frames_ds[0]["image"].size == (320, 240)

    con = duckdb.connect()
    n = con.execute(f"select count(*) from read_parquet('{path}/steps/*.parquet')").fetchone()[0]
    assert n == steps
    r = con.execute(f"select sum(episode_return) from read_parquet('{path}/episodes/*.parquet') "
                    "where termination <> 'closed'").fetchone()[0]
    assert r == pytest.approx(sum(returns))

    out = subprocess.run([sys.executable, "-m", "deskgym.datasets", "inspect", str(path), "--json"],
                         capture_output=True, text=True, check=True)
    summary = json.loads(out.stdout)
    assert summary["steps"] == steps and summary["dedup_ratio"] > 1
    # Episodes cut off by close() are not failures.
    ended = [w for w in t["episodes"].column("termination").to_pylist() if w in ("success", "failure", "max_steps")]
    assert summary["episodes_finished"] == len(ended) < summary["episodes"]
    assert summary["success_rate"] == pytest.approx(ended.count("success") / len(ended))


def test_kill_9_leaves_only_readable_files(tmp_path: pathlib.Path) -> None:
    data = tmp_path / "data"
    s = Server("--data-dir", str(data), "--record-roll-bytes", "1", "--idle-timeout-s", "0")
    killed = False
    try:
        env = deskgym.make_vec("click-target", 2, address=s.address, screen=(320, 240),
                               max_steps=2, record="crashy", seed=0)
        env.reset(seed=0)
        ended = stepped = 0
        for _ in range(7):
            _, _, term, trunc, infos = env.step([{"verb": "noop"}] * 2)
            ended += int((term | trunc).sum())
            stepped += int((infos["step_index"] > 0).sum())  # autoreset rounds are not steps
        # Every record rolls a chunk (four a step: its row, its frame, its action and ack
        # events); let the writer catch up with the steps before the kill.
        deadline = time.monotonic() + 60
        while ds.manifest(data / "crashy.skn")["counts"]["steps"] < stepped and time.monotonic() < deadline:
            time.sleep(0.1)
        s.proc.kill()
        s.proc.wait()
        killed = True
    finally:
        if not killed:
            s.stop()
    bundle = data / "crashy.skn"
    m = ds.manifest(bundle)
    assert m["status"] == "open", "killed before a clean close"
    con = duckdb.connect()
    for t in ds.TABLES:
        for f in (bundle / t).glob("*.parquet"):
            pq.read_table(f)
            con.execute(f"select count(*) from read_parquet('{f}')").fetchone()
    t = ds.open(bundle)
    assert t["episodes"].num_rows == m["counts"]["episodes"] == ended
    assert t["steps"].num_rows == m["counts"]["steps"] == stepped == 10

    # The next server over the same data dir closes the bundle out and counts the loss.
    s2 = Server("--data-dir", str(data), "--idle-timeout-s", "0")
    try:
        deskgym.Client(s2.address).capabilities()  # serving: start-up recovery is done
        m2 = ds.manifest(bundle)
        assert m2["status"] == "crashed" and m2["lost_chunks"] >= 1
        assert not list(bundle.rglob("*.tmp"))
    finally:
        assert s2.stop() == 0


def test_a_full_disk_stops_the_recording_not_the_envs(tmp_path: pathlib.Path) -> None:
    """A write failure mid-run (a 1 MiB tmpfs filling up) stops that recording only: the
    recorded env and an unrecorded neighbour keep stepping, the chunks readers see are
    whole rolls that match the manifest, nothing half-written stays, and closing the
    recorded env answers INTERNAL with the cause."""
    small = tmp_path / "small"
    small.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                           capture_output=True, text=True)
    if mount.returncode != 0:  # CI runs as root, where this test always runs
        pytest.skip(f"simulating a full disk needs a small tmpfs (root): {mount.stderr.strip()}")
    try:
        s = Server("--data-dir", str(small), "--record-roll-bytes", "1", "--idle-timeout-s", "0")
        try:
            kw = dict(address=s.address, screen=(640, 480), max_steps=1, seed=0)
            rec = deskgym.make("click-target", record="full", **kw)
            plain = deskgym.make("click-target", **kw)
            bundle = pathlib.Path(rec.recording_path)
            extra = None  # rounds to go once the disk is (nearly) full
            for i in range(1000):
                for env in (rec, plain):
                    env.reset(seed=i)
                    env.step({"verb": "click", "x": 320, "y": 240})
                if extra is None and shutil.disk_usage(small).free < 64 << 10:
                    extra = 20
                elif extra is not None:
                    extra -= 1
                    if extra == 0:
                        break
            assert extra == 0, "the disk never filled up"
            time.sleep(0.5)  # let the writer reach the wall
            plain.reset(seed=0)
            plain.step({"verb": "noop"})
            plain.close()
            with pytest.raises(deskgym.DeskgymError) as e:
                rec.close()
            assert e.value.code == "INTERNAL" and "No space left" in e.value.message, e.value.message
            assert shutil.disk_usage(small).total <= 1 << 20
        finally:
            assert s.stop() == 0
        m = ds.manifest(bundle)
        assert m["status"] == "open" and m["counts"]["chunks"] > 0
        assert not list(bundle.rglob("*.tmp")), "failed writes leave nothing behind"
        on_disk = {t: sorted(f.relative_to(bundle).as_posix() for f in (bundle / t).glob("*.parquet"))
                   for t in ds.TABLES}
        assert on_disk == {t: sorted(m["files"].get(t, [])) for t in ds.TABLES}
        t = ds.open(bundle)
        assert t["steps"].num_rows == m["counts"]["steps"] > 0
        assert t["episodes"].num_rows == m["counts"]["episodes"] > 0
        for f in bundle.rglob("*.parquet"):
            duckdb.connect().execute(f"select count(*) from read_parquet('{f}')").fetchone()
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_bad_run_names_and_unwritable_data_dir(address: str, client: deskgym.Client, tmp_path: pathlib.Path) -> None:
    for bad in ["../escape", "a/b", ".hidden", "sp ace", "x" * 65]:
        with pytest.raises(deskgym.DeskgymError) as e:
            client.create_pool("click-target", 1, screen=(320, 240), record=bad)
        assert e.value.code == "INVALID_ARGUMENT" and e.value.message.startswith("record:"), bad
    name = run_name()
    pool = client.create_pool("click-target", 1, screen=(320, 240), record=name)
    client.close_pool(pool.pool_id)
    with pytest.raises(deskgym.DeskgymError) as e:
        client.create_pool("click-target", 1, screen=(320, 240), record=name)
    assert e.value.code == "ALREADY_EXISTS"
    # Nothing was created for the refused pools.
    assert client.capabilities().limits.max_envs == 24

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    s = Server("--data-dir", str(blocker / "data"), "--idle-timeout-s", "0")
    try:
        c = deskgym.Client(s.address)
        with pytest.raises(deskgym.DeskgymError) as e:
            c.create_pool("click-target", 1, screen=(320, 240), record="r")
        assert e.value.code == "FAILED_PRECONDITION" and "data dir" in e.value.message
        c.create_pool("click-target", 1, screen=(320, 240))  # unrecorded pools still work
    finally:
        assert s.stop() == 0


def test_inspect_rejects_foreign_and_corrupt_bundles(tmp_path: pathlib.Path, address: str) -> None:
    def inspect(p: pathlib.Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "deskgym.datasets", "inspect", str(p)], capture_output=True, text=True)

    r = inspect(tmp_path)
    assert r.returncode == 2 and "not a .skn bundle" in r.stderr
    (tmp_path / "manifest.json").write_text('{"format": "something-else"}')
    r = inspect(tmp_path)
    assert r.returncode == 2 and "something-else" in r.stderr

    env = deskgym.make("click-target", address=address, screen=(320, 240), record=run_name())
    env.reset(seed=1)
    env.close()
    bundle = pathlib.Path(env.recording_path)
    part = next((bundle / "steps").glob("*.parquet"), None) or next((bundle / "events").glob("*.parquet"))
    part.write_bytes(b"PAR1 this is not parquet")
    r = inspect(bundle)
    assert r.returncode == 2 and "cannot be read" in r.stderr, r.stderr


def test_export_hf_and_lerobot(address: str, tmp_path: pathlib.Path) -> None:
    import datasets as hf

    env = deskgym.make_vec("click-target", 2, address=address, screen=(320, 240), max_steps=3,
                           record=run_name(), seed=5)
    env.reset(seed=5)
    for _ in range(6):
        env.step([{"verb": "click", "x": 3, "y": 230}] * 2)
    env.close()
    bundle = env.recording_path
    r = subprocess.run([sys.executable, "-m", "deskgym.datasets", "export", bundle, "--format", "hf",
                        "--out", str(tmp_path / "hf")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = hf.load_dataset("parquet", data_files=str(tmp_path / "hf" / "data" / "*.parquet"), split="train")
    steps = ds.open(bundle)["steps"].num_rows
    assert len(d) == steps
    img = d[0]["image"]
    assert img.size == (320, 240), "the image column decodes to a PIL image"
    # Provenance travels, and episodes come in the order they started (not "…/10" < "…/2").
    assert {"frame_hash", "env_id", "seed"} <= set(d.column_names)
    episodes = ds.open(bundle)["episodes"].to_pylist()
    start = {e["episode_id"]: e["start_time"] for e in episodes}
    seen = [start[e] for e in d["episode_id"]]
    assert seen == sorted(seen)
    assert all(len(h) == 32 for h in d["frame_hash"])

    out = ds.export(bundle, tmp_path / "lerobot", "lerobot")
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["total_frames"] == steps
    assert (out / "meta" / "stats.json").exists()
    data = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet")
    assert data.num_rows == steps
    eps = pq.read_table(out / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    assert sum(eps.column("length").to_pylist()) == steps
    # Episode videos travel too, addressed through info.json's video_path template.
    assert info["features"]["observation.video"]["dtype"] == "video"
    for row in eps.to_pylist():
        rel = info["video_path"].format(video_key="observation.video",
                                        chunk_index=row["videos/observation.video/chunk_index"],
                                        file_index=row["videos/observation.video/file_index"])
        assert (out / rel).read_bytes()[4:8] == b"ftyp"
        assert row["videos/observation.video/to_timestamp"] > row["videos/observation.video/from_timestamp"]


def test_a_recording_is_fetched_over_the_wire_as_it_is_on_disk(address: str, data_dir, tmp_path) -> None:
    """A client on another machine gets its run with ``deskgym.datasets.open(run,
    address=...)``: the same tables as reading the server's bundle in place; a second
    fetch resumes (nothing re-read), and the run can then be deleted."""
    import deskgym.datasets

    run = f"wire-{uuid.uuid4().hex[:8]}"
    vec = deskgym.make_vec("click-target", 2, address=address, screen=(160, 120), record=run, max_steps=3)
    vec.reset(seed=0)
    for _ in range(6):
        vec.step([{"verb": "click", "x": 5, "y": 5}] * 2)
    server_path = vec.recording_path
    vec.close()
    here = deskgym.datasets.open(server_path)
    fetched = deskgym.datasets.open(run, address=address, cache_dir=tmp_path)
    for t in ("episodes", "steps", "frames", "events"):
        assert (here[t] is None) == (fetched[t] is None), t
        if here[t] is not None:
            assert here[t].equals(fetched[t]), t
    client = deskgym.Client(address)
    try:
        # Resumed: a truncated local file is completed, the rest kept.
        local = tmp_path / f"{run}.skn" / "manifest.json"
        whole = local.read_bytes()
        local.write_bytes(whole[:5])
        client.download_recording(run, tmp_path)
        assert local.read_bytes() == whole
        client.delete_recording(run)
        assert run not in {r.run for r in client.list_recordings()}
    finally:
        client.close()
