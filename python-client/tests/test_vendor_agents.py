"""The vendor computer-use adapters (deskgym.agents.anthropic, deskgym.agents.openai) on
the bundled tasks against the real server: action JSON written to each vendor's
documented schema (no model is reachable here), replayed as a model would send it, at
three screenshot scales; a model clicking what it sees in a downscaled frame hits it."""

from __future__ import annotations

import base64
import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

import deskgym
from deskgym.agents.reference import FIELD, GREEN, ORANGE, RED, centroid, mask
from deskgym.agents import anthropic as claude
from deskgym.agents import openai as oai
from deskgym.errors import DeskgymError

SCREEN = (1920, 1080)
#: Boxes the model's screenshots fit in, and the frame each gives for a 1920x1080 screen.
SCALES = [((1280, 800), (1280, 720)), ((1024, 768), (1024, 576)), ((640, 400), (640, 360))]


def png_rgb(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def seen(frame: np.ndarray, rgb: tuple[int, int, int]) -> tuple[int, int]:
    """Where the model sees a colour: the centre of its pixels in the frame it got."""
    at = centroid(mask(frame, rgb))
    assert at is not None, f"no {rgb} in the model's frame"
    return at


def claude_frame(result: dict[str, Any]) -> np.ndarray:
    (block,) = result["content"]
    assert block["type"] == "image" and block["source"]["media_type"] == "image/png"
    return png_rgb(base64.b64decode(block["source"]["data"]))


def openai_frame(item: dict[str, Any]) -> np.ndarray:
    url = item["output"]["image_url"]
    assert item["type"] == "computer_call_output" and url.startswith("data:image/png;base64,")
    return png_rgb(base64.b64decode(url.split(",", 1)[1]))


@pytest.fixture()
def make(address: str) -> Any:
    envs = []

    def make(task: str, seed: int = 3) -> Any:
        env = deskgym.make(task, address=address, screen=SCREEN)
        _, env.test_info = env.reset(seed=seed)
        envs.append(env)
        return env

    yield make
    for e in envs:
        e.close()


@pytest.mark.spec("aci:6.adapters", "aci:3.mapping")
@pytest.mark.parametrize("box,frame", SCALES)
def test_claude_clicks_what_it_sees_at_each_scale(make: Any, box: tuple[int, int], frame: tuple[int, int]) -> None:
    env = make("click-target")
    tool = claude.ComputerTool(env, size=box)
    assert tool.definition() == {"type": "computer_20250124", "name": "computer",
                                 "display_width_px": frame[0], "display_height_px": frame[1]}
    shot = tool.run({"action": "screenshot"}, "toolu_01")
    assert shot["tool_use_id"] == "toolu_01" and "is_error" not in shot
    img = claude_frame(shot)
    assert img.shape[:2] == (frame[1], frame[0])
    x, y = seen(img, RED)
    tool.run({"action": "left_click", "coordinate": [x, y]}, "toolu_02")
    _, reward, terminated, _, _ = tool.screen.last
    assert reward == 1.0 and terminated, (x, y, box)


@pytest.mark.spec("aci:6.adapters", "aci:3.mapping")
@pytest.mark.parametrize("box,frame", SCALES)
def test_openai_clicks_what_it_sees_at_each_scale(make: Any, box: tuple[int, int], frame: tuple[int, int]) -> None:
    env = make("click-target")
    tool = oai.ComputerTool(env, size=box)
    assert tool.definition() == {"type": "computer_use_preview", "display_width": frame[0],
                                 "display_height": frame[1], "environment": "linux"}
    out = tool.run({"type": "computer_call", "id": "cu_1", "call_id": "call_1", "action": {"type": "screenshot"},
                    "pending_safety_checks": [], "status": "completed"})
    assert out["call_id"] == "call_1" and "acknowledged_safety_checks" not in out
    x, y = seen(openai_frame(out), RED)
    tool.run({"type": "computer_call", "call_id": "call_2",
              "action": {"type": "click", "button": "left", "x": x, "y": y}})
    _, reward, terminated, _, _ = tool.screen.last
    assert reward == 1.0 and terminated, (x, y, box)


def test_claude_drags_and_types(make: Any) -> None:
    env = make("drag-to-zone")
    tool = claude.ComputerTool(env, size=(1024, 768))
    img = claude_frame(tool.run({"action": "screenshot"}, "t1"))
    start, end = seen(img, ORANGE), seen(img, GREEN)
    tool.run({"action": "left_click_drag", "start_coordinate": list(start), "coordinate": list(end)}, "t2")
    assert tool.screen.last[1] == 1.0

    env = make("type-word")
    tool = claude.ComputerTool(env, size=(1024, 768))
    img = claude_frame(tool.run({"action": "screenshot"}, "t1"))
    word = str(env.test_info["instruction"]).split('"')[1]
    tool.run({"action": "left_click", "coordinate": list(seen(img, FIELD))}, "t2")
    tool.run({"action": "type", "text": word}, "t3")
    tool.run({"action": "key", "text": "Return"}, "t4")
    assert tool.screen.last[1] == 1.0


def test_openai_drags_types_and_presses_keys(make: Any) -> None:
    env = make("drag-to-zone")
    tool = oai.ComputerTool(env, size=(640, 400))
    img = openai_frame(tool.run({"type": "computer_call", "call_id": "c1", "action": {"type": "screenshot"}}))
    (x0, y0), (x1, y1) = seen(img, ORANGE), seen(img, GREEN)
    tool.run({"type": "computer_call", "call_id": "c2",
              "action": {"type": "drag", "path": [{"x": x0, "y": y0}, {"x": x1, "y": y1}]}})
    assert tool.screen.last[1] == 1.0

    env = make("type-word")
    tool = oai.ComputerTool(env, size=(640, 400))
    img = openai_frame(tool.run({"type": "computer_call", "call_id": "c1", "action": {"type": "screenshot"}}))
    x, y = seen(img, FIELD)
    word = str(env.test_info["instruction"]).split('"')[1]
    for i, action in enumerate([{"type": "click", "button": "left", "x": x, "y": y}, {"type": "type", "text": word},
                                {"type": "keypress", "keys": ["ENTER"]}]):
        tool.run({"type": "computer_call", "call_id": f"c{i + 2}", "action": action})
    assert tool.screen.last[1] == 1.0


def test_bad_inputs_are_answered_not_run(make: Any) -> None:
    env = make("click-target")
    tool = claude.ComputerTool(env, size=(640, 400))
    for bad, field in [({"action": "left_click", "coordinate": [640, 10]}, "coordinate"),
                       ({"action": "left_click", "coordinate": [1, 2, 3]}, "coordinate"),
                       ({"action": "scroll", "coordinate": [5, 5], "scroll_direction": "sideways",
                         "scroll_amount": 3}, "scroll_direction"),
                       ({"action": "teleport"}, "action"),
                       ({"action": "type", "text": ""}, "text"),
                       ({"action": "wait", "duration": -1}, "duration")]:
        r = tool.run(bad, "toolu_bad")
        assert r["is_error"] is True and r["tool_use_id"] == "toolu_bad", bad
        (text,) = r["content"]
        assert text["type"] == "text" and field in text["text"], (bad, text)
    assert tool.screen.last is None, "nothing ran"
    o = oai.ComputerTool(env, size=(640, 400))
    for action in [{"type": "click", "button": "back", "x": 1, "y": 1}, {"type": "click", "x": 999, "y": 1},
                   {"type": "drag", "path": [{"x": 1, "y": 1}]}, {"type": "keypress", "keys": []},
                   {"type": "fly"}]:
        with pytest.raises(DeskgymError) as e:
            o.run({"type": "computer_call", "call_id": "c", "action": action})
        assert e.value.code == "INVALID_ARGUMENT", action
    assert o.screen.last is None


def test_openai_keys_map_to_x_keysyms_and_safety_checks_are_the_harness_s(make: Any) -> None:
    assert [oai.keysym(k) for k in ["CTRL", "ENTER", "ARROWLEFT", "A", "F5", "ESC", "CMD", "/"]] == \
        ["ctrl", "Return", "Left", "a", "F5", "Escape", "super", "slash"]
    env = make("click-target")
    checks = [{"id": "sc_1", "code": "malicious_instructions", "message": "..."}]
    tool = oai.ComputerTool(env, acknowledge=lambda pending: [c for c in pending if c["code"] != "sensitive_domain"])
    out = tool.run({"type": "computer_call", "call_id": "c9", "action": {"type": "wait"},
                    "pending_safety_checks": checks})
    assert out["acknowledged_safety_checks"] == checks
    # Full size by default: the frame is the screen.
    assert openai_frame(out).shape[:2] == (SCREEN[1], SCREEN[0])
