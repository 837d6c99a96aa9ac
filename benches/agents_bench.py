"""What an agent protocol adds to one action: a pointer move on a 640x480 bundled task,
p50 over ``--n`` calls, in one process against one server:

- direct: ``Client.step`` (gRPC ``Step``), the baseline;
- axstream: one ``{"op":"act","do":"move",...}`` line fed to an open ``Executor``
  (``Drive`` stream: parse, validate and step on the server, report back);
- MCP: ``call_tool("move")`` through the MCP SDK's client to ``python -m deskgym.mcp``
  over stdio (JSON-RPC, a worker thread, then ``Step``).

    source scripts/start-server.sh && start_server target/release/deskgym-server
    .venv/bin/python benches/agents_bench.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

import deskgym
from deskgym.actions import to_proto
from deskgym.axstream import Executor


def p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1e3


def direct(env: deskgym.DeskgymEnv, n: int) -> float:
    out = []
    for i in range(n):
        t = time.perf_counter()
        env.client.step(env.env_id, to_proto({"verb": "move", "x": 10 + i % 50, "y": 100}), encoding="png")
        out.append(time.perf_counter() - t)
    return p50_ms(out)


def axstream(env: deskgym.DeskgymEnv, n: int) -> float:
    ex = Executor(env)
    ex.feed("```\n")
    out = []
    for i in range(n):
        line = f'{{"op":"act","do":"move","target":{{"x":{10 + i % 50},"y":100}}}}\n'
        t = time.perf_counter()
        (r,) = ex.feed(line)
        out.append(time.perf_counter() - t)
        assert r.status == "executed", r
    ex.close()
    return p50_ms(out)


def mcp(address: str, n: int) -> float:
    params = StdioServerParameters(command=sys.executable, env=dict(os.environ),
                                   args=["-m", "deskgym.mcp", "--address", address, "--task", "click-target",
                                         "--screen", "640x480"])
    out: list[float] = []

    async def run() -> None:
        async with stdio_client(params) as (r, w), ClientSession(r, w) as s:
            await s.initialize()
            for i in range(n):
                if i % 10 == 0:
                    await s.call_tool("reset", {})  # within the task's episode bound
                t = time.perf_counter()
                res = await s.call_tool("move", {"x": 10 + i % 50, "y": 100})
                out.append(time.perf_counter() - t)
                assert not res.isError, res

    anyio.run(run)
    return p50_ms(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", default=deskgym.client.DEFAULT_ADDRESS)
    p.add_argument("--n", type=int, default=300)
    a = p.parse_args()
    env = deskgym.make("click-target", address=a.address, screen=(640, 480), max_steps=1_000_000)
    try:
        env.reset(seed=0)
        direct(env, 20)  # warm-up
        base = direct(env, a.n)
        ax = axstream(env, a.n)
    finally:
        env.close()
    m = mcp(a.address, a.n)
    print(f"{'direct Step':>22}: {base:6.2f} ms p50")
    print(f"{'axstream line (Drive)':>22}: {ax:6.2f} ms p50  ({ax / base:.2f}x direct)")
    print(f"{'MCP call_tool (stdio)':>22}: {m:6.2f} ms p50  ({m / base:.2f}x direct)")


if __name__ == "__main__":
    main()
