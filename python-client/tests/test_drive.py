"""ACI's ``drive`` (spec §2, §6): `Session.drive(agent, task)` on real desktops, through
the vendors' own SDKs (`anthropic`, `openai` from PyPI) pointed with `base_url=` at a
local HTTP server that plays a model: it reads each request as the vendor's API would
(the instruction, the screenshots the tool sent back), finds the text field in the last
screenshot, and answers in the vendor's wire format. The task is the bundled
`type-word` (click the field, type the word, Enter); the reward is the desktop's, so a
model that types the wrong word gets 0. No network: the stub listens on 127.0.0.1."""

from __future__ import annotations

import base64
import io
import itertools
import json
import pathlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
from conftest import Server
from PIL import Image

import deskgym
from deskgym.agents.reference import FIELD, centroid, mask
from deskgym.drive import DriveObservation, drive_session
from deskgym.drive.models import AnthropicAgent, ChatAgent, OpenAIAgent, agent
from deskgym.errors import DeskgymError

anthropic = pytest.importorskip("anthropic")
openai = pytest.importorskip("openai")

# -- the stub model ------------------------------------------------------------------------


def field_at(image_b64: str) -> tuple[int, int]:
    """Where the model sees the text field: the centre of its colour in the image."""
    frame = np.asarray(Image.open(io.BytesIO(base64.b64decode(image_b64))).convert("RGB"))
    at = centroid(mask(frame, FIELD))
    assert at is not None, "no text field in the model's screenshot"
    return at


def word_of(instruction: str, wrong: bool) -> str:
    word = instruction.split('"')[1]
    return word[::-1] + "x" if wrong else word


