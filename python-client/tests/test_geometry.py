"""ACI frame geometry and observe-after-act against the real server: every observation
says where its pixels come from, and a model that points at a pixel of a downscaled or
window-scoped frame hits what it saw once that pixel goes through the frame's geometry."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import RED, Server
from PIL import Image

import deskgym
from deskgym.agents.reference import centroid, mask
from deskgym.errors import DeskgymError
from deskgym.geometry import Display

SCREEN = (1280, 720)


def rgb(obs: Any) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(obs.frame)).convert("RGB"))


@pytest.mark.spec(
    "aci:3.display", "aci:3.mapping", "aci:3.point-global", "aci:3.observe-after-act", "aci:4.pointer-metadata",
)
@pytest.mark.parametrize("long_edge", [960, 533, 300])
def test_a_click_on_a_downscaled_step_frame_hits_what_the_model_saw(client: deskgym.Client, long_edge: int) -> None:
    # The spec's observe-after-act: one Step acts and returns the frame the model sees
    # next, scaled as asked; the click the model then makes goes through that frame.
    pool = client.create_pool("click-target", 1, screen=SCREEN)
    try:
        env = pool.env_ids[0]
        client.reset(env, seed=11)
        r = client.step(env, deskgym.to_proto({"verb": "move", "x": 5, "y": 5}), encoding="png",
                        observe={"max_long_edge": long_edge})
        obs = r.observation
        assert max(obs.width, obs.height) == long_edge and not r.observe_error
        d = Display.of(obs)
        assert (d.screen_width, d.screen_height, d.x, d.y, d.width, d.height) == (*SCREEN, 0, 0, *SCREEN)
        assert (d.delivered_width, d.delivered_height) == (obs.width, obs.height)
        # The pointer is reported in the frame's own pixels too.
        assert (obs.frame_pointer.x, obs.frame_pointer.y) == d.to_frame(5, 5)
        seen = centroid(mask(rgb(obs), RED))
        assert seen is not None, "the target is in the model's frame"
        x, y = d.to_screen(*seen)
        done = client.step(env, deskgym.to_proto({"verb": "click", "x": x, "y": y}))
        assert done.reward == 1.0 and done.terminated, (seen, (x, y), long_edge)
        # A new episode's screen is a new frame at the same shape (the server keeps the
        # last shaped frame for an unchanged screen, never for a changed one).
        client.reset(env, seed=12)
        again = client.screenshot(env, max_long_edge=long_edge, encoding="png")
        assert again.frame_hash != obs.frame_hash and centroid(mask(rgb(again), RED)) != seen
    finally:
        client.release(pool)


@pytest.mark.spec("aci:3.x11-scope", "aci:3.wm-less-active", "aci:3.mapping", "aci:4.scopes", "aci:3.observe-after-act")
def test_window_scoped_frames_map_to_the_screen_and_back(client: deskgym.Client) -> None:
    # The task app's window on a display without a window manager: ACI's fallback
    # makes the input-focus holder the active window.
    pool = client.create_pool("click-target", 1, screen=SCREEN)
    try:
        env = pool.env_ids[0]
        client.reset(env, seed=4)
        whole = client.screenshot(env, encoding="png")
        win = client.screenshot(env, scope="active_window", encoding="png")
        d = Display.of(win)
        # The frame is exactly the source rectangle of the screen.
        assert np.array_equal(rgb(win), rgb(whole)[d.y:d.y + d.height, d.x:d.x + d.width])
        small = client.screenshot(env, scope="active_window", max_long_edge=401, encoding="png")
        ds = Display.of(small)
        for px, py in [(0, 0), (400, small.height - 1), (123, 77)]:
            sx, sy = ds.to_screen(px, py)
            r = client.step(env, deskgym.to_proto({"verb": "move", "x": sx, "y": sy}), encoding="png",
                            observe={"scope": "active_window", "max_long_edge": 401})
            fp = r.observation.frame_pointer
            assert (fp.x, fp.y) == (px, py), (px, py, sx, sy)
        with pytest.raises(DeskgymError) as e:
            ds.to_screen(small.width, 0)
        assert e.value.code == "INVALID_ARGUMENT"
    finally:
        client.release(pool)


@pytest.mark.spec("aci:3.observe-capture-error")
def test_a_shape_that_cannot_be_cut_still_steps_and_says_why(client: deskgym.Client) -> None:
    pool = client.create_pool("click-target", 1, screen=(640, 480))
    try:
        env = pool.env_ids[0]
        client.reset(env, seed=1)
        r = client.step(env, deskgym.to_proto({"verb": "noop"}), observe={"window": 0xDEAD})
        assert "no window 0xdead" in r.observe_error
        assert r.info.step_index == 1  # the action ran
        d = Display.of(r.observation)
        assert d.whole and (r.observation.width, r.observation.height) == (640, 480)
        with pytest.raises(DeskgymError) as e:
            client.step(env, deskgym.to_proto({"verb": "noop"}), observe=deskgym.v1.deskgym_pb2.ObserveSpec(scope=7))
        assert e.value.code == "INVALID_ARGUMENT" and e.value.field == "observe.scope"
        with pytest.raises(DeskgymError) as e:
            client.step(env, deskgym.to_proto({"verb": "noop"}), observe={"jpeg_quality": 101})
        assert e.value.field == "observe.jpeg_quality"
    finally:
        client.release(pool)


@pytest.mark.spec(
    "aci:3.frame-required", "aci:3.observe-capability", "aci:4.not-modified", "aci:7.handshake",
    "aci:7.1.binary-frames",
)
def test_screenshots_not_modified_and_frames_without_geometry(client: deskgym.Client) -> None:
    caps = client.capabilities()
    assert caps.observe_after_act and caps.binary_frames
    pool = client.create_pool("click-target", 1, screen=(640, 480))
    try:
        env = pool.env_ids[0]
        first = client.reset(env, seed=2).observation
        shot = client.screenshot(env, max_long_edge=320, encoding="jpeg", jpeg_quality=60)
        again = client.screenshot(env, max_long_edge=320, encoding="jpeg", jpeg_quality=60,
                                  if_none_match=[shot.frame_hash])
        assert again.not_modified and not again.frame and again.frame_hash == shot.frame_hash
        assert Display.of(again) == Display.of(shot)
        # A frame fetched by hash has no one place on a screen: no guessed mapping.
        (by_hash,) = client.get_frames([first.frame_hash])
        with pytest.raises(DeskgymError) as e:
            Display.of(by_hash)
        assert e.value.code == "FAILED_PRECONDITION"
        with pytest.raises(DeskgymError) as e:
            client.screenshot(env, if_none_match=["nothex"])
        assert e.value.code == "INVALID_ARGUMENT"
    finally:
        client.release(pool)


@pytest.fixture(scope="module")
def windows_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = Server("--idle-timeout-s", "0", "--data-dir", str(tmp_path_factory.mktemp("geometry-data")),
               "--allow-capabilities", "windows,exec")
    yield s
    s.stop()


@pytest.mark.spec("aci:3.x11-scope", "aci:4.scopes", "aci:4.pointer-metadata")
def test_a_window_of_a_managed_desktop_is_cut_where_the_window_manager_put_it(windows_server: Server) -> None:
    c = deskgym.Client(windows_server.address)
    pool = c.create_pool("blank", 1, profile="desktop", screen=(1024, 768), capabilities=["windows", "exec"])
    try:
        env = pool.env_ids[0]
        c.reset(env, seed=0)
        c.step(env, deskgym.to_proto({"verb": "key", "keys": "ctrl+alt+t"}))
        deadline = time.monotonic() + 30
        while not any(w.focused and w.x > 0 for w in c.windows(env)):
            assert time.monotonic() < deadline, "no terminal window got the focus"
            time.sleep(0.3)
        (w,) = [w for w in c.windows(env) if w.focused]
        shot = c.screenshot(env, scope="active_window", max_long_edge=300, encoding="png")
        d = Display.of(shot)
        assert (d.x, d.y, d.width, d.height) == (w.x, w.y, min(w.width, 1024 - w.x), min(w.height, 768 - w.y))
        px, py = shot.width // 2, shot.height // 2
        sx, sy = d.to_screen(px, py)
        r = c.step(env, deskgym.to_proto({"verb": "move", "x": sx, "y": sy}),
                   observe={"scope": "window", "window": w.id, "max_long_edge": 300})
        assert (r.observation.frame_pointer.x, r.observation.frame_pointer.y) == (px, py)
        assert r.observation.HasField("frame_pointer")
        outside = c.step(env, deskgym.to_proto({"verb": "move", "x": 0, "y": 0}),
                         observe={"scope": "window", "window": w.id})
        if w.x > 0:
            assert not outside.observation.HasField("frame_pointer")
    finally:
        c.release(pool)
        c.close()


@pytest.mark.spec("aci:4.1.settle-ms")
def test_observe_settles_first_when_asked(client: deskgym.Client) -> None:
    pool = client.create_pool("type-word", 1, screen=(640, 480))
    try:
        env = pool.env_ids[0]
        client.reset(env, seed=3)
        at_once = client.observe(env)
        assert at_once.settle.waited_ms == 0
        settled = client.observe(env, settle_ms=60, tree=deskgym.v1.deskgym_pb2.TreeRequest(enabled=True))
        # The quiet window is waited out in full on a still screen, then the tree read.
        assert settled.settle.quiesced and settled.settle.waited_ms >= 60
        assert settled.frame_hash == at_once.frame_hash and settled.tree.text
        with pytest.raises(DeskgymError) as e:
            client.observe(env, settle_ms=1001)
        assert (e.value.code, e.value.field) == ("INVALID_ARGUMENT", "settle_ms")
    finally:
        client.release(pool)
