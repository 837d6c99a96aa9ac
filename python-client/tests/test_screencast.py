"""Screencast (ACI's start/stop_screencast) against the real server: frames come as the
screen changes, decode to what the env shows, and watching never steps, records or
caches anything of the env's; the server bounds how many stream at once."""

from __future__ import annotations

import io
import pathlib
import subprocess
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import Server
from PIL import Image

import deskgym
from deskgym.errors import DeskgymError


def jpeg(frame) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.asarray(Image.open(io.BytesIO(frame.jpeg)).convert("RGB"))


@pytest.mark.spec("aci:4.screencast")
def test_frames_follow_the_screen_and_watching_leaves_the_env_alone(client: deskgym.Client) -> None:
    pool = client.create_pool("click-button", 1, screen=(1280, 720))
    try:
        env = pool.env_ids[0]
        first_obs = client.reset(env, seed=6, encoding="png").observation
        stats = client.cache_stats()
        frames = client.watch(env, fps=20, max_long_edge=320)
        first = next(frames)
        assert (first.seq, first.width, first.height, first.dropped) == (0, 320, 180, 0)
        assert jpeg(first).shape == (180, 320, 3)
        g = first.display
        assert (g.screen_width, g.screen_height, g.source_rect.width, g.delivered_width) == (1280, 720, 1280, 320)
        # The viewer's frame is the screen, scaled: close to the step's own PNG, scaled.
        full = np.asarray(Image.open(io.BytesIO(first_obs.frame)).convert("RGB"))
        scaled = full.reshape(180, 4, 320, 4, 3).mean(axis=(1, 3))
        assert np.abs(jpeg(first).astype(float) - scaled).mean() < 8
        # A still screen sends nothing; the next frame is the change a step made.
        label = client.reset(env, seed=7).info.instruction.split('"')[1]
        changed = next(frames)
        assert changed.seq == 1 and changed.frame_hash != first.frame_hash
        frames.close()
        # Watching stepped nothing, recorded nothing, cached nothing.
        r = client.step(env, deskgym.to_proto({"verb": "click", "element": {"role": "push button", "name": label}}))
        assert r.info.step_index == 1 and r.reward == 1.0
        after = client.cache_stats()
        assert after.entries <= stats.entries + 2  # the reset and the step, never the viewer's frames
    finally:
        client.release(pool)


def test_viewers_of_one_env_share_its_frames_and_a_late_one_starts_from_the_latest(client: deskgym.Client) -> None:
    pool = client.create_pool("click-target", 1, screen=(640, 480))
    try:
        env = pool.env_ids[0]
        client.reset(env, seed=2)
        a = client.watch(env, fps=20, max_long_edge=200)
        first = next(a)
        # A viewer joining a still screen gets the current frame at once.
        b = client.watch(env, fps=20, max_long_edge=200)
        joined = next(b)
        assert (joined.seq, joined.frame_hash) == (first.seq, first.frame_hash)
        client.reset(env, seed=3)
        fa, fb = next(a), next(b)
        assert (fa.seq, fa.frame_hash) == (fb.seq, fb.frame_hash) and fa.frame_hash != first.frame_hash
        a.close()
        b.close()
    finally:
        client.release(pool)


def test_bad_requests_and_the_unknown_env_are_clear_errors(client: deskgym.Client) -> None:
    pool = client.create_pool("click-target", 1, screen=(320, 240))
    try:
        env = pool.env_ids[0]
        client.reset(env, seed=1)
        for kwargs, field in [({"fps": 50}, "fps"), ({"fps": 0.01}, "fps"), ({"jpeg_quality": 101}, "jpeg_quality")]:
            with pytest.raises(DeskgymError) as e:
                next(client.watch(env, **kwargs))
            assert (e.value.code, e.value.field) == ("INVALID_ARGUMENT", field), kwargs
        with pytest.raises(DeskgymError) as e:
            next(client.watch("e-nope"))
        assert e.value.code == "NOT_FOUND"
    finally:
        client.release(pool)


