"""Starts the real deskgym-server on a free port (per session) for the tests."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

import deskgym

REPO = pathlib.Path(__file__).resolve().parents[2]
#: What the tests' servers run: "real" desktops, or "fake" ones (no X) for the fast tier.
BACKEND = os.environ.get("DESKGYM_TEST_BACKEND", "real")
#: The fast tier: the modules whose tests are about client and pool logic (vector envs,
#: EnvPool, fleets, SB3, MCP, the env, lifetimes, the client) and pass on fake desktops,
#: or need no server at all (the dialect), less those marked `real`.
FAST_TIER = {"test_vector", "test_envpool", "test_fleet", "test_sb3", "test_mcp", "test_env", "test_lifetime",
             "test_client", "test_conformance", "test_agents", "test_options", "test_tasks", "test_osworld_standins",
             "test_aio", "test_dialect", "test_session", "test_episode", "test_group",
             "test_artifacts", "test_drive", "test_aio_session"}


#: tests/faces/ needs OpenEnv, verifiers and SkyRL-gym, which live in .venv-faces;
#: test_faces.py runs them there.
collect_ignore = [] if importlib.util.find_spec("verifiers") else ["faces"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # gRPC's asyncio stack keeps threads of its own for the rest of the process, and a fork
    # while one of them holds a lock leaves the child hung in its first channel (seen here:
    # an AsyncVectorEnv worker forked after test_aio never answered). The asyncio tests
    # therefore run last, after every test whose workers fork; the order is otherwise kept.
    items.sort(key=lambda item: item.module is not None and item.module.__name__ in ("test_aio", "test_aio_session"))
    if BACKEND != "fake":
        return
    skip = pytest.mark.skip(reason="real desktops only (DESKGYM_TEST_BACKEND=fake runs the fast tier)")
    for item in items:
        if item.module is None or item.module.__name__ not in FAST_TIER or item.get_closest_marker("real"):
            item.add_marker(skip)


def server_binary() -> str:
    env = os.environ.get("DESKGYM_SERVER")
    if env:
        return env
    # The most recently built one, so a stale release build never shadows a fresh debug one.
    built = [p for p in (REPO / "target" / prof / "deskgym-server" for prof in ("release", "debug")) if p.exists()]
    if built:
        return str(max(built, key=lambda p: p.stat().st_mtime))
    pytest.fail("deskgym-server not built: run `cargo build --bins` (or set DESKGYM_SERVER)")


class Server:
    """A deskgym-server child process listening on 127.0.0.1:<free port>."""

    def __init__(self, *args: str, listen: str = "127.0.0.1:0") -> None:
        # The fast tier (`DESKGYM_TEST_BACKEND=fake pytest -m logic`): in-memory desktops.
        backend = ["--backend", BACKEND] if BACKEND != "real" else []
        self.proc = subprocess.Popen(
            [server_binary(), "--listen", listen, *backend, *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.kill()
            pytest.fail(f"server did not start: {line!r}")
        self.address = line.strip().rsplit(" ", 1)[-1]

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def exec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of its own per module that allows the `exec` and `files` grants (sandboxed
    desktops with commands and files; off by default)."""
    data = tmp_path_factory.mktemp("exec-data")
    s = Server("--idle-timeout-s", "0", "--data-dir", str(data), "--allow-capabilities", "exec,files")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def unlock_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of its own per module whose pools get no capability, and whose sessions
    may unlock `files` only (test_unlock.py, test_aio_session.py)."""
    data = tmp_path_factory.mktemp("unlock-data")
    s = Server("--idle-timeout-s", "0", "--data-dir", str(data), "--allow-unlock", "files")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server with MiniWoB++'s pages as tasks, and `exec` (to kill a browser)."""
    from deskgym.registration import miniwob_dir

    data = tmp_path_factory.mktemp("miniwob-data")
    s = Server("--idle-timeout-s", "0", "--data-dir", str(data), "--miniwob-dir", str(miniwob_dir()),
               "--allow-capabilities", "exec")
    yield s
    s.stop()


