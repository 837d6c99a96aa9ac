"""The MCP SDK's own client drives a deskgym desktop through ``python -m deskgym.mcp``
over stdio: lists the tools, reads the tree, clicks the named button, saves a screenshot.

    source scripts/start-server.sh && start_server target/release/deskgym-server
    .venv/bin/python python-client/examples/mcp_client.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import base64
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def run(address: str) -> None:
    params = StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                   args=["-m", "deskgym.mcp", "--address", address, "--task", "click-button"])
    async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
        await s.initialize()
        print("tools:", ", ".join(t.name for t in (await s.list_tools()).tools))
        tree = (await s.call_tool("observe", {})).content[0]
        assert isinstance(tree, types.TextContent)
        print(tree.text[:400])
        label = tree.text.splitlines()[0].split('"')[1]
        done = (await s.call_tool("click", {"role": "push button", "name": label})).content[0]
        assert isinstance(done, types.TextContent)
        print(done.text)
        shot = (await s.call_tool("screenshot", {})).content[0]
        assert isinstance(shot, types.ImageContent)
        with open("mcp-screenshot.png", "wb") as f:
            f.write(base64.b64decode(shot.data))
        print("wrote mcp-screenshot.png")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", default=os.environ.get("DESKGYM_ADDRESS", "127.0.0.1:50051"))
    anyio.run(run, p.parse_args().address)


if __name__ == "__main__":
    main()
