"""deskgym's A2C-SMCP Computer against a python-socketio server standing in for the Office
server, with the test as the Agent, on a real deskgym server and real desktops."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import pathlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import socketio
from aiohttp import web
from conftest import Server
from PIL import Image

from deskgym.agents import smcp

NS = "/smcp"
NAME = "deskgym-test"
SECRET = "tok-SECRET-d3skgym"


class Office:
    """The Office server's side of the protocol, as little as the Computer needs: the
    handshake, join, and the update events it sends; the test calls client:* on it."""

    def __init__(self) -> None:
        self.sio = socketio.AsyncServer(async_mode="aiohttp")
        self.app = web.Application()
        self.sio.attach(self.app)
        self.computer: str | None = None
        self.auth: Any = None
        self.query = ""
        self.joined: dict[str, Any] = {}
        self.updates: list[str] = []
        #: Joins and updates in the order they arrived.
        self.order: list[str] = []
        self.update = asyncio.Event()
        self.sio.on("connect", self.on_connect, namespace=NS)
        self.sio.on("server:join_office", self.on_join, namespace=NS)
        self.sio.on("server:leave_office", self.on_leave, namespace=NS)
        for ev in ("server:update_config", "server:update_tool_list", "server:update_desktop", "server:update_skills"):
            self.sio.on(ev, self._recorder(ev), namespace=NS)

    async def on_connect(self, sid: str, environ: dict[str, Any], auth: Any) -> bool:
        self.auth, self.query = auth, environ.get("QUERY_STRING", "")
        return isinstance(auth, dict) and auth.get("role") == "computer"

    async def on_join(self, sid: str, data: dict[str, Any]) -> tuple[bool, str | None]:
        self.joined = data
        self.order.append("join")
        self.computer = sid
        await self.sio.enter_room(sid, data["office_id"], namespace=NS)
        return True, None

    async def on_leave(self, sid: str, data: dict[str, Any]) -> tuple[bool, str | None]:
        self.order.append("leave")
        return True, None

    def _recorder(self, ev: str) -> Any:
        async def record(sid: str, data: Any = None) -> None:
            self.updates.append(ev)
            self.order.append(ev)
            self.update.set()
        return record

    async def call(self, event: str, wait_s: float = 60, **data: Any) -> Any:
        assert self.computer is not None
        req = {"agent": "test-agent", "req_id": data.pop("req_id", event), "computer": NAME, **data}
        return await self.sio.call(event, req, to=self.computer, namespace=NS, timeout=wait_s)

    async def tool(self, tool: str, timeout: int = 60, req_id: str = "t", **params: Any) -> dict[str, Any]:
        r: dict[str, Any] = await self.call("client:tool_call", tool_name=f"{smcp.BUNDLE_ID}__{tool}", params=params,
                                            timeout=timeout, req_id=req_id)
        return r


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def result_text(r: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in r.get("content", []))


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A deskgym server that answers only calls with the token."""
    token = tmp_path_factory.mktemp("smcp-token") / "tokens"
    token.write_text(SECRET + "\n")
    s = Server("--token-file", str(token), "--idle-timeout-s", "0",
               "--data-dir", str(tmp_path_factory.mktemp("smcp-data")))
    yield s
    s.stop()