def fork_exactly(c: deskgym.Client, e: str, n: int = 2, still: bool = True, clock: bool = False) -> Any:
    """Saves ``e`` and forks it into ``n``; checks that every replica shows the
    checkpoint's frame and says it never left the original's path (issue 44), and with
    ``still`` that the original itself still shows it (not on a page whose caret
    blinks: it moves on by itself). With ``clock`` (what the screen shows depends on
    the app's clock: a caret blinking on a timer) a diverged replica whose replay ran
    later than the original skips the test rather than fail it; without, the screen
    depends on the input alone, and a slow replay must still end where the original
    did. The ``ForkResponse``."""
    from deskgym.v1 import deskgym_pb2 as pb

    cp = c.save(e)
    fork = c.fork(cp, n, encoding="png")
    if still:
        assert c.observe(e, encoding="png").frame_hash == cp.frame_hash, "the original itself moved on after Save"
    late = [r.path.clock_late_steps for r in fork.replicas if r.fidelity != pb.FIDELITY_EXACT]
    if clock and any(late):
        # The clock replays the original's times only where the replay keeps up with
        # the original; the server says where it did not, and then this proves nothing.
        pytest.skip(f"a replica's replay ran later than the original (clock_late_steps {late}): "
                    "this host was too loaded for the clock to replay the original's times")
    for r in fork.replicas:
        assert r.fidelity == pb.FIDELITY_EXACT, (r.path, fork.expected_hash, r.observation.frame_hash)
        assert r.observation.frame_hash == cp.frame_hash
        assert r.path.left_at_step == 0 and r.path.checked_steps > 0, r.path
    return fork


def parked(client: deskgym.Client, cp: deskgym.Checkpoint, wait_s: float = 60) -> deskgym.Checkpoint:
    """The checkpoint as listed once its replicas are parked (the server builds them in
    the background after Save returns)."""
    deadline = time.monotonic() + wait_s
    while True:
        now = next(c for c in client.list_checkpoints(cp.pool_id) if c.checkpoint_id == cp.checkpoint_id)
        if now.parking == 0:
            return now
        assert time.monotonic() < deadline, now
        time.sleep(0.05)


def miniwob_env(task: str, **kwargs: Any) -> Any:
    """MiniWoB++'s own environment (headless Chromium through Selenium)."""
    import gymnasium as gym
    import miniwob

    os.environ.setdefault("MINIWOB_CHROME_BINARY", shutil.which("chromium") or "chromium")
    os.environ.setdefault("MINIWOB_CHROMEDRIVER", shutil.which("chromedriver") or "chromedriver")
    gym.register_envs(miniwob)
    return gym.make(f"miniwob/{task}-v1", **kwargs)


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("deskgym-data")


@pytest.fixture(scope="session")
def server(data_dir: pathlib.Path) -> Iterator[Server]:
    s = Server("--max-envs", "24", "--max-batch", "16", "--idle-timeout-s", "0", "--data-dir", str(data_dir))
    yield s
    assert s.stop() == 0


@pytest.fixture(scope="session")
def address(server: Server) -> str:
    return server.address


@pytest.fixture()
def client(address: str) -> Iterator[deskgym.Client]:
    c = deskgym.Client(address)
    yield c
    c.close()


RED = (0xD6, 0x28, 0x28)


def find(frame, rgb: tuple[int, int, int]) -> tuple[int, int] | None:
    """Centroid of the pixels of exactly ``rgb`` in an (H, W, 3) frame."""
    import numpy as np

    ys, xs = np.nonzero(np.all(frame == np.array(rgb, dtype=np.uint8), axis=-1))
    if len(xs) == 0:
        return None
    return int(xs.mean()), int(ys.mean())


def mp4_frames(path: pathlib.Path, out: pathlib.Path) -> list:
    """Every frame of an H.264 MP4, decoded by GStreamer on the host (openh264dec, from
    the -bad plugins setup.sh installs), as RGB arrays: videos checked as a person sees
    them, not by their boxes."""
    import numpy as np
    from PIL import Image

    out.mkdir()
    subprocess.run(
        ["gst-launch-1.0", "-q", "filesrc", f"location={path}", "!", "qtdemux", "!", "h264parse", "!",
         "openh264dec", "!", "videoconvert", "!", "video/x-raw,format=RGB", "!", "pngenc", "!",
         "multifilesink", f"location={out}/f%05d.png"],
        check=True, timeout=120,
    )
    return [np.asarray(Image.open(p).convert("RGB")) for p in sorted(out.glob("f*.png"))]
