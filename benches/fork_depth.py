"""Fork latency and fidelity against the length of the history behind it (issue 28,
item 4; issue 44, item 5).

For each depth, one env takes that many steps, is saved, and the checkpoint is forked
into N replicas; the figure is the Fork call's wall time (every replica rebuilt by
replay and compared with the checkpoint's frame), with each replica's fidelity and,
where one diverged, the step at which it left the original's path (``left_at_step``,
decision 190).

- ``tasks``: the bundled ``type-word`` task, a letter typed per step (every 8th step a
  click on the field), depths 10 / 100 / 1000.
- ``desktop`` (``blank`` task, ``launch_app`` and ``windows`` granted): the first step opens
  gnome-terminal (``launch_app terminal``, which waits for its window) and the second
  waits a second, then one key a step typing shell commands (``echo <n>`` and Enter),
  depths 10 / 100 / 300.
- ``office``: the same into LibreOffice Writer, typing prose (``line <n> of the text``).
- ``calc``: LibreOffice Calc, one key a step typing a column of formulas that depend on
  the cell above (``=A<n>+<n>`` and Enter: each Enter recalculates).
- ``impress``: LibreOffice Impress (a blank presentation: the desktop profile shows no
  template dialog, decision 202), the slide's text placeholder clicked, a second's wait
  (keys typed at once after the click race Impress's start of editing, decision 210),
  then lines of prose typed into it.
- ``browser``: the desktop profile's Chromium on a page in the home (profile
  ``desktop-fork-page``: start the server with ``--profiles`` of the file
  ``--write-profile`` writes) with a JS timer (a 400 ms debounce that shows "saved" once typing pauses), a
  CSS animation (a 300 ms flash on every input) and a focused textarea the keys go to;
  the page's title is ``value=`` and the field's value.
- ``miniwob``: MiniWoB++ ``terminal`` (its caret blinks on a 800 ms ``setInterval``):
  a click on the terminal, then one key a step typing ``ls`` and Enter (needs the
  server's ``--miniwob-dir``); its step clock off (``step_ms=0``), so the episode has
  no timeout at 300 steps.
- ``stamps``: the browser's Chromium on a page that stamps each line typed with the
  time (``HH:MM:SS``, ``Date``) its Enter came: what a chat or a form with times shows.
  A replica shows the original's stamps only where its clock replays the original's
  (decision 199).

``--write-profile PATH --bundled-clock on|off`` writes the bundled catalog with every
profile's ``clock`` on or off (off: the apps read the host's time; on is the bundled default, decision 201)
beside the benchmark's pages: ``benches/fork_clock.sh`` runs a server on each, in one run.

With ``--chain K`` (issue 44, item 4) each depth is measured twice in the same run:
unchained as above, and chained: the env saves every K steps with ``park=N`` (the
server keeps N replicas parked at the newest checkpoint, advancing them by the K steps
since the previous one in the background), and the fork right after the last save
takes them (waiting for the last advance if it is still running). The chained row's
fidelity adds ``parked=<from_parked>`` and the steps each replica's replay began at.

    python benches/fork_depth.py --address 127.0.0.1:50051 [--profiles tasks,desktop] [--chain 10]
"""

from __future__ import annotations

import argparse
import os
import re
import time

import deskgym
from deskgym.v1 import deskgym_pb2 as pb

