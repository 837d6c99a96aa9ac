"""ACI's session (spec §2, §5, §6): `deskgym.connect()` and its verbs on real sandboxed
desktops, `run(code)` with a namespace that persists (and what checkpoints do to it),
reattaching by id, the ephemeral form, checkpoints with their fidelity, the recording
and the video. The interpreter program itself is also run here as a local process (the
fast tier): the same file the sandbox runs."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from conftest import Server

import deskgym
from deskgym import interpreter
from deskgym.a11y import Element, Tree
from deskgym.aci import Shot
from deskgym.aci import split_id as _split_id
from deskgym.calls import EnvEvent
from deskgym.session import CapabilityRequest, _verdict
from deskgym.v1 import deskgym_pb2 as pb

# -- the interpreter program, run locally -------------------------------------------------


@pytest.fixture()
def local_interpreter(tmp_path: pathlib.Path) -> Iterator[tuple[object, str]]:
    """Asks the interpreter program as the sandbox does (one process per request), on
    a socket of this test's; the interpreter it starts is killed by its pid at the end."""
    sock = str(tmp_path / "py.sock")
    src = pathlib.Path(interpreter.__file__).read_text()

    def ask(code: str, timeout: float = 5.0) -> dict[str, object]:
        p = subprocess.run([sys.executable, "-c", src, "ask", sock], input=json.dumps({"code": code, "timeout": timeout}),
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        return dict(json.loads(p.stdout))

    yield ask, sock
    pid = ask("import os\nos.getpid()")["value_repr"]
    os.kill(int(str(pid)), signal.SIGKILL)


@pytest.mark.spec("aci:2.run")
def test_the_interpreter_keeps_its_namespace_and_answers_the_rich_result(local_interpreter: tuple[object, str]) -> None:
    ask, _ = local_interpreter
    first = ask("a = 10\nb = 20\nprint(a + b)")  # type: ignore[operator]
    assert first["output"] == "30" and first["error"] is None and first["fresh"] is True
    assert first["value_repr"] is None and first["truncated"] is False and first["duration_ms"] >= 0
    again = ask("a * b")  # type: ignore[operator]
    assert again["value_repr"] == "200" and again["fresh"] is False
    # A child process's output is caught too, in order with the code's own.
    mixed = ask("import subprocess\nprint('one', flush=True)\nsubprocess.run(['echo', 'two'])\nprint('three')")  # type: ignore[operator]
    assert mixed["output"] == "one\ntwo\nthree"


def test_the_interpreter_answers_errors_timeouts_and_bounds(local_interpreter: tuple[object, str]) -> None:
    ask, _ = local_interpreter
    err = ask("x = 1\ndef f():\n    return 1 / 0\nf()")  # type: ignore[operator]
    e = err["error"]
    assert isinstance(e, dict) and e["type"] == "ZeroDivisionError" and e["message"] == "division by zero"
    # The traceback starts in the run's code, with its lines, none of the program's own.
    assert 'File "<run-1>", line 4' in e["traceback"] and "return 1 / 0" in e["traceback"]
    assert "interpreter.py" not in e["traceback"] and "<string>" not in e["traceback"]
    syntax = ask("def f(:")  # type: ignore[operator]
    assert isinstance(syntax["error"], dict) and syntax["error"]["type"] == "SyntaxError"
    slow = ask("y = 2\nwhile True:\n    pass", timeout=0.5)  # type: ignore[operator]
    assert isinstance(slow["error"], dict) and slow["error"]["type"] == "TimeoutError"
    # What ran before the interruption stays, and the interpreter still answers.
    assert ask("(x, y)")["value_repr"] == "(1, 2)"  # type: ignore[operator]
    big = ask("print('z' * 200000)\n'v' * 20000")  # type: ignore[operator]
    assert big["truncated"] is True and len(str(big["output"])) == interpreter.MAX_OUTPUT
    assert len(str(big["value_repr"])) == interpreter.MAX_REPR


def test_the_interpreter_listens_only_for_its_user(local_interpreter: tuple[object, str]) -> None:
    ask, sock = local_interpreter
    ask("0")  # type: ignore[operator]
    assert os.stat(sock).st_mode & 0o077 == 0  # neither group nor others may connect


# -- pure client logic ---------------------------------------------------------------------


def _tree(*named: tuple[str, str]) -> Tree:
    els = tuple(Element(ref=r, role="push button", name=n) for r, n in named)
    return Tree(1, els, "", False, False, (), len(els), 0.0)


def test_a_tree_looks_up_by_ref_then_by_exact_unique_name() -> None:
    t = _tree(("e1", "Delete all"), ("e2", "Save"), ("e3", "Save"))
    assert t["e1"].name == "Delete all" and t["Delete all"].ref == "e1"
    with pytest.raises(KeyError, match="e2, e3"):
        t["Save"]
    with pytest.raises(KeyError):
        t["delete all"]  # exact names only: a near match is a guess


def test_session_ids_and_reattach_arguments_are_checked_before_any_call() -> None:
    assert _split_id("e2") == (None, "e2")
    assert _split_id("p1/e2") == ("p1", "e2")  # the first form of ids, still taken
    for bad in ("", "/e2", "p1/", "p/1/e2", "127.0.0.1:50051"):
        with pytest.raises(deskgym.DeskgymError) as e:
            _split_id(bad)
        assert e.value.code == "INVALID_ARGUMENT" and "Session.id" in e.value.message
    with pytest.raises(deskgym.DeskgymError, match="no pool options"):
        deskgym.connect("p1/e2", screen=(320, 240), address="127.0.0.1:1")


def test_a_shot_is_the_mapping_aci_names() -> None:
    o = pb.Observation(frame=b"\x89PNG", encoding=pb.IMAGE_ENCODING_PNG, width=4, height=3)
    assert dict(Shot(o)) == {"png": b"\x89PNG", "w": 4, "h": 3}


# -- real desktops ---------------------------------------------------------------------------


@pytest.fixture()
def session(exec_server: Server) -> Iterator[deskgym.Session]:
    s = deskgym.connect(address=exec_server.address, screen=(640, 480))
    yield s
    s.close()


@pytest.mark.real
@pytest.mark.spec("aci:2.connect", "aci:2.verbs", "aci:6.operator")
def test_connect_gives_a_ready_desktop_with_the_verbs_as_methods(session: deskgym.Session) -> None:
    # The in-sandbox grants the server allows, asked for by default; never the network.
    caps = set(session.capabilities or ())
    assert session.profile == "desktop" and {"exec", "files"} <= caps and "network" not in caps
    shot = session.screenshot()
    assert (shot["w"], shot["h"]) == (640, 480) and shot["png"].startswith(b"\x89PNG")
    assert isinstance(session.observe(structured=True), Tree)
    # Each verb reaches the desktop: typed text lands in a terminal's file.
    session.act({"verb": "launch_app", "app": "terminal"})
    session.click(x=320, y=240)
    session.type("echo typed > /home/user/typed.txt")
    acted = session.key("Return")
    assert isinstance(acted, deskgym.session.Acted) and len(acted.frame_hash) == 32
    assert wait_for(lambda: session.exec(["cat", "/home/user/typed.txt"]).stdout == "typed\n")
    session.scroll(x=320, y=240, dy=-300)
    with pytest.raises(deskgym.DeskgymError) as e:
        session.click("e999999")
    assert e.value.reason == "stale_element_ref"
    with pytest.raises(deskgym.DeskgymError, match="not both"):
        session.click("e1", x=1, y=2)


def wait_for(pred: object, timeout: float = 30.0) -> bool:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(0.2)
    return False


@pytest.mark.real
@pytest.mark.spec("aci:2.run", "aci:3.1.code-actions")
def test_run_keeps_a_namespace_inside_the_sandbox(session: deskgym.Session) -> None:
    r = session.run("a = 10\nb = 20\nprint(a + b)")
    assert r.output == "30" and r.ok and r.fresh and r.value_repr is None and r.duration_ms >= 0
    again = session.run("import os\nprint(os.getcwd(), os.getuid())\na")
    assert again.value_repr == "10" and not again.fresh
    # It runs in the sandbox, as its user, in its home; what it writes the desktop has.
    assert again.output == "/home/user 1000"
    session.run("open('/home/user/from_run.txt', 'w').write('hi')")
    assert session.get_file("/home/user/from_run.txt") == b"hi"
    bad = session.run("undefined_name")
    assert bad.error is not None and bad.error.type == "NameError" and "undefined_name" in bad.error.message
    slow = session.run("while True: pass", timeout=0.5)
    assert slow.error is not None and slow.error.type == "TimeoutError"
    assert session.run("a + 1").value_repr == "11"
    # Code that ends the interpreter itself is told apart from an error it raised.
    with pytest.raises(deskgym.DeskgymError) as e:
        session.run("import os\nos._exit(3)")
    assert e.value.code == "ABORTED" and "namespace is gone" in e.value.message
    assert session.run("'a' in dir()").value_repr == "False" and session.run("0").fresh is False
    for code, msg in ((b"x", "expected a str"), ("1", "not a positive")):
        with pytest.raises(deskgym.DeskgymError, match=msg):
            session.run(code, timeout=0 if code == "1" else 1)  # type: ignore[arg-type]


@pytest.mark.real
@pytest.mark.spec("aci:2.run-gated")
def test_run_needs_the_exec_grant(exec_server: Server) -> None:
    with deskgym.ephemeral(address=exec_server.address, screen=(320, 240), capabilities=["files"]) as s:
        with pytest.raises(deskgym.DeskgymError) as e:
            s.run("1")
        assert e.value.code == "PERMISSION_DENIED"


@pytest.mark.real
@pytest.mark.spec("aci:5.checkpoints", "aci:2.checkpoints", "aci:5.snapshot-kind", "aci:6.env")
def test_save_restore_fork_over_the_desktop_and_what_they_do_to_the_namespace(session: deskgym.Session) -> None:
    session.run("kept = 'before'")
    session.act({"verb": "launch_app", "app": "terminal"})
    time.sleep(1)
    session.type("hello")
    cp = session.save()
    assert cp.snapshot_kind == session.snapshot_kind == "replay"
    # run() is not an action: the checkpoint's replay log holds the two actions only.
    assert cp.step_index == 2
    session.key("ctrl+u")
    back = session.restore(cp)
    assert back.fidelity == "exact" and back.frame_hash == cp.frame_hash == back.expected_hash
    # The restore replayed the actions on a fresh session: the interpreter is new.
    after = session.run("kept")
    assert after.fresh and after.error is not None and after.error.type == "NameError"
    kids = session.fork(cp, n=2)
    try:
        assert [k.fidelity for k in kids] == ["exact", "exact"]
        assert len({k.env_id for k in kids} | {session.env_id}) == 3
        assert all(k.screenshot()["w"] == 640 for k in kids)
        # Each replica is a desktop of its own, its interpreter too.
        kids[0].run("mine = 0")
        r = kids[1].run("mine")
        assert r.fresh and r.error is not None and r.error.type == "NameError"
    finally:
        for k in kids:
            k.close()
    # The last replica closed their pool; the source session lives on.
    with pytest.raises(deskgym.DeskgymError) as e:
        kids[0].client.screenshot(kids[0].env_id)
    assert e.value.code == "NOT_FOUND"
    assert session.screenshot()["w"] == 640


@pytest.mark.real
@pytest.mark.spec("aci:2.reattach", "aci:6.lifecycles")
def test_a_session_reattaches_by_id_and_the_ephemeral_form_closes(exec_server: Server) -> None:
    s = deskgym.connect(address=exec_server.address, screen=(320, 240), capabilities=["exec"])
    s.run("shared = 42")
    pool_id = s.client.get_env(s.env_id).pool_id
    sid = s.detach()  # the first process goes; the desktop stays for its lease
    assert not s.client_open() and sid == s.env_id
    again = deskgym.connect(sid, address=exec_server.address)
    try:
        assert again.id == sid
        # The server tells the reattached session what its desktop is.
        assert (again.profile, again.capabilities, again.snapshot_kind) == ("desktop", ("exec",), "replay")
        assert again.record is None
        # The same desktop: its interpreter still has the namespace.
        r = again.run("shared")
        assert r.value_repr == "42" and not r.fresh
        # The first form of ids reattaches too; a wrong pool in it does not.
        with pytest.raises(deskgym.DeskgymError) as e:
            deskgym.connect(f"p{'0' * 32}/{sid}", address=exec_server.address, client=again.client)
        assert e.value.code == "NOT_FOUND"
        old_form = deskgym.connect(f"{pool_id}/{sid}", address=exec_server.address, client=again.client)
        assert old_form.env_id == sid and old_form.profile == "desktop"
        # Past the first client's lease, the reattached one keeps it alive.
        time.sleep(deskgym.client.DEFAULT_LEASE_TTL_S * 1.5)
        assert again.run("shared").value_repr == "42"
    finally:
        again.close()
    for gone in (sid, f"{pool_id}/{sid}", "e" + "0" * 32, "p" + "0" * 32 + "/" + sid):
        with pytest.raises(deskgym.DeskgymError) as e:
            deskgym.connect(gone, address=exec_server.address)
        assert e.value.code == "NOT_FOUND"
    with deskgym.ephemeral(address=exec_server.address, screen=(320, 240)) as eph:
        env_id, client = eph.env_id, deskgym.Client(exec_server.address)
    try:
        with pytest.raises(deskgym.DeskgymError) as e:
            client.screenshot(env_id)
        assert e.value.code == "NOT_FOUND"
    finally:
        client.close()


@pytest.mark.real
@pytest.mark.spec("aci:2.replay", "aci:2.video")
def test_the_recording_saves_as_a_bundle_and_the_video_attaches(exec_server: Server, tmp_path: pathlib.Path) -> None:
    datasets = pytest.importorskip("deskgym.datasets")
    s = deskgym.connect(address=exec_server.address, screen=(320, 240), record="session-replay")
    frame = next(iter(s.video(fps=5)))
    assert frame.jpeg[:2] == b"\xff\xd8"
    s.click(x=10, y=10)
    s.key("a")
    s.close()
    path = s.replay.save(tmp_path / "run.skn")
    summary = datasets.inspect(path)
    assert summary["status"] == "closed" and summary["steps"] == 2 and summary["run"] == "session-replay"
    assert datasets.open(path)["events"].num_rows > 0


@pytest.mark.real
@pytest.mark.spec("aci:2.events", "aci:2.replay")
def test_events_stream_live_and_are_what_the_recording_holds(exec_server: Server, tmp_path: pathlib.Path) -> None:
    datasets = pytest.importorskip("deskgym.datasets")
    s = deskgym.connect(address=exec_server.address, screen=(320, 240), record="session-events")
    with s.events() as events:
        clicked = s.click(x=10, y=10)
        s.run("a = 1")
        seen: list[deskgym.EnvEvent] = []
        for e in events:  # live: the desktop is still open
            seen.append(e)
            if e.kind == "exec":
                break
    kinds = [e.kind for e in seen]
    assert kinds == ["action", "ack", "exec"], kinds
    action, ack, ran = (e.payload for e in seen)
    assert action["action"] == {"verb": "click", "x": 10, "y": 10, "button": "left", "count": 1}
    assert ack["ok"] and ack["frame_hash"] == clicked.frame_hash and ack["step_index"] == action["step_index"] == 1
    # The log keeps each argument quoted, as the server's messages do (no control bytes).
    assert ran["argv"][0] == '"python3"' and ran["exit_code"] == 0
    assert [e.seq for e in seen] == list(range(seen[0].seq, seen[0].seq + 3)) and not any(e.lost for e in seen)
    s.close()
    # The bundle holds the same records, in the same order, at the same numbers: the
    # env's n-th event is its n-th row.
    path = s.replay.save(tmp_path / "run.skn")
    rows = sorted((r for r in datasets.open(path)["events"].to_pylist() if r["env_id"] == s.env_id),
                  key=lambda r: r["seq"])
    recorded = [(r["kind"], json.loads(r["payload"])) for r in rows[seen[0].seq - 1:seen[-1].seq]]
    assert recorded == [(e.kind, e.payload) for e in seen]
    assert rows[-1]["kind"] == "env_closed"


@pytest.mark.real
@pytest.mark.spec("aci:2.reattach")
def test_another_principals_session_is_not_found(tmp_path: pathlib.Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("alice: alice-token\nbob: bob-token\n")
    srv = Server("--token-file", str(tokens), "--idle-timeout-s", "0")
    try:
        with deskgym.ephemeral(address=srv.address, token="alice-token", profile="tasks", screen=(320, 240)) as mine:
            with pytest.raises(deskgym.DeskgymError) as e:
                deskgym.connect(mine.id, address=srv.address, token="bob-token")
            # As for an id that never was: nothing says the session exists.
            assert e.value.code == "NOT_FOUND"
            theirs = deskgym.connect(mine.id, address=srv.address, token="alice-token")
            assert theirs.screenshot()["w"] == 320
            theirs.detach()  # leaves the desktop to `mine`, which closes it
    finally:
        srv.stop()


def test_a_controllers_verdict_and_a_capability_request_read_as_the_server_sends_them() -> None:
    # True / False, or hosts: a narrowed net.egress grant; anything else is a bug in the callback.
    assert _verdict(True) == (True, ()) and _verdict(False) == (False, ())
    assert _verdict("pypi.org") == (True, ("pypi.org",))
    assert _verdict(["a.test", ".b.test"]) == (True, ("a.test", ".b.test"))
    for bad in ([], None, 1, [1]):
        with pytest.raises(TypeError):
            _verdict(bad)  # type: ignore[arg-type]
    payload = {"token": "c7", "capability": "net.egress", "scope": ["a.test"], "reason": '"fetch"',
               "action": "Unlock", "principal": "local", "timeout_ms": 3000}
    req = CapabilityRequest.from_event(EnvEvent(1, 0, "capability_required", "e1", payload, 0))
    assert req == CapabilityRequest("e1", "c7", "net.egress", ("a.test",), "fetch", "Unlock", 3000)
    listed = pb.CapabilityRequest(token="c7", capability="exec", reason="Exec needs exec", action="Exec", timeout_ms=5)
    assert CapabilityRequest.from_proto("e1", listed).reason == "Exec needs exec"
