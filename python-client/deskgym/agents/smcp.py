"""An A2C-SMCP Computer whose MCP server is deskgym's (extra ``deskgym[agents]``).

    python -m deskgym.smcp --server http://office.example:8000 --office lab-1 \\
        --address 127.0.0.1:50051 --task click-button

The Computer is the official ``a2c-smcp`` SDK's: it connects to the Office server's
``/smcp`` Socket.IO namespace with ``auth.role = "computer"`` (and the ``a2c_version``
query), joins the Office with ``server:join_office``, and answers the Agent's
``client:*`` events (``get_tools``, ``tool_call`` with cancellation by ``req_id`` and
timeouts flagged ``a2c_timeout``, ``get_config``, ``get_desktop``, ``get_resources``,
``get_skills`` / ``get_skill``, ``get_blob``) with the spec's flat error payloads. Its one
MCP server is ``python -m deskgym.mcp`` over stdio, so the Agent's tools are
:mod:`deskgym.agents.mcp`'s (named ``deskgym__<tool>``), each open desktop is a
``window://deskgym/<env id>`` window of the Computer's Desktop, and opening or closing a
desktop reaches the Office as ``server:update_desktop``.

What never leaves this machine: the deskgym token (read by the MCP server from
``--token-file``, or from ``$DESKGYM_TOKEN``, which this command writes to a private file
in its state directory because the SDK passes an MCP child only a few variables; the
Agent's ``client:get_config`` sees the file's path, never its contents) and files
(``get_blob`` serves only blobs the Computer minted from tool results).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys
from collections.abc import Sequence
from typing import Any

from a2c_smcp.computer.computer import Computer
from a2c_smcp.computer.mcp_clients.model import StdioServerConfig, ToolMeta
from a2c_smcp.computer.socketio.client import SMCPComputerClient
from mcp import StdioServerParameters

#: The bundle id of the deskgym MCP server inside the Computer (tool names start with it).
BUNDLE_ID = "deskgym"


def mcp_server_config(
    address: str,
    *,
    task: str | None = None,
    profile: str | None = None,
    screen: str | None = None,
    capabilities: Sequence[str] = (),
    token_file: str | None = None,
) -> StdioServerConfig:
    """The Computer's configuration of deskgym's MCP server: a stdio child running
    ``python -m deskgym.mcp``. It holds no secret: a token stays in ``token_file``."""
    args = ["-m", "deskgym.mcp", "--address", address]
    for flag, value in (("--task", task), ("--profile", profile), ("--screen", screen), ("--token-file", token_file)):
        if value:
            args += [flag, value]
    if capabilities:
        args += ["--capabilities", ",".join(capabilities)]
    return StdioServerConfig(
        name="deskgym",
        bundle_id=BUNDLE_ID,
        server_parameters=StdioServerParameters(command=sys.executable, args=args),
        # The SDK asks a local user to confirm each call unless told not to; the grants
        # given to the desktops (exec, files) are the operator's confirmation here.
        default_tool_meta=ToolMeta(auto_apply=True),
    )


def token_file(given: str | None, state_dir: pathlib.Path) -> str | None:
    """The deskgym token's file for the MCP child: ``given``, else ``$DESKGYM_TOKEN``
    written to ``state_dir/deskgym.token`` (mode 0600, replaced atomically), else none."""
    if given:
        return given
    token = os.environ.get("DESKGYM_TOKEN")
    if not token:
        return None
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / "deskgym.token"
    tmp = state_dir / f".deskgym.token.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.replace(tmp, path)
    return str(path)


def computer(name: str, config: StdioServerConfig, state_dir: pathlib.Path) -> Computer:
    """An SDK Computer with deskgym's MCP server, its state (blob spool, SKILL home,
    settings) under ``state_dir`` instead of the user's ``~/.a2c``."""
    state_dir.mkdir(parents=True, exist_ok=True)
    env = {"HOME": str(state_dir), "XDG_DATA_HOME": str(state_dir / "data"), "XDG_CONFIG_HOME": str(state_dir / "config"),
           "PATH": os.environ.get("PATH", "")}
    return Computer(
        name,
        mcp_servers={config},
        auto_connect=True,
        auto_reconnect=False,
        blob_cache_root=state_dir,
        skill_home=state_dir / "skills",
        env=env,
        project_root=state_dir,
    )


async def serve(
    url: str,
    office: str,
    name: str,
    config: StdioServerConfig,
    state_dir: pathlib.Path,
    auth: dict[str, Any] | None = None,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Boots the Computer, connects, joins ``office`` and serves until ``stop`` is set (or
    the connection ends). ``auth`` adds business fields to ``{"role": "computer"}``."""
    async with computer(name, config, state_dir) as c:
        client = SMCPComputerClient(computer=c, reconnection=False)
        await client.connect(url, auth={**(auth or {}), "role": "computer"}, namespaces=["/smcp"])
        try:
            await client.join_office(office)
            if ready is not None:
                ready.set()
            if stop is None:
                await client.wait()
            else:
                await stop.wait()
            await client.leave_office(office)
        finally:
            await client.disconnect()


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m deskgym.smcp", description="An A2C-SMCP Computer serving deskgym desktops.")
    p.add_argument("--server", required=True, help="the Office server's URL (its /smcp namespace is used)")
    p.add_argument("--office", required=True, help="the Office to join")
    p.add_argument("--name", default="deskgym", help="this Computer's name in the Office")
    p.add_argument("--auth-token-file", help="a file with the Office server's token (sent as auth.token)")
    p.add_argument("--address", default=os.environ.get("DESKGYM_ADDRESS", "127.0.0.1:50051"), help="the deskgym server")
    p.add_argument("--token-file", help="a file with the deskgym token (read by the MCP server only; "
                   "default: $DESKGYM_TOKEN, kept in a private file of the state directory)")
    p.add_argument("--task", help="open a desktop of this task at start")
    p.add_argument("--profile")
    p.add_argument("--screen", help="WxH")
    p.add_argument("--capabilities", default="", help="grants for the desktops, e.g. exec,files")
    p.add_argument("--state-dir", type=pathlib.Path, default=pathlib.Path.home() / ".cache" / "deskgym" / "smcp",
                   help="the Computer's blob spool, SKILL home and settings")
    a = p.parse_args(argv)
    auth: dict[str, Any] = {}
    if a.auth_token_file:
        auth["token"] = pathlib.Path(a.auth_token_file).read_text().strip()
    config = mcp_server_config(a.address, task=a.task, profile=a.profile, screen=a.screen,
                               capabilities=[c for c in a.capabilities.split(",") if c],
                               token_file=token_file(a.token_file, a.state_dir / a.name))
    asyncio.run(serve(a.server, a.office, a.name, config, a.state_dir / a.name, auth))


if __name__ == "__main__":
    main()