SCREEN = (1280, 720)
#: A page whose input goes through a JS timer and a CSS animation before it settles.
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>fork page</title>
<style>
  body { font: 16px sans-serif; margin: 20px; }
  textarea { width: 600px; height: 200px; font: 16px monospace; }
  #bar { width: 600px; height: 12px; background: #ccc; }
  #bar.flash { animation: flash 300ms linear 1; }
  @keyframes flash { from { background: #36c; } to { background: #ccc; } }
</style></head>
<body>
<div id="bar"></div>
<p id="status">idle</p>
<textarea id="field" autofocus></textarea>
<script>
  const field = document.getElementById('field'), bar = document.getElementById('bar'),
        status = document.getElementById('status');
  let last = 0;
  field.addEventListener('input', () => {
    last = performance.now();
    status.textContent = 'typing';
    bar.classList.remove('flash'); void bar.offsetWidth; bar.classList.add('flash');
    document.title = 'value=' + field.value;
  });
  // The timer: once typing has paused 400 ms, the status says how much was saved.
  setInterval(() => {
    if (last && performance.now() - last > 400) {
      status.textContent = 'saved ' + field.value.length;
      last = 0;
    }
  }, 100);
  field.focus();
</script></body></html>
"""

#: A page that stamps each line typed with the time its Enter came (the page's clock,
#: ``Date``, to the second); the title is ``stamps=`` and the stamps.
STAMP_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>stamp page</title>
<style>body { font: 16px sans-serif; margin: 20px; } textarea { width: 600px; height: 120px; }
  li { font: 16px monospace; }</style></head>
<body><textarea id="field" autofocus></textarea><ol id="stamps"></ol>
<script>
  const field = document.getElementById('field'), list = document.getElementById('stamps');
  const stamps = [];
  field.addEventListener('keydown', (ev) => {
    if (ev.key !== 'Enter') return;
    const d = new Date(), two = (n) => String(n).padStart(2, '0');
    const stamp = two(d.getHours()) + ':' + two(d.getMinutes()) + ':' + two(d.getSeconds());
    stamps.push(stamp);
    const li = document.createElement('li');
    li.textContent = stamp + ' ' + field.value.split('\\n').pop();
    list.appendChild(li);
    document.title = 'stamps=' + stamps.join(',');
  });
  field.focus();
</script></body></html>
"""

#: The profiles a run uses, each with a ``-clock`` variant whose apps run on the clock
#: a fork replays and a ``-no-clock`` one whose apps read the host's time (decision
#: 199's switch, on in the bundled catalog since decision 201), for the before/after comparison.
CLOCKED = ("desktop", "desktop-fork-page", "web")


def write_profile(path: str, bundled_clock: bool | None = None) -> None:
    """A catalog with profile ``desktop-fork-page``: ``desktop`` with :data:`PAGE` and
    :data:`STAMP_PAGE` in its home (in every replica's too: a file put into one sandbox
    is not replayed), and a ``-clock`` and a ``-no-clock`` variant of each of
    :data:`CLOCKED`. With ``bundled_clock`` set, first the bundled catalog itself with
    every profile's ``clock`` so (its profiles replace the server's by name)."""
    bundled = ""
    if bundled_clock is not None:
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "server", "profiles", "catalog.toml")) as f:
            value = "true" if bundled_clock else "false"
            bundled = re.sub(r"(?m)^clock = (true|false)$", f"clock = {value}", f.read()) + "\n"
    variants = "".join(
        f'''
[profiles.{p}{suffix}]
extends = "{p}"
description = "The {p} profile, its apps on {what}."
clock = {value}
'''
        for p in CLOCKED
        for suffix, what, value in (("-clock", "the clock a fork replays", "true"),
                                    ("-no-clock", "the host's time (no replayed clock)", "false"))
    )
    with open(path, "w") as f:
        f.write(bundled)
        f.write(f'''[profiles.desktop-fork-page]
extends = "desktop"
description = "The desktop profile with the fork benchmark's pages in its home."

[[profiles.desktop-fork-page.files]]
path = "fork-page.html"
content = \'\'\'{PAGE}\'\'\'

[[profiles.desktop-fork-page.files]]
path = "stamp-page.html"
content = \'\'\'{STAMP_PAGE}\'\'\'
{variants}''')


DEPTHS = {
    "tasks": (10, 100, 1000),
    "desktop": (10, 100, 300),
    "office": (10, 100, 300),
    "calc": (10, 100, 300),
    "impress": (10, 100, 300),
    "browser": (10, 100, 300),
    "stamps": (10, 100, 300),
    # The pool's step clock is off (`step_ms=0`): on the default 100 ms a step the
    # episode times out after 100 steps ("the episode has ended" at 300).
    "miniwob": (10, 100, 300),
}


def keys(n: int, words) -> list[dict]:
    """``n`` one-key steps typing ``words(k)`` for k = 0, 1, ..., each ended by Enter."""
    out: list[dict] = []
    k = 0
    while len(out) < n:
        out += [{"verb": "type_text", "text": ch} for ch in words(k)]
        out.append({"verb": "key", "keys": "Return"})
        k += 1
    return out[:n]


