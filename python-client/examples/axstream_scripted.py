"""A scripted "model" solves click-button through axstream: its text streams in small
chunks and each action runs as soon as its line is complete.

    source scripts/start-server.sh && start_server target/release/deskgym-server
    .venv/bin/python python-client/examples/axstream_scripted.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

import deskgym
from deskgym.axstream import Executor


def model(instruction: str) -> Iterator[str]:
    """Writes like an LLM: narration, then a fence, a few characters at a time."""
    label = instruction.split('"')[1]
    text = (
        f"The task says: {instruction} I'll click that button and finish.\n"
        "```jsonl\n"
        f'{{"op":"assert","target":{{"ax":{{"role":"AXButton","title":"{label}"}}}}}}\n'
        f'{{"op":"act","do":"click","target":{{"ax":{{"role":"AXButton","title":"{label}"}}}}}}\n'
        '{"op":"done","status":"success","reason":"clicked the named button"}\n'
        "```\n"
    )
    for i in range(0, len(text), 6):
        time.sleep(0.01)  # ~150 tokens/s
        yield text[i:i + 6]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--address", default=deskgym.client.DEFAULT_ADDRESS)
    a = p.parse_args()
    env = deskgym.make("click-button", address=a.address)
    try:
        _, info = env.reset(seed=1)
        ex = Executor(env)
        for r in ex.run(model(info["instruction"])):
            print(f"{r.finished_ms:7.1f} ms  {r}  reward={r.reward:g}")
        print("verdict:", ex.verdict)
    finally:
        env.close()


if __name__ == "__main__":
    main()