@pytest.fixture(scope="module")
def one_viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server("--idle-timeout-s", "0", "--max-screencasts", "1",
               "--data-dir", str(tmp_path_factory.mktemp("screencast-data")))
    yield s
    s.stop()


def test_screencasts_beyond_the_servers_bound_are_refused_until_one_closes(one_viewer: Server) -> None:
    c = deskgym.Client(one_viewer.address)
    pool = c.create_pool("click-target", 1, screen=(320, 240))
    try:
        env = pool.env_ids[0]
        c.reset(env, seed=1)
        assert c.capabilities().limits.max_screencasts == 1
        watching = c.watch(env)
        next(watching)
        with pytest.raises(DeskgymError) as e:
            next(c.watch(env))
        assert e.value.code == "RESOURCE_EXHAUSTED" and "--max-screencasts" in e.value.message
        watching.close()
        for _ in range(50):  # the slot frees once the server sees the stream end
            try:
                next(c.watch(env))
                break
            except DeskgymError as err:
                assert err.code == "RESOURCE_EXHAUSTED"
                import time

                time.sleep(0.1)
        else:
            pytest.fail("the closed screencast's slot never came back")
    finally:
        c.release(pool)
        c.close()


def decode_h264(units: list[bytes], width: int, height: int, tmp: pathlib.Path) -> np.ndarray:
    """The last picture of an Annex B stream, decoded by GStreamer's OpenH264 decoder."""
    src, out = tmp / "stream.h264", tmp / "out.rgb"
    src.write_bytes(b"".join(units))
    subprocess.run(["gst-launch-1.0", "-q", "filesrc", f"location={src}", "!", "h264parse", "!", "openh264dec",
                    "!", "videoconvert", "!", "video/x-raw,format=RGB", "!", "filesink", f"location={out}"],
                   check=True, timeout=60)
    raw = np.frombuffer(out.read_bytes(), dtype=np.uint8)
    return raw[-width * height * 3:].reshape(height, width, 3)


def test_h264_frames_start_at_a_keyframe_and_decode_to_the_screen(client: deskgym.Client, tmp_path: pathlib.Path) -> None:
    pool = client.create_pool("click-target", 1, screen=(320, 240))
    try:
        env = pool.env_ids[0]
        client.reset(env, seed=1)
        frames = client.watch(env, fps=20, codec="h264")
        first = next(frames)
        assert first.keyframe and first.codec.startswith("avc1.") and first.h264 and not first.jpeg
        assert (first.width, first.height) == (320, 240)
        r = client.reset(env, seed=2, encoding="png")
        changed = next(frames)
        assert not changed.keyframe and changed.frame_hash == r.observation.frame_hash
        # What a viewer decodes is what the env shows (lossy, close).
        shown = decode_h264([first.h264, changed.h264], 320, 240, tmp_path)
        png = np.asarray(Image.open(io.BytesIO(r.observation.frame)).convert("RGB"))
        assert np.abs(shown.astype(float) - png).mean() < 6
        # A viewer joining the running stream starts at a keyframe of the screen now.
        late = client.watch(env, fps=20, codec="h264")
        joined = next(late)
        assert joined.keyframe and joined.frame_hash == r.observation.frame_hash
        late.close()
        frames.close()
        with pytest.raises(DeskgymError) as e:
            next(client.watch(env, codec="vp9"))
        assert e.value.code == "INVALID_ARGUMENT"
        # The server itself refuses a codec outside the enum, naming the field.
        import grpc

        from deskgym.v1 import deskgym_pb2 as pb
        with pytest.raises(grpc.RpcError) as raw:
            next(iter(client._stub.Screencast(pb.ScreencastRequest(env_id=env, codec=99))))
        assert raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "codec" in raw.value.details()
    finally:
        client.release(pool)
