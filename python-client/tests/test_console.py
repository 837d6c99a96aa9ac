"""The web console in real Chromium (Playwright on Debian's Chromium, no browser
download) against a real server and real desktops: the fleet page lists a running
`make_vec`, the env page shows the frame a step produced, a take-over through the page
drives the env and is recorded as human while the agent waits, other principals and
other sites get nothing, and live views share the server's screencast slots."""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import duckdb
import numpy as np
import pytest
from conftest import Server, server_binary
from PIL import Image

import deskgym
from deskgym.v1 import deskgym_pb2 as pb
from deskgym.errors import DeskgymError

playwright_api = pytest.importorskip("playwright.sync_api", reason="the console tests drive Chromium with Playwright "
                                     "(pip install playwright; scripts/test.sh installs it)")

REPO = pathlib.Path(__file__).resolve().parents[2]
SHOTS = REPO / "docs" / "img"


class ConsoleServer(Server):
    """A server with the console on a free loopback port."""

    def __init__(self, *args: str) -> None:
        super().__init__("--console-listen", "127.0.0.1:0", "--idle-timeout-s", "0", *args)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "console on" in line, line
        self.url = line.strip().rsplit(" ", 1)[-1].rstrip("/")


def chromium() -> str:
    path = shutil.which("chromium")
    if path is None:
        pytest.fail("Debian's Chromium is missing: apt-get install chromium")
    return path


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    data = tmp_path_factory.mktemp("console-data")
    s = ConsoleServer("--data-dir", str(data), "--max-screencasts", "3")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        # Root in a container: Chromium's own sandbox needs user namespaces it may not get.
        b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        yield b
        b.close()


