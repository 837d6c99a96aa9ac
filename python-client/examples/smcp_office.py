"""A minimal A2C-SMCP Office (python-socketio) with deskgym's Computer joining it; this
script plays the Agent: it asks the Computer for its tools and Desktop, then calls the
click tool on the named button.

    source scripts/start-server.sh && start_server target/release/deskgym-server
    .venv/bin/python python-client/examples/smcp_office.py --address "$DESKGYM_ADDRESS"

(A real Office server routes Agents' events to Computers; here the script does both.)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys

import socketio
from aiohttp import web

NS, OFFICE, NAME = "/smcp", "demo-office", "deskgym"


async def run(address: str, port: int) -> None:
    sio = socketio.AsyncServer(async_mode="aiohttp")
    app = web.Application()
    sio.attach(app)
    joined: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    @sio.on("connect", namespace=NS)
    async def connect(sid: str, environ: dict, auth: dict) -> bool:
        return isinstance(auth, dict) and auth.get("role") == "computer"

    @sio.on("server:join_office", namespace=NS)
    async def join(sid: str, data: dict) -> tuple[bool, None]:
        await sio.enter_room(sid, data["office_id"], namespace=NS)
        joined.set_result(sid)
        return True, None

    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    computer = subprocess.Popen([sys.executable, "-m", "deskgym.smcp", "--server", f"http://127.0.0.1:{port}",
                                 "--office", OFFICE, "--name", NAME, "--address", address, "--task", "click-button"])
    try:
        sid = await asyncio.wait_for(joined, 120)

        async def call(event: str, **data: object) -> dict:
            req = {"agent": "demo-agent", "req_id": event, "computer": NAME, **data}
            return await sio.call(event, req, to=sid, namespace=NS, timeout=60)

        tools = await call("client:get_tools")
        print("tools:", ", ".join(t["name"] for t in tools["tools"]))
        desktop = (await call("client:get_desktop"))["desktops"][0]
        print(desktop[:300])
        label = desktop.split('labelled "')[1].split('"')[0]
        result = await call("client:tool_call", tool_name="deskgym__click", params={"role": "push button", "name": label},
                            timeout=30)
        print(result["content"][0]["text"])
    finally:
        computer.terminate()
        computer.wait(timeout=30)
        await runner.cleanup()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", default=os.environ.get("DESKGYM_ADDRESS", "127.0.0.1:50051"))
    p.add_argument("--port", type=int, default=8000)
    a = p.parse_args()
    asyncio.run(run(a.address, a.port))


if __name__ == "__main__":
    main()
