"""``Session.unlock`` against the real server (issue 43 item 6): a power held for a
``with`` block on one desktop, released however the block ends, refused outside the
operator's policy, and every request, decision and release in the recording."""

from __future__ import annotations

import pathlib
import threading
from collections.abc import Iterator

import pytest

import deskgym
from conftest import Server


@pytest.mark.real
@pytest.mark.spec("aci:2.unlock")
def test_unlock_holds_a_power_for_the_block_and_the_recording_shows_it(
    unlock_server: Server, tmp_path: pathlib.Path
) -> None:
    datasets = pytest.importorskip("deskgym.datasets")
    s = deskgym.connect(address=unlock_server.address, screen=(320, 240), capabilities=[], record="unlock-run")
    with pytest.raises(deskgym.DeskgymError) as e:
        s.list_directory("/home/user")
    assert e.value.code == "PERMISSION_DENIED" and "Unlock" in str(e.value)
    with pytest.raises(RuntimeError, match="inside"):
        with s.unlock("files", reason="read the home") as grant:
            assert grant.capability == "files" and grant.grant_id
            s.list_directory("/home/user")
            raise RuntimeError("inside the block")
    # Released on the way out, even by an exception.
    with pytest.raises(deskgym.DeskgymError) as e:
        s.list_directory("/home/user")
    assert e.value.code == "PERMISSION_DENIED"
    with pytest.raises(deskgym.DeskgymError) as e:
        with s.unlock("exec", reason="not allowed"):
            pass
    assert e.value.code == "PERMISSION_DENIED" and "--allow-unlock exec" in str(e.value)
    s.close()
    events = datasets.open(s.replay.save(tmp_path / "run.skn"))["events"].to_pylist()
    import json

    seen = [(ev["kind"], json.loads(ev["payload"]) if isinstance(ev["payload"], str) else ev["payload"])
            for ev in events if ev["kind"] in ("unlock", "relock")]
    kinds = [(k, p.get("capability"), p.get("decision") or p.get("why")) for k, p in seen]
    assert kinds == [("unlock", "files", "granted"), ("relock", "files", "relock"), ("unlock", "exec", "denied")], kinds
    assert seen[0][1]["reason"] == '"read the home"' and seen[0][1]["by"] == "policy"


@pytest.fixture(scope="module")
def ask_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Pools get no capability; exec and files are asked of a controller, 3 s at most."""
    data = tmp_path_factory.mktemp("ask-data")
    s = Server("--idle-timeout-s", "0", "--data-dir", str(data), "--ask-unlock", "exec", "--ask-unlock", "files",
               "--ask-timeout-s", "3")
    yield s
    s.stop()


@pytest.mark.real
@pytest.mark.spec("aci:6.capability-channel")
def test_on_capability_required_answers_a_paused_exec_and_the_recording_shows_it(
    ask_server: Server, tmp_path: pathlib.Path
) -> None:
    datasets = pytest.importorskip("deskgym.datasets")
    s = deskgym.connect(address=ask_server.address, screen=(320, 240), capabilities=[], record="ask-run")
    ask = s.client.capabilities().ask
    assert list(ask.askable) == ["exec", "files"] and ask.timeout_ms == 3000
    asked: list[deskgym.session.CapabilityRequest] = []

    def controller(req: deskgym.session.CapabilityRequest) -> bool:
        asked.append(req)
        return req.capability == "exec"

    with s.on_capability_required(controller) as watcher:
        # The Exec pauses until the controller allows it, then runs.
        assert s.exec(["echo", "asked"]).stdout.strip() == "asked"
        # The grant holds for the episode: no second question.
        assert s.exec(["echo", "again"]).stdout.strip() == "again"
        with pytest.raises(deskgym.DeskgymError) as e:
            s.list_directory("/home/user")
        assert e.value.code == "PERMISSION_DENIED" and "refused capability request" in str(e.value)
    assert watcher.error is None
    assert [(q.capability, q.action, allowed) for q, allowed in watcher.answered] == [
        ("exec", "Exec", True), ("files", "ListDirectory", False)]
    assert [q.token for q in asked] == [q.token for q, _ in watcher.answered]

    # By hand: the request waits (listed) until this thread answers it.
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(s.list_directory("/home/user")))
    with s.events() as events:
        worker.start()
        token = next(ev for ev in events if ev.kind == "capability_required").payload["token"]
    assert [q.token for q in s.pending_capabilities()] == [token]
    assert s.answer_capability(token, True).capability == "files"
    worker.join(timeout=60)
    assert len(done) == 1 and not s.pending_capabilities()
    with pytest.raises(deskgym.DeskgymError) as e:
        s.answer_capability(token, False)
    assert e.value.code == "FAILED_PRECONDITION"
    s.close()

    events = datasets.open(s.replay.save(tmp_path / "ask.skn"))["events"].to_pylist()
    import json

    def payload(ev: dict) -> dict:
        return json.loads(ev["payload"]) if isinstance(ev["payload"], str) else ev["payload"]

    kinds = [(ev["kind"], payload(ev).get("capability"), payload(ev).get("decision"))
             for ev in events if ev["kind"] in ("capability_required", "capability_decision", "unlock")]
    assert kinds == [
        ("capability_required", "exec", None), ("unlock", "exec", "granted"), ("capability_decision", "exec", "allowed"),
        ("capability_required", "files", None), ("capability_decision", "files", "denied"),
        ("capability_required", "files", None), ("unlock", "files", "granted"),
        ("capability_decision", "files", "allowed"),
    ], kinds
