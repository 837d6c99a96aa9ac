"""The artifact channel through the Python client against the real server: directory
trees in and out of a sandboxed desktop (modes kept, symlinks never followed), the
artifact store (content-addressed, deduplicated, resumable after a cut), and the
recording's `artifact` event, which holds the hash and never the bytes."""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import stat
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import deskgym
import deskgym.datasets as ds
from deskgym import artifacts
from deskgym.v1 import deskgym_pb2 as pb

from conftest import Server


def _tree(root: pathlib.Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry below ``root``: its mode and, for a file, its bytes."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for here, dirs, files in os.walk(root):
        for name in dirs + files:
            p = pathlib.Path(here, name)
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                continue
            out[str(p.relative_to(root))] = (stat.S_IMODE(st.st_mode), p.read_bytes() if p.is_file() else None)
    return out


@pytest.mark.real
@pytest.mark.spec("aci:6.artifacts-tree")
def test_a_tree_goes_in_and_comes_back_with_its_modes(exec_server: Server, tmp_path: pathlib.Path) -> None:
    src = tmp_path / "fixture"
    (src / "bin").mkdir(parents=True)
    (src / "data" / "deep").mkdir(parents=True)
    (src / "bin" / "run.sh").write_bytes(b"#!/bin/sh\necho ran\n")
    (src / "bin" / "run.sh").chmod(0o755)
    (src / "data" / "deep" / "blob.bin").write_bytes(os.urandom(3 << 20))
    (src / "data" / "secret").write_bytes(b"s")
    (src / "data" / "secret").chmod(0o600)
    (src / "link-out").symlink_to("/etc/passwd")
    s = deskgym.connect(address=exec_server.address, screen=(320, 240))
    try:
        sent = s.put_dir(src, "workspace/task")
        assert (sent["path"], sent["files"], sent["dirs"]) == ("/home/user/workspace/task", 3, 3)
        assert sent["skipped"] == ["link-out"] and sent["bytes"] == (3 << 20) + 20
        assert s.exec("workspace/task/bin/run.sh").stdout == "ran\n"
        assert s.exec("stat -c %a workspace/task/data/secret", shell=True).stdout == "600\n"
        s.exec("ln -s /etc/shadow workspace/task/data/escape", shell=True)
        back = s.get_dir("workspace/task", tmp_path / "back")
        assert back["skipped"] == ["data/escape"] and back["files"] == 3
        assert _tree(tmp_path / "back") == _tree(src)
        with pytest.raises(deskgym.DeskgymError) as e:
            s.get_dir("/etc", tmp_path / "etc")
        assert e.value.code == "INVALID_ARGUMENT"
    finally:
        s.close()


@pytest.mark.real
@pytest.mark.spec("aci:6.artifacts-store", "aci:6.artifacts-skn")
def test_artifacts_are_content_addressed_and_referenced_by_the_recording(
        exec_server: Server, tmp_path: pathlib.Path) -> None:
    client = deskgym.Client(exec_server.address)
    pool = client.create_pool("blank", 1, profile="desktop", capabilities=["files"], screen=(320, 240),
                              record=f"art-{os.getpid()}")
    try:
        env = deskgym.Desktop(client, pool.env_ids[0])
        trace = tmp_path / "trace.log"
        trace.write_bytes(os.urandom(2_500_000))
        ref = env.artifacts.upload(trace)
        assert ref == {"sha256": hashlib.sha256(trace.read_bytes()).hexdigest(), "size": 2_500_000}
        # The same bytes again: the same address, stored once.
        assert client.artifacts.upload(trace.read_bytes()) == ref
        got = client.artifacts.download(ref["sha256"], tmp_path / "copy")
        assert got == ref and (tmp_path / "copy").read_bytes() == trace.read_bytes()
        with pytest.raises(deskgym.DeskgymError) as e:
            client.artifacts.download("0" * 64, tmp_path / "none")
        assert e.value.code == "NOT_FOUND"
        with pytest.raises(deskgym.DeskgymError) as e:
            client.artifacts.download("not-a-sha", tmp_path / "none")
        assert (e.value.code, e.value.field) == ("INVALID_ARGUMENT", "sha256")
    finally:
        client.close_pool(pool.pool_id)
    path = pathlib.Path(exec_server_data(exec_server)) / f"art-{os.getpid()}.skn"
    events = ds.open(path)["events"].to_pylist()
    found = [e for e in events if e["kind"] == "artifact"]
    assert len(found) == 1, [e["kind"] for e in events]
    payload = found[0]["payload"]
    payload = json.loads(payload) if isinstance(payload, str) else payload
    assert payload == {"sha256": ref["sha256"], "size": 2_500_000, "name": "trace.log"}
    # Hashes and sizes, never the bytes.
    assert path.stat().st_size < 2_500_000 or sum(f.stat().st_size for f in path.rglob("*.parquet")) < 100_000
    client.close()


def exec_server_data(server: Server) -> str:
    """The data dir the ``exec_server`` fixture passed to its server."""
    args = server.proc.args
    assert isinstance(args, list)
    return str(args[args.index("--data-dir") + 1])


@pytest.mark.real
@pytest.mark.spec("aci:6.artifacts-resume")
def test_a_cut_upload_resumes_from_its_last_acknowledged_chunk(
        exec_server: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = deskgym.Client(exec_server.address)
    body = os.urandom(5 << 20)
    sent: list[tuple[int, int]] = []
    real = artifacts.Artifacts._chunks

    def cut_once(self: artifacts.Artifacts, *args: object) -> Iterator[pb.ArtifactChunk]:
        for i, m in enumerate(real(self, *args)):  # type: ignore[arg-type]
            sent.append((m.offset, len(m.data)))
            if len(sent) == 3:
                # Cut once the server has acknowledged a chunk, so a resume from 0 is a bug
                # and not the network's timing (the chunks may still be on the way).
                deadline = time.monotonic() + 60
                while client.artifacts.status("resume-test-1") == 0 and time.monotonic() < deadline:
                    time.sleep(0.05)
                raise ConnectionResetError("the link went down")
            yield m

    monkeypatch.setattr(artifacts.Artifacts, "_chunks", cut_once)
    ref = client.artifacts.upload(body, upload_id="resume-test-1")
    assert ref["sha256"] == hashlib.sha256(body).hexdigest()
    # The second call started where the server's acknowledged bytes ended, not at 0.
    restarts = [off for off, _ in sent[3:4]]
    assert restarts and 0 < restarts[0] <= 2 << 20, sent
    assert client.artifacts.status("resume-test-1") == 0  # finished: nothing held
    client.close()


@pytest.mark.real
def test_an_upload_whose_call_is_still_open_answers_its_acknowledged_bytes_and_is_not_taken_twice(
        exec_server: Server) -> None:
    """While one call writes an upload, a status answers the chunks that call has
    acknowledged, and a second call for the same id is ABORTED at once (a resume would
    wait it out; a first attempt is another writer)."""
    import threading

    client = deskgym.Client(exec_server.address)
    store = client.artifacts
    piece = os.urandom(1 << 20)
    release = threading.Event()

    def one_chunk_then_hold() -> Iterator[pb.ArtifactChunk]:
        yield pb.ArtifactChunk(upload_id="held-open-1", offset=0, data=piece, crc32=artifacts._crc(piece))
        release.wait(60)
        raise ConnectionResetError("the writer went away")

    errors: list[BaseException] = []

    def write() -> None:
        try:
            store._stub().UploadArtifact(one_chunk_then_hold(), **store._kw())
        except Exception as e:  # the cut: the call ends in an error, which is the point
            errors.append(e)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        deadline = time.monotonic() + 60
        while store.status("held-open-1") == 0:
            assert time.monotonic() < deadline, "the server never acknowledged the chunk"
            time.sleep(0.05)
        assert store.status("held-open-1") == len(piece)
        with pytest.raises(deskgym.DeskgymError) as e:
            store.upload(b"other bytes", upload_id="held-open-1")
        assert e.value.code == "ABORTED" and "held-open-1" in e.value.message, e.value
    finally:
        release.set()
        writer.join(60)
    assert errors, "the held call ended without an error"
    # Once the cut call is let go, the id resumes where its chunk ended.
    deadline = time.monotonic() + 30
    while True:
        try:
            ref = store.upload(piece + b"tail", upload_id="held-open-1")
            break
        except deskgym.DeskgymError as err:
            assert err.code == "ABORTED" and time.monotonic() < deadline, err
            time.sleep(0.1)
    assert ref["sha256"] == hashlib.sha256(piece + b"tail").hexdigest()
    client.close()


@pytest.mark.real
@pytest.mark.spec("aci:6.artifacts-metrics")
def test_the_bench_measures_every_arm_against_its_baseline(exec_server: Server) -> None:
    bench = pathlib.Path(__file__).resolve().parents[2] / "benches" / "artifacts.py"
    r = subprocess.run([sys.executable, str(bench), "--address", exec_server.address, "--sizes", "1KB",
                        "--reps", "3"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    arms = [line.split("n=")[0].split(None, 1)[1].strip() for line in r.stdout.splitlines() if "MB/s" in line]
    assert arms == ["upload", "put_file (baseline)", "download", "get_file (baseline)", "put_dir",
                    "tar + put_file + exec tar -x (baseline)", "get_dir",
                    "exec tar -c + get_file + untar (baseline)"], r.stdout


def test_a_tree_round_trips_through_its_own_messages(tmp_path: pathlib.Path) -> None:
    """The client's two halves against each other, no server: what ``put_dir`` sends is
    what ``get_dir`` writes, modes included (a read-only directory still filled), with
    symlinks left out and every chunk checked."""
    src = tmp_path / "src"
    (src / "ro" / "deep").mkdir(parents=True)
    (src / "ro" / "deep" / "f").write_bytes(os.urandom(2_500_000))
    (src / "x.sh").write_bytes(b"#!/bin/sh\n")
    (src / "x.sh").chmod(0o751)
    (src / "ln").symlink_to("/etc/passwd")
    (src / "ro").chmod(0o555)
    skipped: list[str] = []
    msgs = list(artifacts.tree_messages("e", src, "dest", chunk=1 << 20, skipped=skipped))
    try:
        assert skipped == ["ln"]
        assert [m.kind for m in msgs].count(pb.TREE_ENTRY_KIND_DATA) == 2
        stats = artifacts.write_tree(msgs, tmp_path / "out")
        assert (stats["files"], stats["dirs"], stats["bytes"]) == (2, 2, 2_500_010)
        assert _tree(tmp_path / "out") == _tree(src)
        damaged = list(msgs)
        damaged[-1] = pb.TreeEntry(kind=damaged[-1].kind, path=damaged[-1].path, data=damaged[-1].data,
                                   crc32=damaged[-1].crc32 ^ 1, size=damaged[-1].size)
        with pytest.raises(deskgym.DeskgymError) as e:
            artifacts.write_tree(damaged, tmp_path / "bad")
        assert e.value.code == "DATA_LOSS"
        for escape in ("../evil", "/abs", "a/../../b", ""):
            with pytest.raises(deskgym.DeskgymError):
                artifacts.write_tree([pb.TreeEntry(kind=pb.TREE_ENTRY_KIND_DIR, path=escape)], tmp_path / "esc")
        assert not (tmp_path / "evil").exists()
    finally:
        for p in (src / "ro", tmp_path / "out" / "ro"):
            if p.exists():
                p.chmod(0o755)