def http(url: str, method: str = "GET", body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json",
                                                                         **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            return r.status, json.loads(raw) if r.headers.get_content_type() == "application/json" else raw
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def button_center(client: deskgym.Client, env: str, label: str) -> tuple[int, int]:
    tree = client.observe(env, tree=pb.TreeRequest(enabled=True)).tree
    for e in tree.elements:
        if e.role == "push button" and e.name == label:
            b = e.bounds
            return b.x + b.width // 2, b.y + b.height // 2
    raise AssertionError(f"no button {label!r} in {[(e.role, e.name) for e in tree.elements]}")


def wait_for(check: Any, what: str, timeout: float = 20.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = check()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def one_env(s: ConsoleServer, task: str, screen: tuple[int, int], seed: int) -> Iterator[tuple[deskgym.Client, str, str]]:
    """A client, one reset env of a new pool (closed after), and its instruction."""
    client = deskgym.Client(s.address)
    pool = client.create_pool(task, 1, screen=screen)
    try:
        env = pool.env_ids[0]
        yield client, env, client.reset(env, seed=seed).info.instruction
    finally:
        client.release(pool)


def shot(page: Any, name: str) -> None:
    """Screenshots for docs/img and the README, taken as the tests run."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / name))


def test_fleet_page_lists_a_running_make_vec_with_live_thumbnails(console: ConsoleServer, browser: Any) -> None:
    venv = deskgym.make_vec("click-button", 2, address=console.address, screen=(320, 240), seed=0)
    try:
        venv.reset(seed=0)
        venv.step([{"verb": "noop"}] * 2)
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(console.url + "/")
        page.wait_for_selector("section[data-pool]")
        pool_ids = page.eval_on_selector_all("section[data-pool]", "ns => ns.map(n => n.dataset.pool)")
        assert venv._pool.pool_id in pool_ids
        shown = page.eval_on_selector_all("a.envcard", "ns => ns.map(n => n.dataset.env)")
        assert set(venv.env_ids) <= set(shown)
        # Each env's card: its step count and instruction, and a thumbnail of its screen.
        card = page.locator(f'a.envcard[data-env="{venv.env_ids[0]}"]')
        page.wait_for_function(
            "id => { const i = document.querySelector(`img[data-env=\"${id}\"]`); return i && i.naturalWidth > 0 }",
            arg=venv.env_ids[0])
        assert "step 1" in card.inner_text() and "Click" in card.inner_text()
        size = page.eval_on_selector(f'img[data-env="{venv.env_ids[0]}"]', "i => [i.naturalWidth, i.naturalHeight]")
        assert size == [320, 240]
        shot(page, "console-fleet.png")
        page.close()
    finally:
        venv.close()


def test_env_page_shows_the_frame_a_step_produced(console: ConsoleServer, browser: Any) -> None:
    for codec in ("h264", "jpeg"):
        shows_the_step_frame(console, browser, codec)


def shows_the_step_frame(console: ConsoleServer, browser: Any, codec: str) -> None:
    with one_env(console, "click-button", (640, 480), seed=4) as (client, env, instruction):
        label = instruction.split('"')[1]
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{console.url}/env/{env}?codec={codec}")
        page.wait_for_function("() => window.deskgymLive && window.deskgymLive.frames > 0")
        assert page.evaluate("() => window.deskgymLive.codec").startswith("avc1" if codec == "h264" else "jpeg")
        x, y = button_center(client, env, label)
        r = client.step(env, deskgym.to_proto({"verb": "click", "x": x, "y": y}), encoding="png")
        want = r.observation.frame_hash
        page.wait_for_function("h => window.deskgymLive.hash === h", arg=want)
        # The canvas shows the step's frame: its pixels against the step's own PNG.
        data = page.evaluate("""() => {
            const c = document.getElementById('screen');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            return [c.width, c.height, Array.from(d)];
        }""")
        w, h, rgba = data
        shown = np.array(rgba, dtype=np.uint8).reshape(h, w, 4)[:, :, :3].astype(float)
        png = np.asarray(Image.open(io.BytesIO(r.observation.frame)).convert("RGB")).astype(float)
        assert (w, h) == (640, 480)
        assert np.abs(shown - png).mean() < 4, f"the live view ({codec}) differs from the step's frame"
        # The action log has the step, drawn as the agent's.
        page.wait_for_selector("#log li")
        assert f"click ({x}, {y})" in page.inner_text("#log")
        assert "reward 1" in page.inner_text("#log")
        if codec == "h264":
            shot(page, "console-env.png")
        page.close()


def test_take_over_drives_the_env_as_human_while_the_agent_waits(console: ConsoleServer, browser: Any) -> None:
    client = deskgym.Client(console.address)
    run = f"console-{uuid.uuid4().hex[:8]}"
    pool = client.create_pool("click-button", 2, screen=(640, 480), record=run)
    env, other = pool.env_ids
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    try:
        label = client.reset(env, seed=11).info.instruction.split('"')[1]
        client.reset(other, seed=11)
        x, y = button_center(client, env, label)
        page.goto(f"{console.url}/env/{env}")
        page.wait_for_function("() => window.deskgymLive && window.deskgymLive.frames > 0")
        page.click("#takeover")
        page.wait_for_selector("#release:not([hidden])")
        # The agent waits: its calls answer human_control; a batch reports that env only.
        with pytest.raises(DeskgymError) as held:
            client.step(env, deskgym.to_proto({"verb": "noop"}))
        assert held.value.code == "FAILED_PRECONDITION" and held.value.message.startswith("human_control")
        batch = client.step_batch([pb.StepRequest(env_id=e, action=deskgym.to_proto({"verb": "noop"}))
                                   for e in (env, other)])
        codes = [r.code for r in batch.results]
        assert codes == [9, 0], codes  # FAILED_PRECONDITION for the held env only
        assert batch.results[0].message.startswith("human_control")
        # Watching is still allowed while a person drives.
        assert next(client.watch(env, fps=5)).width == 640
        # The person clicks the button on the page's screen (screen pixels -> canvas pixels).
        box = page.locator("#screen").bounding_box()
        assert box is not None
        page.mouse.click(box["x"] + x * box["width"] / 640, box["y"] + y * box["height"] / 480)
        page.wait_for_function("() => document.querySelector('#log').innerText.includes('[human] click')")
        assert "reward 1" in page.inner_text("#log")
        shot(page, "console-takeover.png")
        page.click("#release")
        page.wait_for_selector("#takeover:not([hidden])")
        # Given back as the person left it: solved, so the agent's next step is refused
        # for the episode's end, not for human control.
        with pytest.raises(DeskgymError) as ended:
            client.step(env, deskgym.to_proto({"verb": "noop"}))
        assert ended.value.code == "FAILED_PRECONDITION" and "human_control" not in ended.value.message
        client.reset(env, seed=12)
    finally:
        page.close()
        client.release(pool)
    # The recording has the person's step as human, the agent's as agent, and the hold.
    path = pathlib.Path(console_data(console)) / f"{run}.skn"
    steps = duckdb.sql(f"select env_id, actor, action_verb, reward from '{path}/steps/*.parquet' "
                       "where error_code is null order by t_start").fetchall()
    assert (env, "human", "click", 1.0) in steps
    assert (other, "agent", "noop", 0.0) in steps
    kinds = [k for (k,) in duckdb.sql(f"select kind from '{path}/events/*.parquet' where env_id = '{env}' "
                                       "order by time").fetchall()]
    assert "takeover" in kinds and "release" in kinds and kinds.index("takeover") < kinds.index("release")


def console_data(s: ConsoleServer) -> str:
    args = s.proc.args
    assert isinstance(args, list)
    return str(args[args.index("--data-dir") + 1])


def test_another_principal_sees_none_of_your_pools(tmp_path: pathlib.Path, browser: Any) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice: alice-secret\nbob: bob-secret\n")
    s = ConsoleServer("--token-file", str(tokens))
    try:
        alice = deskgym.Client(s.address, token="alice-secret")
        pool = alice.create_pool("click-target", 1, screen=(320, 240))
        env = pool.env_ids[0]
        alice.reset(env, seed=1)
        # No token: the login page; bob logs in through it and sees no pools.
        page = browser.new_page()
        page.goto(s.url + "/")
        page.wait_for_url("**/login")
        page.fill("#token", "bob-secret")
        page.click("button[type=submit]")
        page.wait_for_selector("#empty:not([hidden])")
        assert page.locator("section[data-pool]").count() == 0
        assert "as bob" in page.inner_text("#who")
        # Bob's cookie opens none of alice's env's views or actions.
        cookies = {c["name"]: c["value"] for c in page.context.cookies()}
        bob = {"cookie": f"deskgym_console={cookies['deskgym_console']}"}
        for path in ("", "/thumb.jpg", "/live", "/feed"):
            code, body = http(f"{s.url}/api/envs/{env}{path}", headers=bob)
            assert code == 404, (path, code)
        code, _ = http(f"{s.url}/api/envs/{env}/takeover", "POST", {}, {**bob, "x-deskgym-console": "1"})
        assert code == 404
        # A wrong token is refused (at login too, and one a cookie cannot hold is not
        # kept in one), and alice sees her pool.
        assert http(f"{s.url}/api/fleet", headers={"authorization": "Bearer nope"})[0] == 401
        assert http(f"{s.url}/api/login", "POST", {"token": "nope"}, {"x-deskgym-console": "1"})[0] == 401
        assert http(f"{s.url}/api/login", "POST", {"token": "a;b"}, {"x-deskgym-console": "1"})[0] == 400
        code, fleet = http(f"{s.url}/api/fleet", headers={"authorization": "Bearer alice-secret"})
        assert code == 200 and [p["id"] for p in fleet["pools"]] == [pool.pool_id]
        page.close()
        alice.release(pool)
    finally:
        s.stop()


def test_other_sites_cannot_act_or_read(console: ConsoleServer) -> None:
    with one_env(console, "click-target", (320, 240), seed=1) as (_, env, _):
        # A cross-site form or fetch cannot send the console's header: refused.
        code, body = http(f"{console.url}/api/envs/{env}/takeover", "POST", {})
        assert code == 403 and "x-deskgym-console" in body["error"]
        code, body = http(f"{console.url}/api/envs/{env}/act", "POST", {"verb": "click", "x": 1, "y": 1},
                          {"x-deskgym-console": "1"})
        assert code == 409 and "take env" in body["error"]
        # A DNS-rebinding page reaches the port under its own host name: refused.
        code, body = http(f"{console.url}/api/fleet", headers={"host": "evil.example:80"})
        assert code == 403 and "loopback" in body["error"]
        # Bad live-view knobs are clear errors.
        for query, word in (("codec=vp9", "codec"), ("fps=0", "fps"), ("fps=NaN", "fps")):
            code, body = http(f"{console.url}/api/envs/{env}/live?{query}")
            assert code == 400 and word in body["error"], (query, code, body)
        # Bad actions are clear errors.
        http(f"{console.url}/api/envs/{env}/takeover", "POST", {}, {"x-deskgym-console": "1"})
        code, body = http(f"{console.url}/api/envs/{env}/act", "POST", {"verb": "fly"}, {"x-deskgym-console": "1"})
        assert code == 400 and "verbs:" in body["error"]
        code, body = http(f"{console.url}/api/envs/{env}/act", "POST", {"verb": "click", "x": 5000, "y": 1},
                          {"x-deskgym-console": "1"})
        assert code == 400 and "5000" in body["error"]
        http(f"{console.url}/api/envs/{env}/release", "POST", {}, {"x-deskgym-console": "1"})


def rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_live_views_share_the_screencast_slots_and_a_stalled_one_costs_nothing(console: ConsoleServer) -> None:
    with one_env(console, "click-target", (640, 480), seed=1) as (client, env, _):
        host, port = console.url.removeprefix("http://").split(":")
        # A viewer that never reads after its request: the server drops its frames.
        stalled = socket.create_connection((host, int(port)))
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.sendall(f"GET /api/envs/{env}/live?fps=30 HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        grpc_viewers = [client.watch(env, fps=5) for _ in range(2)]
        for v in grpc_viewers:
            next(v)
        # Three slots: the stalled console view and two gRPC viewers hold them all.
        code, body = http(f"{console.url}/api/envs/{env}/live")
        assert code == 429 and "max_screencasts=3" in body["error"]
        before = rss_kib(console.proc.pid)
        for i in range(60):
            client.reset(env, seed=100 + i)  # every reset paints a new screen
        grown = rss_kib(console.proc.pid) - before
        assert grown < 64 * 1024, f"the server grew {grown} KiB with a stalled viewer"
        stalled.close()
        for v in grpc_viewers:
            v.close()
        # Slots free as viewers leave.
        wait_for(lambda: http(f"{console.url}/api/envs/{env}/thumb.jpg")[0] == 200, "the env to answer")

        def opened() -> bool:
            req = urllib.request.Request(f"{console.url}/api/envs/{env}/live?fps=1")
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status == 200 and len(r.read(4)) == 4
            except urllib.error.HTTPError:
                return False
        wait_for(opened, "a live view once the slots were free")


def test_replay_page_scrubbed_to_step_k_shows_frame_k(console: ConsoleServer, browser: Any) -> None:
    """A recorded episode replayed in the page: scrubbing to position k shows the frame
    the env showed before step k+1 (pixel for pixel the recorded PNG), that step's
    action, and two episodes side by side follow one slider."""
    import pyarrow.parquet as pq
    from deskgym.a11y import tree_request

    client = deskgym.Client(console.address)
    run = f"replay-{uuid.uuid4().hex[:8]}"
    pool = client.create_pool("type-word", 2, screen=(320, 240), record=run, max_steps=100)
    try:
        for env in pool.env_ids:
            first = client.reset(env, seed=3, tree=tree_request())
            (field,) = [e for e in first.observation.tree.elements if e.role == "text"]
            client.step(env, deskgym.to_proto({"verb": "click", "ref": field.ref}))
            for ch in "abcdef":  # every step changes the screen
                client.step(env, deskgym.to_proto({"verb": "type_text", "text": ch}))
    finally:
        client.release(pool)
    bundle = pathlib.Path(console_data(console)) / f"{run}.skn"
    steps = pq.read_table(bundle / "steps").to_pylist()
    env_a, env_b = pool.env_ids
    mine = sorted((s for s in steps if s["env_id"] == env_a), key=lambda s: s["step_index"])
    episode = mine[0]["episode_id"]
    other = next(s["episode_id"] for s in steps if s["env_id"] == env_b)
    frames = {f["frame_hash"]: f["image"]["bytes"] for f in pq.read_table(bundle / "frames").to_pylist()}

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    # Runs -> episodes -> the episode, as a person clicks through.
    page.goto(console.url + "/replay")
    page.click(f'tr[data-run="{run}"] a')
    page.click(f'tr[data-episode="{episode}"] a')
    page.wait_for_function("() => window.deskgymReplay && window.deskgymReplay.shown === 0")
    k = 4
    for _ in range(k):
        page.keyboard.press("ArrowRight")
    page.wait_for_function("k => window.deskgymReplay.shown === k", arg=k)
    shown = page.get_attribute(".pane img", "data-hash")
    assert shown == mine[k]["frame_hash_before"]
    pixels = page.evaluate("""() => {
        const i = document.querySelector('.pane img');
        const c = document.createElement('canvas');
        c.width = i.naturalWidth; c.height = i.naturalHeight;
        const g = c.getContext('2d'); g.drawImage(i, 0, 0);
        return Array.from(g.getImageData(0, 0, c.width, c.height).data);
    }""")
    want = np.asarray(Image.open(io.BytesIO(frames[shown])).convert("RGB"))
    got = np.array(pixels, dtype=np.uint8).reshape(want.shape[0], want.shape[1], 4)[:, :, :3]
    assert np.array_equal(got, want), "the replayed frame differs from the recorded one"
    # Position k carries step k+1: the click was step 1, so that step typed letter k.
    assert f'"text":"{"abcdef"[k - 1]}"' in page.inner_text(".pane pre").replace(" ", "")
    # The last position is the screen after the last step; End goes there.
    page.keyboard.press("End")
    page.wait_for_function("n => window.deskgymReplay.shown === n", arg=len(mine))
    assert page.get_attribute(".pane img", "data-hash") == mine[-1]["frame_hash_after"]
    # Two episodes side by side, one slider.
    page.goto(f"{console.url}/replay?run={run}&episode={episode}&b={run}/{other}&k=3")
    page.wait_for_function("() => window.deskgymReplay.shown === 3")
    assert page.locator(".pane").count() == 2
    shot(page, "console-replay.png")
    # The same view with no server and no X stack: the bundle alone.
    viewer = subprocess.Popen([str(pathlib.Path(server_binary()).with_name("deskgym-datasets")), "view", str(bundle),
                               "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    try:
        assert viewer.stdout is not None
        at = viewer.stdout.readline().split()[-1]
        page.goto(f"{at}&episode={episode}&k={k}")
        page.wait_for_function("k => window.deskgymReplay.shown === k", arg=k)
        assert page.get_attribute(".pane img", "data-hash") == mine[k]["frame_hash_before"]
        base = at.split("/replay")[0]
        assert http(f"{base}/api/runs", headers={"host": "evil.example"})[0] == 403
        assert http(f"{base}/api/runs/{run}/frames/{'0' * 32}")[0] == 404
    finally:
        viewer.kill()
        viewer.wait()
    page.close()
    # Another run name, or a frame that is not there, is a clear error.
    assert http(f"{console.url}/api/runs/nope-{uuid.uuid4().hex[:6]}/episodes")[0] == 404
    assert http(f"{console.url}/api/runs/{run}/frames/{'0' * 32}")[0] == 404
    assert http(f"{console.url}/api/runs/{run}/frames/..%2F..%2Fetc")[0] == 400


def test_demonstrations_recorded_in_the_page_solve_replay_and_export(
        console: ConsoleServer, browser: Any, tmp_path: pathlib.Path) -> None:
    """A person records five demonstrations of a bundled task through the pages: each
    solves it (reward 1, actor human in the bundle), the run replays to the same frame
    hashes on a fresh env, and exports to LeRobot like any run."""
    import pyarrow.parquet as pq

    client = deskgym.Client(console.address)
    act_headers = {"x-deskgym-console": "1"}
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(console.url + "/")
    page.wait_for_selector("#demo-task option[value='click-button']", state="attached")
    page.select_option("#demo-task", "click-button")
    page.click("#demo button[type=submit]")
    page.wait_for_url("**/env/*")
    env = page.url.rsplit("/", 1)[-1]
    page.wait_for_selector("#finish:not([hidden])")
    # The demo is the person's from the start: an agent's call on it waits.
    with pytest.raises(DeskgymError) as held:
        client.step(env, deskgym.to_proto({"verb": "noop"}))
    assert held.value.message.startswith("human_control")

    def solve(episode: int) -> None:
        page.wait_for_function(f"() => document.querySelector('#status').innerText.startsWith('episode {episode}')")
        label = page.inner_text("#instruction").split('"')[1]
        # Where the button is: the tree, read while the env is briefly given back.
        assert http(f"{console.url}/api/envs/{env}/release", "POST", {}, act_headers)[0] == 200
        x, y = button_center(client, env, label)
        assert http(f"{console.url}/api/envs/{env}/takeover", "POST", {}, act_headers)[0] == 200
        page.wait_for_selector("#finish:not([hidden])")
        box = page.locator("#screen").bounding_box()
        assert box is not None
        w, h = page.evaluate("() => [document.getElementById('screen').width, document.getElementById('screen').height]")
        page.mouse.click(box["x"] + (x + 0.5) * box["width"] / w, box["y"] + (y + 0.5) * box["height"] / h)
        page.wait_for_function(f"() => document.querySelector('#status').innerText.includes('episode {episode} · step 1 · done')")

    solve(1)
    for episode in range(2, 6):
        page.click("#next-episode")
        solve(episode)
    page.click("#finish")
    page.wait_for_url("**/replay?run=*")
    run = page.url.split("run=", 1)[1]
    page.wait_for_selector("tr[data-episode]")
    assert page.locator("tr[data-episode]").count() == 5
    shot(page, "console-demos.png")
    page.close()

    bundle = pathlib.Path(console_data(console)) / f"{run}.skn"
    episodes = pq.read_table(bundle / "episodes").to_pylist()
    steps = pq.read_table(bundle / "steps").to_pylist()
    assert [(e["success"], e["episode_return"]) for e in episodes] == [(True, 1.0)] * 5
    assert {s["actor"] for s in steps} == {"human"}
    # Each demonstration replays to its recorded frames on a fresh env.
    pool = client.create_pool("click-button", 1, screen=(1280, 720))
    try:
        for e in episodes:
            mine = sorted((s for s in steps if s["episode_id"] == e["episode_id"]), key=lambda s: s["step_index"])
            r = client.reset(pool.env_ids[0], seed=e["seed"])
            assert r.observation.frame_hash == mine[0]["frame_hash_before"]
            for s in mine:
                action = {k: v for k, v in json.loads(s["action_json"]).items()}
                out = client.step(pool.env_ids[0], deskgym.to_proto(action))
                assert out.observation.frame_hash == s["frame_hash_after"]
            assert out.reward == 1.0 and out.terminated
    finally:
        client.release(pool)
    out_dir = deskgym.datasets.export(bundle, tmp_path / "lerobot", fmt="lerobot")
    info = json.loads((out_dir / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 5


def test_env_page_lists_the_tree_and_outlines_a_hovered_element(console: ConsoleServer, browser: Any) -> None:
    with one_env(console, "click-button", (640, 480), seed=5) as (client, env, instruction):
        label = instruction.split('"')[1]
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{console.url}/env/{env}")
        page.wait_for_function("() => window.deskgymLive && window.deskgymLive.frames > 0")
        # The page shows the tree the agent reads (it never reads one in the agent's place).
        client.step(env, deskgym.to_proto({"verb": "noop"}), tree=pb.TreeRequest(enabled=True))
        item = page.locator("#tree li", has_text=f'push button "{label}"')
        item.wait_for()
        assert "as last read" in (page.text_content("#tree-note") or "")
        tree = client.observe(env, tree=pb.TreeRequest(enabled=True)).tree
        b = next(e.bounds for e in tree.elements if e.name == label)
        item.hover()
        # The outline is drawn on the overlay along the element's bounds.
        page.wait_for_function("""([x, y]) => {
            const o = document.getElementById('overlay');
            const p = o.getContext('2d').getImageData(x, y, 1, 1).data;
            return p[3] > 0 && p[0] > 150 && p[2] > 50;
        }""", arg=[b.x + 1, b.y + b.height // 2])
        # Taking the env over reads its tree, and the person's actions bring theirs.
        before = http(f"{console.url}/api/envs/{env}/tree")[1]["tree"]["revision"]
        # (The feed shows the take-over before its answer, which carries the read.)
        with page.expect_response(lambda r: r.url.endswith("/takeover")):
            page.click("#takeover")
        taken = http(f"{console.url}/api/envs/{env}/tree")[1]["tree"]["revision"]
        assert taken > before
        page.click("#release")
        page.close()