def history(profile: str, depth: int) -> list[dict]:
    """The steps taken before the checkpoint."""
    if profile == "tasks":
        acts = []
        for i in range(depth):
            if i % 8 == 7:
                acts.append({"verb": "click", "x": 320, "y": 200})
            else:
                acts.append({"verb": "type_text", "text": "abcdefgh"[i % 8]})
        return acts
    if profile == "miniwob":
        # A click gives the terminal's input the keys (the page starts with none focused).
        return [{"verb": "click", "x": 75, "y": 130}] + keys(depth - 1, lambda k: "ls")
    # As an agent would: open the app, give it a moment, then type. (`measure` first
    # waits, a step at a time, until the app's window is up: see READY.)
    opened = {
        "desktop": [],
        "office": [],
        "calc": [{"verb": "click", "x": 100, "y": 240}],
        # The slide's text box (its lines are the talk's points; a line break in the
        # title grows the title's box, whose outline a replica draws elsewhere:
        # decision 210), then a second's look, as an agent looks before it types: keys
        # at once after the click race Impress's start of editing.
        "impress": [{"verb": "click", "x": 640, "y": 430}, {"verb": "wait", "ms": 1000}],
        "browser": [{"verb": "click", "x": 300, "y": 200}],
        "stamps": [{"verb": "click", "x": 300, "y": 80}],
    }[profile]
    words = {
        "desktop": lambda k: f"echo {k}",
        "office": lambda k: f"line {k} of the text ",
        "calc": lambda k: f"=A{k}+{k}" if k else "1",
        "impress": lambda k: f"point {k} of the talk ",
        "browser": lambda k: f"line {k} of the form ",
        "stamps": lambda k: f"line {k}",
    }[profile]
    return opened + keys(depth - len(opened), words)


#: The step that opens each app, and the window title that says it is up.
LAUNCH = {
    "desktop": ({"verb": "launch_app", "app": "terminal"}, ""),
    "office": ({"verb": "launch_app", "app": "writer"}, "LibreOffice Writer"),
    "calc": ({"verb": "launch_app", "app": "calc"}, "LibreOffice Calc"),
    "impress": ({"verb": "launch_app", "app": "impress"}, "LibreOffice Impress"),
    "browser": ({"verb": "launch_app", "app": "chromium", "args": ["file:///home/user/fork-page.html"]},
                "fork page"),
    "stamps": ({"verb": "launch_app", "app": "chromium", "args": ["file:///home/user/stamp-page.html"]},
               "stamp page"),
}