class Model(ThreadingHTTPServer):
    """The vendors' endpoints on one port. The model's name picks the script:
    ``*-wrong`` types the wrong word, ``*-broken`` answers HTTP 500, ``*-mumble`` first
    writes text with no action (chat)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.responses: dict[str, int] = {}  # OpenAI response id -> turns so far
        self.ids = itertools.count(1)
        self.instruction = ""  # what the Responses conversation was started with

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    server: Model

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        path = self.path.split("?")[0]
        self.server.requests.append((path, body))
        if str(body.get("model", "")).endswith("-broken"):
            return self.reply(500, {"type": "error", "error": {"type": "api_error", "message": "the stub is down"}})
        answer = {"/v1/messages": self.claude, "/v1/responses": self.respond,
                  "/v1/chat/completions": self.chat}[path](body)
        self.reply(200, answer)

    def reply(self, status: int, doc: dict[str, Any]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    # Anthropic's Messages API: each turn a tool_use of the computer tool.
    def claude(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs, wrong = body["messages"], body["model"].endswith("-wrong")
        (tool,) = body["tools"]
        assert tool["type"] == "computer_20250124" and tool["display_width_px"] > 0
        instruction = msgs[0]["content"]
        turn = sum(1 for m in msgs if m["role"] == "assistant")
        if turn == 0:
            act: dict[str, Any] = {"action": "screenshot"}
        else:
            (result,) = msgs[-1]["content"]
            assert result["type"] == "tool_result" and not result.get("is_error"), result
            image = result["content"][0]["source"]["data"]
            act = [{"action": "left_click", "coordinate": list(field_at(image))},
                   {"action": "type", "text": word_of(instruction, wrong)},
                   {"action": "key", "text": "Return"}][min(turn, 3) - 1]
        return {"id": f"msg_{turn}", "type": "message", "role": "assistant", "model": body["model"],
                "stop_reason": "tool_use", "stop_sequence": None,
                "usage": {"input_tokens": 10, "output_tokens": 10},
                "content": [{"type": "text", "text": f"turn {turn}"},
                            {"type": "tool_use", "id": f"toolu_{turn}", "name": "computer", "input": act}]}

    # OpenAI's Responses API: the conversation is the server's (previous_response_id).
    def respond(self, body: dict[str, Any]) -> dict[str, Any]:
        wrong, prev = body["model"].endswith("-wrong"), body.get("previous_response_id")
        (tool,) = body["tools"]
        assert tool["type"] == "computer_use_preview" and body["truncation"] == "auto"
        if prev is None:
            self.server.instruction = body["input"][0]["content"]
            turn = 0
        else:
            turn = self.server.responses[prev] + 1
        if turn == 0:
            action: dict[str, Any] = {"type": "screenshot"}
        else:
            (out,) = [i for i in body["input"] if i.get("type") == "computer_call_output"]
            assert out["call_id"] == f"call_{turn - 1}"
            image = out["output"]["image_url"].split(",", 1)[1]
            x, y = field_at(image)
            action = [{"type": "click", "button": "left", "x": x, "y": y},
                      {"type": "type", "text": word_of(self.server.instruction, wrong)},
                      {"type": "keypress", "keys": ["ENTER"]}][min(turn, 3) - 1]
        rid = f"resp_{next(self.server.ids)}"
        self.server.responses[rid] = turn
        return {"id": rid, "object": "response", "created_at": 0, "model": body["model"], "status": "completed",
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": body["tools"],
                "output": [{"type": "computer_call", "id": f"cu_{turn}", "call_id": f"call_{turn}",
                            "action": action, "pending_safety_checks": [], "status": "completed"}]}

    # A chat model writing its actions as text: all three in one reply.
    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        msgs, model = body["messages"], body["model"]
        assert msgs[0]["role"] == "system" and "<tool_call>" in msgs[0]["content"]
        turn = sum(1 for m in msgs if m["role"] == "assistant")
        text_part, image_part = msgs[-1]["content"]
        if model.endswith("-mumble") and turn == 0:
            text = "I see a text field. I will type into it."
        else:
            if model.endswith("-mumble"):
                assert "could not be run" in text_part["text"], text_part
            instruction = msgs[1]["content"][0]["text"]
            x, y = field_at(image_part["image_url"]["url"].split(",", 1)[1])
            calls = [{"name": "click", "arguments": {"x": x, "y": y}},
                     {"name": "type_text", "arguments": {"text": word_of(instruction, model.endswith("-wrong"))}},
                     {"name": "key", "arguments": {"keys": "Return"}}]
            text = "Clicking the field, then typing.\n" + "\n".join(
                f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in calls)
        return {"id": f"chat_{turn}", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}]}


@pytest.fixture()
def model() -> Iterator[Model]:
    m = Model()
    t = threading.Thread(target=m.serve_forever, daemon=True)
    t.start()
    yield m
    m.shutdown()
    m.server_close()


def claude_client(m: Model) -> Any:
    # No retries: a 500 is the result at once (the SDK would retry it twice).
    return anthropic.Anthropic(api_key="test", base_url=m.url, max_retries=0)


def openai_client(m: Model) -> Any:
    return openai.OpenAI(api_key="test", base_url=m.url + "/v1", max_retries=0)


@pytest.fixture()
def session(address: str) -> Iterator[deskgym.Session]:
    s = deskgym.connect(address=address, task="type-word", profile=None, seed=5)
    yield s
    s.close()


# -- the dialect layer on the adapters (fast tier) ---------------------------------------


@pytest.mark.spec("aci:3.1.from-text")
def test_each_adapter_reads_its_models_text_form() -> None:
    from deskgym.dialect import DialectError
    from deskgym.geometry import Display

    # The model saw the 1280x800 screen at half size.
    half = Display(screen_width=1280, screen_height=800, x=0, y=0, width=1280, height=800,
                   delivered_width=640, delivered_height=400)
    claude = AnthropicAgent("claude-x", client=object())
    assert claude.from_text('<invoke name="left_click"><parameter name="coordinate">[100, 50]</parameter></invoke>',
                            half) == [{"verb": "click", "x": 200, "y": 100}]
    tars = ChatAgent("ui-tars", client=object(), format="uitars")
    assert tars.from_text("Thought: the box.\nAction: click(start_box='(500,500)')", half) == [
        {"verb": "click", "x": 640, "y": 400}]
    assert OpenAIAgent(client=object()).from_text('<click x="10" y="20"/>') == [
        {"verb": "click", "x": 10, "y": 20}]
    with pytest.raises(DialectError):
        claude.from_text("I would click the button.")


# -- bad input, before anything runs (fast tier) -------------------------------------------


def test_bad_arguments_are_refused_before_any_call() -> None:
    nothing = object()  # no session: each of these is refused before it is touched
    for bad in (0, -1, True, "5", 2.5):
        with pytest.raises(DeskgymError) as e:
            drive_session(nothing, lambda obs: [], max_steps=bad)  # type: ignore[arg-type]
        assert e.value.code == "INVALID_ARGUMENT" and "max_steps" in e.value.message
    with pytest.raises(DeskgymError) as e:
        drive_session(nothing, lambda obs: [], max_turns=0)
    assert e.value.code == "INVALID_ARGUMENT" and "max_turns" in e.value.message
    for not_an_agent in (42, "claude-opus", None, AnthropicAgent):
        with pytest.raises(DeskgymError) as e:
            drive_session(nothing, not_an_agent)
        assert e.value.code == "INVALID_ARGUMENT" and "deskgym.agent(model)" in e.value.message
    with pytest.raises(DeskgymError):
        ChatAgent("m", format="yaml")
    with pytest.raises(DeskgymError):
        ChatAgent("m", keep_images=0)
    assert isinstance(agent("claude-sonnet-4-5"), AnthropicAgent)
    assert isinstance(agent("computer-use-preview"), OpenAIAgent)
    assert isinstance(agent("Qwen/Qwen2.5-VL-7B-Instruct"), ChatAgent)


# -- real desktops -------------------------------------------------------------------------


def recorded_steps(s: deskgym.Session, tmp_path: pathlib.Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The session's recorded steps and events, read back with pyarrow (after close)."""
    datasets = pytest.importorskip("deskgym.datasets")
    s.close()
    tables = datasets.open(s.replay.save(tmp_path / "run.skn"))
    steps = sorted((r for r in tables["steps"].to_pylist() if r["env_id"] == s.env_id),
                   key=lambda r: (r["episode_id"], r["step_index"]))
    events = [r for r in tables["events"].to_pylist() if r["env_id"] == s.env_id]
    return steps, events


