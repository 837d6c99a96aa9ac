"""The accessibility tree on a busy desktop, against a baseline in the same run.

One `desktop` env with LibreOffice Writer, Chromium (a local page) and gnome-terminal
open. deskgym: `Observe` with the tree (elements + text rendering, and once more with
OSWorld's XML), timed at the client, with the server's node count and walk time.
Baseline: pyatspi walking the same desktop from inside the same sandbox, reading what
OSWorld's in-VM server reads per node (name, description, role, states, attributes,
extents, actions, text, value), the way `desktop_env/server/main.py` walks it.

    scripts/setup.sh --desktop && cargo build --release --bins
    source scripts/start-server.sh && start_server target/release/deskgym-server --allow-capabilities exec,files
    .venv/bin/python benches/a11y_bench.py --address "$DESKGYM_ADDRESS"
"""

from __future__ import annotations

import argparse
import statistics
import time

import deskgym

PAGE = (
    "<html><head><title>Bench page</title></head><body><h1>Benchmark</h1>"
    + "".join(f"<p>Paragraph {i} <a href='#{i}'>link {i}</a> <button>Button {i}</button></p>" for i in range(40))
    + "<input aria-label=Query></body></html>"
)

#: The baseline: pyatspi, one element at a time, what OSWorld's server reads.
PYATSPI = r"""
import sys, time, pyatspi
def walk(n, d=0):
    c = 1
    try:
        n.name; n.description; n.getRoleName(); n.getState().get_states(); n.get_attributes()
        try:
            n.queryComponent().getExtents(pyatspi.XY_SCREEN)
        except NotImplementedError: pass
        try:
            a = n.queryAction()
            for i in range(a.nActions): a.getName(i); a.getDescription(i); a.getKeyBinding(i)
        except NotImplementedError: pass
        try:
            t = n.queryText(); t.getText(0, t.characterCount)
        except NotImplementedError: pass
        try:
            v = n.queryValue(); v.currentValue; v.minimumValue; v.maximumValue; v.minimumIncrement
        except NotImplementedError: pass
    except Exception:
        return c
    if d < 50:
        for i, ch in enumerate(n):
            if i >= 1024: break
            if ch is not None: c += walk(ch, d + 1)
    return c
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    nodes = sum(walk(app, 1) for app in pyatspi.Registry.getDesktop(0) if app is not None)
    print(nodes, (time.perf_counter() - t0) * 1e3)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("-n", type=int, default=5)
    ap.add_argument("--apps", default="writer,chromium,terminal",
                    help="apps of the desktop profile to open (the lighter figure: editor,terminal)")
    args = ap.parse_args()
    env = deskgym.make(
        "blank", address=args.address, profile="desktop", screen=(1280, 720),
        capabilities=["launch_app", "files", "exec"],
    )
    try:
        env.reset(seed=0)
        env.put_file("bench.html", PAGE)
        apps = args.apps.split(",")
        for app in apps:
            env.launch_app(app, ["/home/user/bench.html"] if app == "chromium" else [])
        wanted = {
            "writer": lambda t: t.find(role="document text"),
            "chromium": lambda t: t.find(role="document web", name="Bench page"),
            "terminal": lambda t: t.find(role="terminal"),
            "editor": lambda t: t.find(role="application", name="mousepad"),
            "files": lambda t: t.find(role="application", name="pcmanfm"),
        }
        # Let every application register and lay out: the three are in the tree and it
        # stopped growing.
        last, t0 = -1, time.monotonic()
        while time.monotonic() - t0 < 120:
            t = env.observe(structured=True, timeout_ms=30000)
            ready = all(wanted[a](t) for a in apps if a in wanted)
            if ready and t.node_count == last:
                break
            last = t.node_count
            time.sleep(2)
        else:
            raise SystemExit(f"the desktop did not settle: {t.node_count} nodes")
        ms, nodes, walk, text_bytes, lines = [], [], [], [], []
        for _ in range(args.n):
            t0 = time.perf_counter()
            t = env.observe(structured=True, timeout_ms=30000)
            ms.append((time.perf_counter() - t0) * 1e3)
            nodes.append(t.node_count)
            walk.append(t.capture_ms)
            text_bytes.append(len(t.text.encode()))
            lines.append(len(t.text.splitlines()))
            assert not t.partial, t.partial_reasons
        t0 = time.perf_counter()
        x = env.observe(structured=True, osworld_xml=True, timeout_ms=30000)
        xml_ms = (time.perf_counter() - t0) * 1e3
        r = env.exec(["python3", "-c", PYATSPI, str(args.n)], timeout=600)
        assert r.ok, r.stderr
        rows = [line.split() for line in r.stdout.splitlines() if line.strip()]
        b_nodes = [int(n) for n, _ in rows]
        b_ms = [float(m) for _, m in rows]
        med = statistics.median
        print(f"deskgym Observe(tree): {med(ms):.0f} ms p50 at the client (walk {med(walk):.0f} ms), "
              f"{med(nodes):.0f} nodes, text {med(text_bytes) / 1024:.1f} KiB in {med(lines):.0f} lines "
              f"(default budget 400), with OSWorld XML {xml_ms:.0f} ms / {len(x.osworld_xml) / 1024:.0f} KiB")
        print(f"pyatspi walk (same desktop, same run): {med(b_ms):.0f} ms p50, {med(b_nodes):.0f} nodes")
        print(f"ratio: {med(b_ms) / med(ms):.1f}x faster than pyatspi")
    finally:
        env.close()


if __name__ == "__main__":
    main()