@pytest.mark.spec(
    "smcp:2.1.connect", "smcp:2.1.auth-secrets", "smcp:2.2.join", "smcp:2.2.updates-after-join", "smcp:3.events",
    "smcp:3.computer-field", "smcp:3.flat-errors", "smcp:4.1.config", "smcp:4.2.tools", "smcp:4.2.unique-names",
    "smcp:4.3.resources", "smcp:5.result-shape", "smcp:5.timeout", "smcp:5.cancel", "smcp:5.cancel-result",
    "smcp:5.blob", "smcp:6.desktop", "smcp:6.priority", "smcp:6.update-desktop", "smcp:7.skills",
    "smcp:7.name-lexer", "smcp:7.unknown-name", "smcp:8.get-blob", "smcp:8.errors", "smcp:8.no-file-read",
    "smcp:10.no-secrets",
)
def test_the_computer_serves_every_event_on_real_desktops(
    token_server: Server, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small budgets so a screenshot goes through the blob channel in several chunks.
    monkeypatch.setenv("A2C_SKILL_INLINE_BUDGET", "1024")
    monkeypatch.setenv("A2C_BLOB_CHUNK_BYTES", "4096")
    # The token as an operator exports it: the SDK would not pass $DESKGYM_TOKEN to the
    # MCP child, so it reaches the child as a private file (the server refuses calls
    # without it, so every tool call below proves it arrived).
    monkeypatch.setenv("DESKGYM_TOKEN", SECRET)
    token_file = smcp.token_file(None, tmp_path / "state")
    assert token_file is not None and (pathlib.Path(token_file).stat().st_mode & 0o777) == 0o600
    config = smcp.mcp_server_config(token_server.address, task="click-button", screen="320x240",
                                    token_file=token_file)

    async def main() -> None:
        office = Office()
        runner = web.AppRunner(office.app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready, stop = asyncio.Event(), asyncio.Event()
        computer = asyncio.create_task(
            smcp.serve(f"http://127.0.0.1:{port}", "office-1", NAME, config, tmp_path / "state", ready=ready, stop=stop))
        try:
            await asyncio.wait_for(ready.wait(), 120)
            await exercise(office)
        finally:
            stop.set()
            await asyncio.wait_for(computer, 60)
            await runner.cleanup()

    asyncio.run(main())


async def exercise(office: Office) -> None:
    # Handshake and join as the spec asks.
    assert office.auth == {"role": "computer"}
    assert "a2c_version=" in office.query
    assert office.joined == {"office_id": "office-1", "role": "computer", "name": NAME}
    # The desktop opened at start changed the Desktop before the join: no update may
    # precede it (§2.2).
    assert office.order[0] == "join", office.order
    replies: list[Any] = []

    tools = await office.call("client:get_tools")
    replies.append(tools)
    names = {t["name"] for t in tools["tools"]}
    assert {"deskgym__screenshot", "deskgym__click", "deskgym__observe", "deskgym__open_desktop"} <= names
    assert not names & {"deskgym__exec", "deskgym__read_file"}  # not granted

    config = await office.call("client:get_config")
    replies.append(config)
    assert smcp.BUNDLE_ID in config["servers"]

    desktop = await office.call("client:get_desktop")
    replies.append(desktop)
    assert len(desktop["desktops"]) == 1 and "push button" in desktop["desktops"][0]
    label = desktop["desktops"][0].split('instruction: Click the button labelled "')[1].split('"')[0]

    resources = await office.call("client:get_resources", mcp_server=smcp.BUNDLE_ID)
    replies.append(resources)
    uris = [r["uri"] for r in resources["resources"]]
    assert len(uris) == 1 and uris[0].startswith("window://deskgym/")
    # Desktop semantics: deskgym's windows are for the assistant, at priority 0.5.
    assert resources["resources"][0]["annotations"]["priority"] == 0.5
    one = await office.call("client:get_desktop", window=uris[0])
    assert one["desktops"] == desktop["desktops"]
    missing = await office.call("client:get_resources", mcp_server="no-such-server")
    assert missing["code"] == 4014 and "error" not in missing  # the flat payload

    assert (await office.call("client:get_skills"))["skills"] == []
    assert (await office.call("client:get_skill", name="Bad Name!"))["code"] == 4016
    unknown = await office.call("client:get_skill", name="no-such-skill")
    assert unknown["code"] == 4014 and "no-such-skill" in json.dumps(unknown.get("details")), unknown

    # A screenshot over the budget comes back as a blob handle, pulled in chunks.
    shot = await office.tool("screenshot", req_id="shot")
    replies.append(shot)
    assert shot.get("content"), shot
    item = shot["content"][0]
    meta = item.get("meta") or item.get("_meta")
    assert meta, {k: (v if k != "data" else len(v or "")) for k, v in item.items()}
    handle, total, sha = meta["a2c_blob_handle"], meta["a2c_total_size"], meta["a2c_sha256"]
    assert not item.get("data")
    data, offset = b"", 0
    while offset < total:
        chunk = await office.call("client:get_blob", blob_handle=handle, chunk_offset=offset)
        assert chunk["total_size"] == total and chunk["sha256"] == sha
        part = base64.b64decode(chunk["blob"])
        assert part
        data += part
        offset += len(part)
    assert hashlib.sha256(data).hexdigest() == sha and Image.open(io.BytesIO(data)).size == (320, 240)
    assert offset > 4096, "several chunks"
    for forged in ("not-a-handle", "file:///etc/passwd", "../../etc/passwd"):
        answer = await office.call("client:get_blob", blob_handle=forged)
        assert answer.get("code") == 4018, (forged, {k: v for k, v in answer.items() if k != "blob"})
    # A range outside the blob is 4018 too (§8.5).
    for offset in (-1, total + 1):
        answer = await office.call("client:get_blob", blob_handle=handle, chunk_offset=offset)
        assert answer.get("code") == 4018, (offset, {k: v for k, v in answer.items() if k != "blob"})

    # Tool errors stay CallToolResults with the deskgym code.
    bad = await office.tool("click", x=9999, y=1)
    assert bad["isError"] and result_text(bad).startswith("INVALID_ARGUMENT")

    # Cancellation by req_id mid-wait; an unknown req_id is a no-op.
    async def cancel_soon() -> None:
        await asyncio.sleep(0.5)
        await office.sio.emit("notify:tool_call_cancel", {"agent": "test-agent", "req_id": "unknown"}, to=office.computer,
                              namespace=NS)
        await office.sio.emit("notify:tool_call_cancel", {"agent": "test-agent", "req_id": "w1"}, to=office.computer,
                              namespace=NS)

    canceller = asyncio.create_task(cancel_soon())
    cancelled = await office.tool("wait", req_id="w1", ms=30_000)
    await canceller
    assert cancelled["isError"] and cancelled["meta"]["a2c_cancelled"] is True
    assert cancelled["meta"].get("a2c_cancel_reason") == "agent_requested", cancelled["meta"]

    # A tool call past its timeout is flagged.
    late = await office.tool("wait", req_id="w2", timeout=1, ms=10_000)
    assert late["isError"] and late["meta"]["a2c_timeout"] is True

    # The element target solves the task; the desktop's window changed, so the Office
    # hears server:update_desktop (the Computer subscribed to it).
    office.updates.clear()
    office.update.clear()
    done = await office.tool("click", role="push button", name=label)
    assert not done["isError"] and "reward 1" in result_text(done)
    await asyncio.wait_for(office.update.wait(), 30)
    assert office.updates.count("server:update_desktop") >= 1

    # Desktops coming and going reach the Office as server:update_desktop.
    office.updates.clear()
    office.update.clear()
    opened = await office.tool("open_desktop", task="click-target")
    second = result_text(opened).split()[1]
    await asyncio.wait_for(office.update.wait(), 30)
    assert "server:update_desktop" in office.updates
    assert len((await office.call("client:get_desktop"))["desktops"]) == 2
    office.update.clear()
    await office.tool("close_desktop", desktop=second)
    await asyncio.wait_for(office.update.wait(), 30)
    assert len((await office.call("client:get_desktop"))["desktops"]) == 1

    # Another Computer's name is not served.
    with pytest.raises(socketio.exceptions.TimeoutError):
        await office.sio.call("client:get_tools", {"agent": "a", "req_id": "x", "computer": "someone-else"},
                              to=office.computer, namespace=NS, timeout=2)

    # Nothing the Agent saw carries the deskgym token.
    assert SECRET not in json.dumps(replies)
