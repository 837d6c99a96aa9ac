"""The verifiers face through verifiers' own `vf-eval`, against a scripted
OpenAI-compatible model (a stub HTTP server here): an oracle on some episodes, wrong
answers on others; the scores must be what the oracle earns on the real desktops, and a
failed environment an errored episode, never a 0."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from screens import target

#: Seeds the stub model answers as an oracle; every other seed gets a miss.
ORACLE_SEEDS = {1, 3}


class Model(BaseHTTPRequestHandler):
    """/v1/chat/completions: clicks the red target of the last screenshot on oracle seeds,
    a corner elsewhere."""

    replies: list[str] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
        parts = last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
        text = " ".join(p.get("text", "") for p in parts if p["type"] == "text")
        image = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
        seed = int(re.search(r"episode seed (\d+)", text).group(1))  # type: ignore[union-attr]
        x, y = target(image) if seed in ORACLE_SEEDS else (0, 40)
        reply = f'<click x="{x}" y="{y}"/>'
        Model.replies.append(reply)
        message = {"role": "assistant", "content": reply}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        head = {"id": "stub", "created": 0, "model": body.get("model", "stub")}
        if body.get("stream"):
            # verifiers' client streams: one chunk with the reply, one with the finish, [DONE].
            chunks = [{**head, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": message, "finish_reason": None}]},
                      {**head, "object": "chat.completion.chunk",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage}]
            out = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
            kind = "text/event-stream"
        else:
            out = json.dumps({**head, "object": "chat.completion", "usage": usage,
                              "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}).encode()
            kind = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def test_vf_eval_scores_what_the_oracle_earns_and_errors_are_not_zeros(
        openenv_url: str, tmp_path: pathlib.Path) -> None:
    model = ThreadingHTTPServer(("127.0.0.1", 0), Model)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    try:
        resets = [{"task": "click-target", "seed": s} for s in (1, 2, 3, 4)] + [{"task": "no-such-task", "seed": 5}]
        vf_eval = pathlib.Path(sys.executable).parent / "vf-eval"
        r = subprocess.run(
            [str(vf_eval), "deskgym-verifiers", "-m", "stub", "--no-push", "-o", str(tmp_path),
             "--env.taskset.base-url", openenv_url, "--env.taskset.resets", json.dumps(resets),
             "--client.base-url", f"http://127.0.0.1:{model.server_address[1]}/v1", "--client.api-key-var", "STUB_KEY",
             "--env.player.harness.id", "null", "--env.player.runtime.type", "subprocess", "--env.player.max-turns", "3"],
            capture_output=True, text=True, timeout=600, env={**os.environ, "STUB_KEY": "x"},
        )
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    finally:
        model.shutdown()
    episodes = {(e["task"]["data"]["reset"]["task"], e["task"]["data"]["reset"]["seed"]): e
                for p in tmp_path.rglob("traces.jsonl") for e in map(json.loads, p.read_text().splitlines())}
    assert len(episodes) == 5
    for seed in (1, 2, 3, 4):
        e = episodes[("click-target", seed)]
        assert e["ok"] and not e["errors"], e["errors"]
        (trace,) = e["traces"]
        # The desktop's reward: 1 where the oracle clicked the target, 0 for the misses
        # (which play until the turn bound).
        assert trace["rewards"]["openenv_reward"]["score"] == (1.0 if seed in ORACLE_SEEDS else 0.0), seed
        assert trace["stop_condition"] == ("user_closed" if seed in ORACLE_SEEDS else "max_turns")
    # The environment's failure is the episode's error: not ok, and no reward at all.
    failed = episodes[("no-such-task", 5)]
    assert not failed["ok"] and failed["errors"][0]["type"] == "EnvError"
    assert "unknown task" in failed["errors"][0]["message"] and failed["traces"] == []
