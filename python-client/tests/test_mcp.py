"""deskgym's MCP server through the MCP SDK's own client, over stdio and streamable HTTP,
against a real deskgym server and real desktops."""

from __future__ import annotations

import base64
import io
import os
import socket
import subprocess
import sys
from typing import Any

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from PIL import Image

from conftest import Server

BASIC = {"screenshot", "click", "double_click", "right_click", "move", "scroll", "drag", "type", "key", "wait",
         "observe", "list_windows", "launch_app", "reset", "open_desktop", "close_desktop"}
GRANTED = {"exec", "read_file", "write_file", "list_directory"}


def text(r: types.CallToolResult) -> str:
    assert r.content and isinstance(r.content[0], types.TextContent), r
    return r.content[0].text


async def ok(s: ClientSession, tool: str, **args: Any) -> str:
    r = await s.call_tool(tool, args)
    assert not r.isError, f"{tool}: {text(r)}"
    return text(r)


async def error(s: ClientSession, tool: str, **args: Any) -> str:
    r = await s.call_tool(tool, args)
    assert r.isError, f"{tool} succeeded: {text(r)}"
    return text(r)


def stdio_params(address: str, *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "deskgym.mcp", "--address", address, *args],
                                 env=dict(os.environ))


@pytest.mark.spec("aci:6.adapters")
def test_every_tool_over_stdio_on_a_bundled_task(address: str) -> None:
    async def main() -> None:
        params = stdio_params(address, "--task", "click-button", "--seed", "7", "--screen", "320x240")
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            assert names == BASIC, names ^ BASIC  # exec and files were not granted: not listed
            shot = (await s.call_tool("screenshot", {})).content[0]
            assert isinstance(shot, types.ImageContent) and shot.mimeType == "image/png"
            assert Image.open(io.BytesIO(base64.b64decode(shot.data))).size == (320, 240)
            tree = await ok(s, "observe")
            instruction = tree.splitlines()[0]
            label = instruction.split('"')[1]
            assert "push button" in tree and label in tree
            # Non-ending actions first (a click on a button ends click-button's episode).
            assert (await ok(s, "move", x=5, y=200)).startswith("move done: step 1")
            await ok(s, "scroll", x=5, y=200, dy=2)
            await ok(s, "type", text="hi")
            await ok(s, "key", keys="ctrl+a")
            await ok(s, "drag", x=5, y=200, to_x=20, to_y=210)
            await ok(s, "double_click", x=5, y=200)
            await ok(s, "right_click", x=5, y=200)
            assert "step 8" in await ok(s, "wait", ms=10)
            # Window and app verbs need grants the bundled tasks' profile cannot have.
            assert (await error(s, "list_windows")).startswith("PERMISSION_DENIED")
            assert (await error(s, "launch_app", app="terminal")).startswith("PERMISSION_DENIED")
            # Bad arguments come back as tool errors led by the deskgym code.
            assert (await error(s, "click")).startswith("INVALID_ARGUMENT")
            assert "outside the 320x240 screen" in await error(s, "click", x=9999, y=5)
            assert (await error(s, "click", role="push button", name="no such")).startswith(
                "FAILED_PRECONDITION: element_not_found")
            assert (await error(s, "key", keys="ctrl+nosuchkey")).startswith("INVALID_ARGUMENT")
            assert (await error(s, "observe", desktop="e-nope")).startswith("NOT_FOUND")
            assert (await error(s, "wait", ms=10**9)).startswith("INVALID_ARGUMENT")
            # Cancellation mid-wait: the call ends with the SDK's cancelled error, and
            # the wait's settle step never runs.
            request_id = s._request_id

            async def long_wait() -> None:
                with pytest.raises(McpError, match="cancelled"):
                    await s.call_tool("wait", {"ms": 30_000})

            async with anyio.create_task_group() as tg:
                tg.start_soon(long_wait)
                await anyio.sleep(0.5)
                await s.send_notification(types.ClientNotification(types.CancelledNotification(
                    params=types.CancelledNotificationParams(requestId=request_id, reason="test"))))
            assert "step 9" in await ok(s, "wait", ms=0)
            # The element target solves the task; the result is typed too (the SDK's
            # structured output, with the tool's output schema).
            tools = {t.name: t for t in (await s.list_tools()).tools}
            assert tools["click"].outputSchema is not None and "reward" in tools["click"].outputSchema["properties"]
            r = await s.call_tool("click", {"role": "push button", "name": label})
            done = r.content[0].text  # type: ignore[union-attr]
            assert "reward 1" in done and "the episode ended (terminated)" in done
            assert r.structuredContent == {"verb": "click", "step": 10, "reward": 1.0, "terminated": True,
                                           "truncated": False}
            r = await s.call_tool("reset", {"seed": 8})
            assert r.content[0].text.startswith("episode 2 (seed 8): Click the button")  # type: ignore[union-attr]
            assert r.structuredContent is not None and (r.structuredContent["episode"], r.structuredContent["seed"]) == (2, 8)
            # The desktop is a window:// resource with its instruction and tree.
            res = (await s.list_resources()).resources
            assert len(res) == 1 and str(res[0].uri).startswith("window://deskgym/")
            body = (await s.read_resource(res[0].uri)).contents[0]
            assert isinstance(body, types.TextResourceContents) and "push button" in body.text

    anyio.run(main)


