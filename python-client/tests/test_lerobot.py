"""The LeRobot export, loaded and iterated by LeRobot's own ``LeRobotDataset`` (offline)
in its own venv (Python >= 3.12, ``scripts/setup-lerobot.sh``), every item compared
with the PNG the recording stored for it."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import subprocess

import pyarrow.parquet as pq
import pytest

import deskgym
import deskgym.datasets as ds

from conftest import REPO, Server

CHECK = pathlib.Path(__file__).parent / "lerobot" / "check_lerobot.py"


def lerobot_python() -> str:
    py = os.environ.get("DESKGYM_LEROBOT_PYTHON") or str(REPO / ".venv-lerobot" / "bin" / "python")
    if not pathlib.Path(py).exists():
        pytest.fail(f"no LeRobot venv at {py}: run scripts/setup-lerobot.sh (or set DESKGYM_LEROBOT_PYTHON)")
    return py


def test_lerobot_loads_and_iterates_the_export(tmp_path: pathlib.Path) -> None:
    s = Server("--data-dir", str(tmp_path / "data"))
    try:
        env = deskgym.make_vec("click-target", 3, address=s.address, screen=(320, 240), max_steps=4,
                               record="lerobot-check", seed=1)
        env.reset(seed=1)
        # 10 steps of next-step autoreset: per env two 4-step episodes, then a reset
        # at step 10 whose episode is cut by close() with zero steps.
        for i in range(10):
            env.step([{"verb": "click", "x": 5 + i, "y": 230}] * 3)
        env.close()
    finally:
        assert s.stop() == 0
    bundle = pathlib.Path(env.recording_path)
    episodes = ds.open(bundle)["episodes"]
    assert 0 in episodes.column("length").to_pylist(), "the run has a zero-step episode to leave out"
    out = ds.export(bundle, tmp_path / "lerobot", "lerobot")
    data = pq.read_table(out / "data" / "chunk-000" / "file-000.parquet")
    frames = {str(i): base64.b64encode(img["bytes"]).decode()
              for i, img in zip(data.column("index").to_pylist(), data.column("observation.image").to_pylist())}
    (tmp_path / "frames.json").write_text(json.dumps(frames))
    r = subprocess.run([lerobot_python(), str(CHECK), str(out), str(tmp_path / "frames.json")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["items"] == data.num_rows == 24 and got["episodes"] == 6
    assert got["has_video"] and got["has_stats"] and got["fps"] == 10
    assert got["worst_image_mae"] == 0.0, "inline images are the recorded PNGs"
    # H.264 at 4:2:0 against the lossless frame: a few levels of 255, not a wrong frame.
    assert got["worst_video_mae"] < 6.0, got
