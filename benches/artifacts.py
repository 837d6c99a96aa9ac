"""The artifact channel's figures (ACI §6), each against a baseline run in the same
script on the same desktop:

- `artifacts.upload` / `download` (content-addressed store, CRC-32 per chunk, SHA-256 of
  the whole) vs `put_file` / `get_file` of the same bytes (the plain file channel);
- `put_dir` / `get_dir` (typed entries, no tar) vs the docker-cp way: a tar made by the
  client, moved with `put_file`, unpacked by `exec tar -x` (and `exec tar -c`, then
  `get_file`, then unpacked locally).

Sizes 1 KB, 1 MB, 100 MB (a tree of one file of that size); p50/p95/p99 latency and
MB/s (of the payload) per arm.

    target/debug/deskgym-server --allow-capabilities exec,files --data-dir /tmp/bench-data &
    .venv/bin/python benches/artifacts.py --address 127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tarfile
import tempfile
import time
from collections.abc import Callable

import deskgym

SIZES = {"1KB": 1 << 10, "1MB": 1 << 20, "100MB": 100 << 20}


def pct(ts: list[float], q: float) -> float:
    s = sorted(ts)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))] * 1e3


def measure(fn: Callable[[int], None], reps: int) -> list[float]:
    fn(-1)  # warm
    out = []
    for i in range(reps):
        t = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - t)
    return out


def row(name: str, size: int, ts: list[float]) -> dict[str, float | str | int]:
    med = statistics.median(ts)
    return {"arm": name, "bytes": size, "n": len(ts), "p50_ms": pct(ts, 0.5), "p95_ms": pct(ts, 0.95),
            "p99_ms": pct(ts, 0.99), "MB/s": size / med / 1e6}


def tar_of(src: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        t.add(src, arcname=".")
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--sizes", default="1KB,1MB,100MB")
    ap.add_argument("--reps", default="30,15,3", help="repetitions per size, in --sizes order")
    a = ap.parse_args()
    s = deskgym.connect(address=a.address, screen=(320, 240))
    c = s.client
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for label, reps in zip(a.sizes.split(","), map(int, a.reps.split(","))):
                size = SIZES[label]
                data = os.urandom(size)
                src = os.path.join(tmp, f"tree-{label}")
                os.makedirs(src, exist_ok=True)
                with open(os.path.join(src, "payload.bin"), "wb") as f:
                    f.write(data)
                # Distinct content per repetition would only change the hash; the store
                # takes every byte either way (it never skips an upload it already holds).
                refs: list[str] = []

                def up(i: int) -> None:
                    refs.append(c.artifacts.upload(data)["sha256"])

                def down(i: int) -> None:
                    c.artifacts.download(refs[0], os.path.join(tmp, f"dl-{label}-{i}"))
                    os.unlink(os.path.join(tmp, f"dl-{label}-{i}"))

                def put_plain(i: int) -> None:
                    s.put_file("bench-plain.bin", data)

                def get_plain(i: int) -> None:
                    assert len(s.get_file("bench-plain.bin")) == size

                def put_tree(i: int) -> None:
                    s.put_dir(src, f"bench/tree-{label}")

                def put_tar(i: int) -> None:
                    blob = tar_of(src)
                    s.put_file("bench.tar", blob)
                    s.exec(f"mkdir -p bench/tar-{label} && tar -xf bench.tar -C bench/tar-{label}", shell=True)

                def get_tree(i: int) -> None:
                    s.get_dir(f"bench/tree-{label}", os.path.join(tmp, f"back-{label}-{i}"))

                def get_tar(i: int) -> None:
                    s.exec(f"tar -cf out.tar -C bench/tree-{label} .", shell=True)
                    blob = s.get_file("out.tar")
                    with tarfile.open(fileobj=io.BytesIO(blob)) as t:
                        t.extractall(os.path.join(tmp, f"untar-{label}-{i}"), filter="data")

                for name, fn in [("upload", up), ("put_file (baseline)", put_plain), ("download", down),
                                 ("get_file (baseline)", get_plain), ("put_dir", put_tree),
                                 ("tar + put_file + exec tar -x (baseline)", put_tar), ("get_dir", get_tree),
                                 ("exec tar -c + get_file + untar (baseline)", get_tar)]:
                    results.append(row(name, size, measure(fn, reps)))
                    r = results[-1]
                    print(f"{label:>6} {name:<44} n={r['n']:<3} p50 {r['p50_ms']:9.2f} ms  p95 {r['p95_ms']:9.2f}"
                          f"  p99 {r['p99_ms']:9.2f}  {r['MB/s']:8.2f} MB/s", flush=True)
                s.exec("rm -rf bench bench.tar out.tar bench-plain.bin", shell=True)
                for sha in set(refs):
                    c.artifacts.delete(sha)
    finally:
        s.close()


if __name__ == "__main__":
    main()