@pytest.mark.spec("aci:3.mapping")
@pytest.mark.real  # finds the target's pixels in the image
def test_pixels_of_a_scaled_screenshot_click_what_the_agent_saw(address: str) -> None:
    import numpy as np

    from deskgym.agents.reference import RED, centroid, mask

    async def main() -> None:
        params = stdio_params(address, "--task", "click-target", "--seed", "5", "--screen", "640x480")
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            shot = (await s.call_tool("screenshot", {"max_long_edge": 200})).content[0]
            assert isinstance(shot, types.ImageContent)
            img = np.asarray(Image.open(io.BytesIO(base64.b64decode(shot.data))).convert("RGB"))
            assert img.shape[:2] == (150, 200)
            at = centroid(mask(img, RED))
            assert at is not None
            # x, y are pixels of that 200x150 image, not of the 640x480 screen.
            done = await ok(s, "click", x=at[0], y=at[1])
            assert "reward 1" in done, (at, done)
            assert "outside the 200x150 frame" in await error(s, "click", x=300, y=5)
            assert (await error(s, "screenshot", scope="window")).startswith("INVALID_ARGUMENT")

    anyio.run(main)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.spec("smcp:10.no-file-channels")
@pytest.mark.real  # runs a command in the desktop's sandbox
def test_granted_tools_and_desktops_over_streamable_http(exec_server: Server) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "deskgym.mcp", "--address", exec_server.address, "--transport", "http",
         "--port", str(port), "--task", "blank", "--profile", "desktop", "--screen", "640x480",
         "--capabilities", "exec,files,launch_app,windows"],
    )
    url = f"http://127.0.0.1:{port}/mcp"

    async def main() -> None:
        for _ in range(300):  # the server starts its desktop before it listens
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                await anyio.sleep(0.1)
        async with streamable_http_client(url) as (r, w, _), ClientSession(r, w) as s:
            await s.initialize()
            names = {t.name for t in (await s.list_tools()).tools}
            assert names == BASIC | GRANTED
            assert '"stdout": "hi\\n"' in await ok(s, "exec", command="echo hi")
            ran = await s.call_tool("exec", {"command": "echo hi"})
            assert ran.structuredContent == {"exit_code": 0, "timed_out": False, "stdout": "hi\n", "stderr": ""}
            assert (await ok(s, "write_file", path="a.txt", content="hello")).startswith("wrote 5 bytes")
            assert await ok(s, "read_file", path="a.txt") == "hello"
            assert "a.txt" in await ok(s, "list_directory", path=".")
            assert (await error(s, "read_file", path="../../etc/shadow")).split(":")[0] in (
                "PERMISSION_DENIED", "INVALID_ARGUMENT", "NOT_FOUND")
            await ok(s, "launch_app", app="editor")
            assert "mousepad" in (await ok(s, "list_windows")).lower()
            # A second desktop: tools must then name one; closing it restores the default.
            assert (await error(s, "open_desktop", task="click-target", capabilities=["clipboard"])).startswith(
                "PERMISSION_DENIED")
            opened = await ok(s, "open_desktop", task="click-target", capabilities=[])
            second = opened.split()[1]
            assert len((await s.list_resources()).resources) == 2
            assert "several desktops are open" in await error(s, "screenshot")
            shot = (await s.call_tool("screenshot", {"desktop": second})).content[0]
            assert isinstance(shot, types.ImageContent)
            await ok(s, "close_desktop", desktop=second)
            assert (await error(s, "close_desktop", desktop=second)).startswith("NOT_FOUND")
            assert len((await s.list_resources()).resources) == 1
            assert isinstance((await s.call_tool("screenshot", {})).content[0], types.ImageContent)

    try:
        anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