def open_app(c: deskgym.Client, e: str, profile: str) -> int:
    """Opens the profile's app and waits for it as an agent would, with ``wait`` steps:
    until its window is there (LibreOffice's splash is a window of its own, so
    ``launch_app`` returns before the document is up), then until the screen is the
    same two looks in a row, then one more second. The steps it took."""
    if profile not in LAUNCH:
        return 0
    launch, title = LAUNCH[profile]
    c.step(e, deskgym.to_proto(launch), encoding="png")
    steps = 1
    deadline = time.monotonic() + 90
    wait = deskgym.to_proto({"verb": "wait", "ms": 500})
    while title and not any(title in w.title for w in c.windows(e)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{profile}: no window titled {title!r}")
        c.step(e, wait, encoding="png")
        steps += 1
    # Then until two looks in a row show the same screen (the window drawn whole).
    last = ""
    while title and steps < 60:
        h = c.step(e, wait, encoding="png").observation.frame_hash
        steps += 1
        if h == last:
            break
        last = h
    c.step(e, deskgym.to_proto({"verb": "wait", "ms": 1000}), encoding="png")
    return steps + 1


def make_pool(c: deskgym.Client, profile: str) -> deskgym.Pool:
    if profile == "tasks":
        return c.create_pool("type-word", 1, screen=(640, 480), max_steps=10**6)
    if profile == "miniwob":
        return c.create_pool("miniwob/terminal", 1, max_steps=10**6, task_options={"step_ms": "0"})
    caps = ["launch_app", "windows"]
    prof = "desktop-fork-page" if profile in ("browser", "stamps") else "desktop"
    return c.create_pool("blank", 1, screen=SCREEN, profile=prof, max_steps=10**6, capabilities=caps)


def measure(c: deskgym.Client, profile: str, depth: int, n: int, chain: int = 0) -> tuple[float, list[str], float]:
    """The Fork call's seconds, each replica's fidelity (``diverged@<step>`` where one
    left the original's path), and the median milliseconds of the history's steps (what
    the clock costs a step shows there). ``depth`` steps come after the app is up (the
    steps that opened it and waited for it come first). With ``chain`` K, the env saves
    with ``park=n`` every K steps, and each replica's entry adds ``from<step>``, where
    its replay began (the checkpoint's step count: nothing replayed)."""
    pool = make_pool(c, profile)
    forked = None
    try:
        e = pool.env_ids[0]
        c.reset(e, seed=3)
        opened = open_app(c, e, profile)
        took = []
        for i, a in enumerate(history(profile, depth)):
            t = time.perf_counter()
            c.step(e, deskgym.to_proto(a), encoding="png")
            took.append(time.perf_counter() - t)
            if chain and (i + 1) % chain == 0 and i + 1 < depth:
                c.save(e, park=n)
        step_ms = sorted(took)[len(took) // 2] * 1000
        cp = c.save(e, park=n if chain else 0)
        t = time.perf_counter()
        try:
            forked = c.fork(cp, n, encoding="png")
        except deskgym.DeskgymError as err:
            # A fork past the server's replay bound (or the client's deadline) is a
            # result too, and the runs after it still count.
            return time.perf_counter() - t, [f"failed ({err.code})"], step_ms
        dt = time.perf_counter() - t
        fid = []
        for r in forked.replicas:
            name = pb.Fidelity.Name(r.fidelity).replace("FIDELITY_", "").lower()
            if r.fidelity != pb.FIDELITY_EXACT:
                name += f"@{r.path.left_at_step}"
            if chain:
                name += f" from{r.path.replayed_from_step}"
            if r.path.idle_ms:
                name += f" idle{r.path.idle_ms}ms"
            fid.append(name)
        return dt, fid, step_ms
    finally:
        if forked is not None:
            c.close_pool(forked.pool_id)
        c.close_pool(pool.pool_id)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", default=os.environ.get("DESKGYM_ADDRESS", deskgym.DEFAULT_ADDRESS))
    ap.add_argument("--profiles", default="tasks,desktop", help=f"comma-separated, of {', '.join(DEPTHS)}")
    ap.add_argument("-n", type=int, default=2, help="replicas per fork")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--depths", default="", help="comma-separated depths instead of each profile's own")
    ap.add_argument("--chain", type=int, default=0, metavar="K",
                    help="also measure each depth chained: save with park=N every K steps")
    ap.add_argument("--only-chained", action="store_true",
                    help="with --chain: the chained forks alone (the first depth's is the baseline)")
    ap.add_argument("--tag", default="", help="put before each row's profile (which build or catalog)")
    ap.add_argument("--timeout", type=float, default=600, help="the client's deadline per call, s")
    ap.add_argument("--write-profile", metavar="PATH", help="write the browser run's catalog and exit")
    ap.add_argument("--bundled-clock", choices=("on", "off"),
                    help="with --write-profile: the bundled catalog too, every profile's clock on or off")
    args = ap.parse_args()
    if args.write_profile:
        write_profile(args.write_profile, None if args.bundled_clock is None else args.bundled_clock == "on")
        return
    c = deskgym.Client(args.address, timeout=args.timeout)
    print(f"\n## Fork of {args.n} after a history (median of {args.rounds})\n")
    print("| profile | steps before the fork | checkpoints | fork | vs first depth | fidelity of the replicas "
          "| step p50 |")
    print("|---|---|---|---|---|---|")
    for profile in args.profiles.split(","):
        first: dict[int, float] = {}
        for depth in [int(d) for d in args.depths.split(",") if d] or DEPTHS[profile]:
            kinds = [args.chain] if args.chain and args.only_chained else [0, args.chain] if args.chain else [0]
            for chain in kinds:
                runs = [measure(c, profile, depth, args.n, chain) for _ in range(args.rounds)]
                ms = sorted(r[0] for r in runs)[len(runs) // 2] * 1000
                first.setdefault(chain, ms)
                fid = ", ".join("/".join(r[1]) for r in runs)
                step_ms = sorted(r[2] for r in runs)[len(runs) // 2]
                kind = f"every {chain}, park={args.n}" if chain else "one"
                print(f"| {args.tag}{profile} | {depth} | {kind} | {ms:.0f} ms | {ms / first[chain]:.2f}x | {fid} "
                      f"| {step_ms:.0f} ms |", flush=True)


if __name__ == "__main__":
    main()
