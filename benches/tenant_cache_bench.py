"""What scoping the frame cache by principal costs in encodes (issue 46).

Two servers in one run, the same token file of two principals except for one word:
*shared* puts both in one sharing group (`share=all`: the fleet-wide dedup of before),
*scoped* leaves each its own scope (the default). On each:

1. fork-heavy, one principal: alice forks one env N ways and steps every replica
   alike for K rounds (identical frames);
2. two principals, same task: alice and bob each run M envs of `type-word` with
   the same seeds and the same actions for K rounds.

Every round each env types one character into the task's field (new pixels each
round, as in `fork_bench.py`).

Reported: PNG encodes (each principal's own `GetCacheStats.encodes`, summed) and the
ratio scoped / shared.

    python benches/tenant_cache_bench.py --server target/debug/deskgym-server
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile

import deskgym
from deskgym.v1 import deskgym_pb2 as pb

SCREEN = (320, 240)
TOKENS = {"alice": "a" * 32, "bob": "b" * 32}


def start(server: str, share: bool) -> tuple[subprocess.Popen, str, str]:
    tmp = tempfile.mkdtemp(prefix="deskgym-tenant-bench-")
    word = " share=all" if share else ""
    path = os.path.join(tmp, "tokens")
    with open(path, "w") as f:
        f.writelines(f"{name}: {token}{word}\n" for name, token in TOKENS.items())
    os.chmod(path, 0o600)
    p = subprocess.Popen(
        [server, "--listen", "127.0.0.1:0", "--token-file", path, "--data-dir", tmp],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = p.stdout.readline()
    return p, line.strip().rsplit(" ", 1)[-1], tmp


FIELD = (0xFC, 0xFC, 0xFC)


def focus(c: deskgym.Client, env: str, seed: int) -> None:
    """Resets `env` and clicks its text field (found in the RGB frame)."""
    from deskgym.agents import centroid, mask
    from deskgym.frames import decode

    obs = c.reset(env, seed=seed, encoding="rgb").observation
    x, y = centroid(mask(decode(obs), FIELD))
    c.step(env, deskgym.to_proto({"verb": "click", "x": x, "y": y}))


def step_all(c: deskgym.Client, envs: list[str]) -> None:
    act = deskgym.to_proto({"verb": "type_text", "text": "a"})
    c.step_batch([pb.StepRequest(env_id=e, action=act, encoding=pb.IMAGE_ENCODING_PNG) for e in envs])


def fork_heavy(address: str, n: int, k: int) -> int:
    c = deskgym.Client(address, token=TOKENS["alice"])
    before = c.cache_stats().encodes
    pool = c.create_pool("type-word", 1, screen=SCREEN, encoding="png")
    e = pool.env_ids[0]
    focus(c, e, 1)
    r = c.fork(c.save(e), n, encoding="png")
    envs = [x.env_id for x in r.replicas]
    for _ in range(k):
        step_all(c, envs)
    used = c.cache_stats().encodes - before
    c.close_pool(r.pool_id)
    c.close_pool(pool.pool_id)
    c.close()
    return used


def same_task(address: str, m: int, k: int) -> int:
    total = 0
    clients = {name: deskgym.Client(address, token=t) for name, t in TOKENS.items()}
    before = {name: c.cache_stats().encodes for name, c in clients.items()}
    pools = {}
    for name, c in clients.items():
        pools[name] = c.create_pool("type-word", m, screen=SCREEN, encoding="png")
        for j, e in enumerate(pools[name].env_ids):
            focus(c, e, 100 + j)
    for _ in range(k):
        for name, c in clients.items():
            step_all(c, list(pools[name].env_ids))
    for name, c in clients.items():
        total += c.cache_stats().encodes - before[name]
        c.close_pool(pools[name].pool_id)
        c.close()
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="target/debug/deskgym-server")
    ap.add_argument("--forks", type=int, default=8)
    ap.add_argument("--envs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=10)
    a = ap.parse_args()
    figures = {}
    for share in (True, False):
        p, address, _ = start(a.server, share)
        try:
            figures[share] = (fork_heavy(address, a.forks, a.rounds), same_task(address, a.envs, a.rounds))
        finally:
            p.terminate()
            p.wait()
    (fs, ts), (fo, to) = figures[True], figures[False]
    print("| run | encodes shared (baseline) | encodes scoped (default) | ratio |")
    print("|---|---|---|---|")
    print(f"| fork-heavy, one principal ({a.forks} replicas x {a.rounds} rounds) | {fs} | {fo} | {fo / max(fs, 1):.2f} |")
    print(f"| two principals, same task ({a.envs} envs each x {a.rounds} rounds) | {ts} | {to} | {to / max(ts, 1):.2f} |")


if __name__ == "__main__":
    main()