@pytest.mark.real
@pytest.mark.spec("aci:2.drive", "aci:6.vendor-loops")
def test_claude_drives_a_task_and_every_step_is_recorded(model: Model, address: str, tmp_path: pathlib.Path) -> None:
    s = deskgym.connect(address=address, task="type-word", profile=None, seed=5, record="drive-claude")
    out = s.drive(AnthropicAgent("claude-stub", client=claude_client(model)), max_steps=10)
    assert (out.stop, out.success, out.reward, out.steps, out.error) == ("terminated", True, 1.0, 3, ""), out
    # Four requests: a screenshot, then a click, the word and Enter (the last ends it).
    assert out.turns == 4 and out.answer == "turn 3" and out.result.status == "scored"
    assert [h.action["verb"] for h in out.history] == ["click", "type_text", "key"]
    assert [h.step_index for h in out.history] == [1, 2, 3] and out.history[-1].terminated
    assert out.recording is s.replay and out.instruction.startswith("Click the text field")
    # The SDK sent what Anthropic's API takes: tool_results answering each tool_use.
    last = model.requests[-1][1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant"] * 3 + ["user"]
    assert last[-1]["content"][0]["tool_use_id"] == "toolu_2"
    steps, events = recorded_steps(s, tmp_path)
    assert [(r["action_verb"], r["reward"], r["terminated"]) for r in steps] == [
        ("click", 0.0, False), ("type_text", 0.0, False), ("key", 1.0, True)]
    assert steps[1]["action_text"] == out.instruction.split('"')[1] and steps[2]["action_keys"] == "Return"
    # The model's side (replies, answers; images as their size) is an artifact the
    # recording references.
    assert out.transcript is not None
    (art,) = [json.loads(e["payload"]) for e in events if e["kind"] == "artifact"]
    assert art["sha256"] == out.transcript["sha256"] and art["name"] == f"drive-{out.episode}-transcript.jsonl"
    with deskgym.Client(address) as c:
        c.artifacts.download(art["sha256"], tmp_path / "t.jsonl")
    lines = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert lines[0]["instruction"] == out.instruction and lines[-1]["stop"] == "terminated"
    assert lines[2]["reply"]["content"][1]["input"]["action"] == "left_click"
    # (PNG's base64 starts iVBORw0KGgo: no screenshot is in the transcript.)
    assert "<image," in json.dumps(lines[1]["answers"]) and "iVBORw0KGgo" not in (tmp_path / "t.jsonl").read_text()


@pytest.mark.real
@pytest.mark.spec("aci:2.drive", "aci:6.vendor-loops")
def test_openai_drives_the_task_and_a_wrong_word_scores_zero(model: Model, session: deskgym.Session) -> None:
    out = session.drive(OpenAIAgent("computer-use-stub", client=openai_client(model)))
    assert (out.stop, out.success, out.reward, out.steps) == ("terminated", True, 1.0, 3), out
    assert out.recording is None and out.transcript is None  # the session does not record
    # Each request after the first carries the previous response's id and the call's output.
    later = [b for p, b in model.requests if p == "/v1/responses"][1:]
    assert all(b["previous_response_id"] and b["input"][0]["type"] == "computer_call_output" for b in later)
    # The same model typing the wrong word: the desktop ends the episode with 0.
    wrong = session.drive(OpenAIAgent("computer-use-stub-wrong", client=openai_client(model)))
    assert (wrong.stop, wrong.success, wrong.reward, wrong.steps) == ("terminated", False, 0.0, 3), wrong
    assert wrong.episode == out.episode + 1 and wrong.result.reward_or_none() == 0.0


@pytest.mark.real
@pytest.mark.spec("aci:2.drive", "aci:3.1.never-drops")
def test_a_chat_models_text_is_read_by_the_dialect(model: Model, session: deskgym.Session) -> None:
    chat = ChatAgent("qwen-stub-mumble", client=openai_client(model), coords="pixels")
    out = session.drive(chat)
    # The first reply had no action: it went back to the model, which then wrote three.
    assert (out.stop, out.success, out.steps, out.turns) == ("terminated", True, 3, 2), out
    assert [h.turn for h in out.history] == [2, 2, 2]
    wrong = session.drive(ChatAgent("qwen-stub-wrong", client=openai_client(model)))
    assert (wrong.success, wrong.reward, wrong.steps) == (False, 0.0, 3)


@pytest.mark.real
@pytest.mark.spec("aci:2.drive", "aci:1.drive-and-control")
def test_a_model_error_is_a_result_and_the_session_goes_on(model: Model, session: deskgym.Session) -> None:
    out = session.drive(AnthropicAgent("claude-stub-broken", client=claude_client(model)))
    assert (out.stop, out.success, out.steps) == ("model_error", False, 0)
    assert out.error.startswith("InternalServerError:") and "the stub is down" in out.error
    assert out.result.status == "invalid" and out.result.reward_or_none() is None
    # The desktop is untouched and the session drives again.
    assert session.screenshot()["w"] > 0
    again = session.drive(AnthropicAgent("claude-stub", client=claude_client(model)))
    assert again.success and again.steps == 3


@pytest.mark.real
@pytest.mark.spec("aci:2.drive", "aci:1.drive-and-control")
def test_a_callable_agent_and_the_bounds(session: deskgym.Session) -> None:
    def solve(obs: DriveObservation) -> list[dict[str, Any]] | None:
        if obs.steps:
            return None
        frame = np.asarray(Image.open(io.BytesIO(obs.png)).convert("RGB"))
        x, y = obs.display.to_screen(*centroid(mask(frame, FIELD)), "field")  # type: ignore[misc]
        return [{"verb": "click", "x": x, "y": y}, {"verb": "type_text", "text": obs.instruction.split('"')[1]},
                {"verb": "key", "keys": "Return"}]

    out = session.drive(solve)
    assert (out.stop, out.success, out.reward, out.steps, out.turns) == ("terminated", True, 1.0, 3, 1)

    # Clicking the corner forever: max_steps ends it, unscored by the desktop.
    corner = session.drive(lambda obs: [{"verb": "click", "x": 1, "y": 1}], max_steps=4)
    assert (corner.stop, corner.steps, corner.success, corner.reward) == ("max_steps", 4, False, 0.0)
    # A refused action is not a step, and comes back to the agent as its error.
    errors: list[str] = []

    def bad(obs: DriveObservation) -> Any:
        errors.append(obs.error)
        return [{"verb": "key", "keys": "NoSuchKey"}, "click the field"] if obs.turn == 1 else None

    refused = session.drive(bad)
    assert (refused.stop, refused.steps, refused.turns) == ("agent_done", 0, 2)
    assert refused.history[0].error.startswith("INVALID_ARGUMENT") and "NoSuchKey" in errors[1]
    assert "an action is a dict" in errors[1] and len(refused.history) == 1
    # A model whose text is never an action: max_turns ends it.
    mumbling = session.drive(lambda obs: "let me think", max_turns=3)
    assert (mumbling.stop, mumbling.turns, mumbling.steps) == ("max_turns", 3, 0)
    # One that returns no action is done.
    assert session.drive(lambda obs: []).stop == "agent_done"
    # An agent that raises: the run says so, the session goes on.
    def boom(obs: DriveObservation) -> Any:
        raise RuntimeError("no model here")

    failed = session.drive(boom)
    assert failed.stop == "model_error" and failed.error == "RuntimeError: no model here"
    # The task's own id starts a new episode; another task's id is refused, as is an
    # instruction with a seed.
    assert session.drive(lambda obs: None, task="type-word").episode == corner.episode + 5
    for task, kw in (("click-target", {}), ("", {}), ("type the word", {"seed": 3})):
        with pytest.raises(DeskgymError) as e:
            session.drive(solve, task, **kw)
        assert e.value.code == "INVALID_ARGUMENT"
    with pytest.raises(DeskgymError) as e:
        session.drive(solve, 7)  # type: ignore[arg-type]
    assert "task" in e.value.message


@pytest.mark.real
@pytest.mark.spec("aci:2.drive")
def test_a_desktop_that_fails_under_the_drive_ends_it_with_env_error() -> None:
    server = Server("--idle-timeout-s", "0")
    s = deskgym.connect(address=server.address, task="type-word", profile=None)

    def agent(obs: DriveObservation) -> Any:
        if obs.turn == 2:
            assert server.stop() == 0  # the server goes away between two actions
        return [{"verb": "click", "x": 1, "y": 1}]

    out = s.drive(agent)
    assert (out.stop, out.steps, out.turns) == ("env_error", 1, 2) and "UNAVAILABLE" in out.error, out
    assert out.result.status == "invalid" and out.result.cause == "env_error"
    s.close()
