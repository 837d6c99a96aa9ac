"""The `desktop` profile from Python: a sandboxed desktop running real applications,
driven by pixels and by `exec`, with the capability off unless granted."""

from __future__ import annotations

import hashlib
import pathlib
import time

import numpy as np
import pytest
from conftest import Server

import deskgym


def wait_for(pred, timeout: float = 20.0, what: str = "condition"):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = pred()
        if v:
            return v
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def test_desktop_env_runs_a_real_terminal_typed_into_by_pixels(exec_server: Server) -> None:
    env = deskgym.make("blank", address=exec_server.address, profile="desktop", capabilities=["exec"], screen=(1024, 768),
        render_mode="rgb_array",
    )
    try:
        assert env.profile == "desktop" and env.capabilities == ("exec",)
        obs, _ = env.reset(seed=0)
        r = env.exec(["id", "-un"])
        assert r.ok and r.stdout.strip() == "user", r
        # pyautogui works inside, as OSWorld-style agents call it.
        r = env.exec(["python", "-c", "import pyautogui; pyautogui.moveTo(300, 200); print(pyautogui.position())"])
        assert r.ok and "x=300, y=200" in r.stdout, r
        # Ctrl+Alt+T opens the terminal (the profile's openbox key binding).
        env.step({"verb": "key", "keys": "ctrl+alt+t"})
        wait_for(
            lambda: "gnome-terminal" in env.exec("wmctrl -l -x", shell=True).stdout.lower(),
            what="a gnome-terminal window",
        )
        env.step({"verb": "wait", "ms": 1500})
        env.step({"verb": "type_text", "text": "echo typed-by-pixels > ~/proof.txt\n"})
        proof = wait_for(lambda: env.exec("cat ~/proof.txt", shell=True).stdout.strip(), what="the typed command")
        assert proof == "typed-by-pixels"
        frame = env.render()
        assert frame is not None and frame.shape == (768, 1024, 3)
        assert not np.array_equal(frame, obs), "the screen shows the terminal"
        shot = pathlib.Path(__file__).resolve().parents[2] / "target" / "desktop-terminal.png"
        shot.parent.mkdir(exist_ok=True)
        from PIL import Image

        Image.fromarray(frame).save(shot)
        # Reset brings the profile's initial state back: the home is the seed again.
        env.reset()
        assert env.exec("test -e ~/proof.txt", shell=True).exit_code == 1
        assert "gnome-terminal" not in env.exec("wmctrl -l -x", shell=True).stdout.lower()
    finally:
        env.close()


def test_a_key_step_shows_the_terminals_echo_of_that_key(exec_server: Server) -> None:
    """A key's step observes the screen that answers it: gnome-terminal echoes through
    its shell and draws from its next frame, after the `damage` settle's 10 ms quiet
    window had ended (every one of 64 key steps showed the screen before its key)."""
    c = deskgym.Client(exec_server.address)
    try:
        pool = c.create_pool("blank", 1, screen=(800, 600), profile="desktop", capabilities=["launch_app"])
        e = pool.env_ids[0]
        c.reset(e, seed=0)
        c.step(e, deskgym.to_proto({"verb": "launch_app", "app": "terminal"}))
        c.step(e, deskgym.to_proto({"verb": "wait", "ms": 1500}))
        steps = [{"verb": "key", "keys": k} for k in ("e", "c", "h", "o", "space", "x", "BackSpace")]
        steps += [{"verb": "type_text", "text": t} for t in (" one", " two-three")]
        late = []
        for a in steps:
            s = c.step(e, deskgym.to_proto(a))
            time.sleep(0.3)
            later = c.step(e, deskgym.to_proto({"verb": "noop"}))
            if s.observation.frame_hash != later.observation.frame_hash:
                late.append(a)
        assert late == [], f"the step showed the screen before its key for {late}"
    finally:
        c.close()


@pytest.mark.spec("aci:3.4.exec-argv", "aci:3.4.exec-result", "aci:3.4.exec-timeout", "aci:3.4.exec-capability")
def test_exec_results_and_errors(exec_server: Server) -> None:
    env = deskgym.make("blank", address=exec_server.address, profile="desktop", capabilities=["exec"], screen=(320, 240))
    try:
        r = env.exec("printf 'a\\377'; exit 4", shell=True)
        assert (r.exit_code, r.stdout_bytes, r.signal) == (4, b"a\xff", None)
        r = env.exec(["cat"], stdin="hello")
        assert r.stdout == "hello"
        r = env.exec("sleep 5", shell=True, timeout=0.3)
        assert r.timed_out and r.signal == 9 and not r.ok
        with pytest.raises(deskgym.DeskgymError) as e:
            env.exec(["deskgym-no-such-program"])
        assert e.value.code == "FAILED_PRECONDITION"
        with pytest.raises(deskgym.DeskgymError) as e:
            env.exec([])
        assert (e.value.code, e.value.field) == ("INVALID_ARGUMENT", "argv")
    finally:
        env.close()
    plain = deskgym.make("blank", address=exec_server.address, profile="desktop", screen=(320, 240))
    try:
        with pytest.raises(deskgym.DeskgymError) as e:
            plain.exec(["true"])
        assert e.value.code == "PERMISSION_DENIED"
    finally:
        plain.close()


@pytest.mark.spec("aci:3.list-windows")
def test_apps_and_windows_from_python(exec_server: Server) -> None:
    env = deskgym.make(
        "blank", address=exec_server.address, profile="desktop", capabilities=["launch_app", "windows"],
        screen=(1024, 768),
    )
    try:
        env.reset(seed=0)
        assert env.windows() == []
        env.launch_app("editor")
        (w,) = env.windows()
        assert w.wm_class == "Mousepad" and w.width > 0 and w.pid, w
        env.step({"verb": "resize_window", "window": w.id, "width": 500, "height": 400})
        env.step({"verb": "move_window", "window": w.id, "x": 40, "y": 60})
        env.step({"verb": "wait", "ms": 300})
        (w2,) = env.windows()
        assert (w2.width, w2.height) == (500, 400), w2
        assert 40 <= w2.x <= 60 and 60 <= w2.y <= 100, w2
        env.step({"verb": "close_window", "window": w.id})
        wait_for(lambda: env.windows() == [], what="the editor to close")
        with pytest.raises(deskgym.DeskgymError) as e:
            env.step({"verb": "activate_window", "window": w.id})
        assert (e.value.code, e.value.field) == ("INVALID_ARGUMENT", "action.activate_window.window")
        with pytest.raises(deskgym.DeskgymError) as e:
            env.launch_app("solitaire")
        assert e.value.code == "INVALID_ARGUMENT" and "terminal" in e.value.message
    finally:
        env.close()
    plain = deskgym.make("blank", address=exec_server.address, profile="desktop", screen=(320, 240))
    try:
        plain.reset()
        with pytest.raises(deskgym.DeskgymError) as e:
            plain.launch_app("editor")
        assert e.value.code == "PERMISSION_DENIED"
    finally:
        plain.close()


@pytest.mark.spec("aci:6.files")
def test_files_stay_inside_the_sandbox_view(exec_server: Server) -> None:
    env = deskgym.make(
        "blank", address=exec_server.address, profile="desktop", capabilities=["files", "exec"], screen=(320, 240)
    )
    try:
        blob = bytes(range(256)) * 12_000  # 3 MB: several messages each way
        assert env.put_file("data.bin", blob) == len(blob)
        assert env.get_file("/home/user/data.bin") == blob
        assert env.exec(["sha256sum", "data.bin"]).stdout.split()[0] == hashlib.sha256(blob).hexdigest()
        # Resumable: continue an upload at an offset.
        assert env.client.put_file(env.env_id, "data.bin", b"tail", offset=len(blob)) == len(blob) + 4
        assert env.get_file("data.bin")[-4:] == b"tail"
        env.put_file("/tmp/note.txt", "hello")
        listing = env.list_directory(".", depth=2)
        names = {e.path: e.kind for e in listing.entries}
        assert listing.path == "/home/user" and names["data.bin"] == "file", names
        assert env.exec("mkdir -p d/e && ln -s /etc/passwd d/out && ln -s ../data.bin d/in", shell=True).ok
        assert env.get_file("d/in")[:4] == blob[:4]
        bad = [
            (lambda: env.get_file("../etc/passwd"), "INVALID_ARGUMENT"),
            (lambda: env.get_file("/etc/passwd"), "INVALID_ARGUMENT"),
            (lambda: env.get_file("d/out"), "INVALID_ARGUMENT"),
            (lambda: env.put_file("d/out", b"x"), "INVALID_ARGUMENT"),
            (lambda: env.get_file("missing.txt"), "NOT_FOUND"),
            (lambda: env.get_file("d"), "FAILED_PRECONDITION"),
            (lambda: env.list_directory("data.bin"), "FAILED_PRECONDITION"),
            (lambda: env.client.put_file(env.env_id, "short.bin", b"x", offset=10), "FAILED_PRECONDITION"),
        ]
        for call, code in bad:
            with pytest.raises(deskgym.DeskgymError) as e:
                call()
            assert e.value.code == code, (code, e.value)
    finally:
        env.close()


@pytest.mark.spec("aci:3.gestures")
def test_held_keys_and_timed_drags(exec_server: Server) -> None:
    env = deskgym.make(
        "blank", address=exec_server.address, profile="desktop", capabilities=["launch_app", "exec"],
        screen=(1024, 768),
    )
    try:
        env.reset(seed=0)
        assert env.exec("touch ~/held.txt", shell=True).ok
        env.step({"verb": "launch_app", "app": "editor", "args": ["/home/user/held.txt"]})
        env.step({"verb": "wait", "ms": 800})
        env.step({"verb": "key_down", "keys": "shift"})
        env.step({"verb": "type_text", "text": "abc"})
        env.step({"verb": "key_up", "keys": "shift"})
        env.step({"verb": "type_text", "text": "d"})
        # Any X keysym name, even one the keymap lacks.
        env.step({"verb": "key", "keys": "Greek_alpha"})
        env.step({"verb": "key", "keys": "ctrl+s"})
        text = wait_for(lambda: env.exec("cat ~/held.txt", shell=True).stdout, what="the saved file")
        assert text.strip() == "ABCdα", text
    finally:
        env.close()
    # A timed drag still lands: drag-to-zone solved with a 300 ms drag.
    from conftest import find

    task = deskgym.make("drag-to-zone", address=exec_server.address, screen=(640, 480))
    try:
        obs, _ = task.reset(seed=2)
        src, dst = find(obs, (0xF7, 0x7F, 0x00)), find(obs, (0x2A, 0x9D, 0x8F))
        assert src and dst
        _, r, term, _, _ = task.step(
            {"verb": "drag", "x": src[0], "y": src[1], "to_x": dst[0], "to_y": dst[1], "duration_ms": 300}
        )
        assert (r, term) == (1.0, True)
    finally:
        task.close()


@pytest.mark.spec("aci:3.clipboard")
def test_clipboard_both_ways_with_a_real_application(exec_server: Server) -> None:
    env = deskgym.make(
        "blank", address=exec_server.address, profile="desktop",
        capabilities=["launch_app", "exec", "clipboard"], screen=(1024, 768),
    )
    try:
        env.reset(seed=0)
        assert env.clipboard() == ""
        assert env.exec("touch ~/clip.txt", shell=True).ok
        env.step({"verb": "launch_app", "app": "editor", "args": ["/home/user/clip.txt"]})
        env.step({"verb": "wait", "ms": 800})
        # Ours -> the application: it pastes what the server owns.
        env.set_clipboard("pasted by deskgym ✓")

        def paste_and_save() -> str:
            # Select all first, so a try after one that was lost (an editor still
            # starting on a loaded machine) replaces what is there instead of adding.
            for keys in ("ctrl+a", "ctrl+v", "ctrl+s"):
                env.step({"verb": "key", "keys": keys})
            try:
                return wait_for(lambda: env.exec("cat ~/clip.txt", shell=True).stdout, timeout=5.0, what="saved")
            except pytest.fail.Exception:
                return ""

        text = wait_for(paste_and_save, timeout=40.0, what="the pasted text saved")
        assert text.strip() == "pasted by deskgym ✓"
        # The application -> ours: it owns the selection after copying.
        env.step({"verb": "key", "keys": "ctrl+a"})
        env.step({"verb": "key", "keys": "ctrl+c"})
        env.step({"verb": "type_text", "text": "x"})  # the copy is the app's, not ours, now
        assert wait_for(lambda: env.clipboard() == "pasted by deskgym ✓", what="the app's copy")
        with pytest.raises(deskgym.DeskgymError) as e:
            env.set_clipboard("x" * ((1 << 20) + 1))
        assert (e.value.code, e.value.field) == ("INVALID_ARGUMENT", "text")
    finally:
        env.close()
    plain = deskgym.make("blank", address=exec_server.address, profile="desktop", screen=(320, 240))
    try:
        with pytest.raises(deskgym.DeskgymError) as e:
            plain.clipboard()
        assert e.value.code == "PERMISSION_DENIED"
    finally:
        plain.close()


@pytest.mark.spec("aci:4.scopes")
def test_screenshots_of_windows_downscaled(exec_server: Server) -> None:
    import io

    from PIL import Image

    env = deskgym.make(
        "blank", address=exec_server.address, profile="desktop", capabilities=["launch_app", "windows"],
        screen=(1024, 768),
    )
    try:
        env.reset(seed=0)
        full = env.screenshot()
        assert (full.width, full.height) == (1024, 768)
        assert Image.open(io.BytesIO(full.frame)).size == (1024, 768)
        with pytest.raises(deskgym.DeskgymError) as e:
            env.screenshot(scope="active_window")
        assert e.value.code == "FAILED_PRECONDITION"
        env.launch_app("editor")
        env.step({"verb": "wait", "ms": 500})
        (w,) = env.windows()
        shot = env.screenshot(scope="active_window")
        assert (shot.width, shot.height) == (w.width, w.height)
        small = env.screenshot(window=w.id, max_long_edge=200, encoding="jpeg", jpeg_quality=30)
        assert max(small.width, small.height) == 200 and small.frame[:2] == b"\xff\xd8"
        better = env.screenshot(window=w.id, max_long_edge=200, encoding="jpeg", jpeg_quality=95)
        assert len(better.frame) > len(small.frame)
        with pytest.raises(deskgym.DeskgymError) as e:
            env.screenshot(window=0xDEAD)
        assert (e.value.code, e.value.field) == ("INVALID_ARGUMENT", "window")
    finally:
        env.close()


def test_vector_env_reaches_each_sandbox_by_index(exec_server: Server) -> None:
    envs = deskgym.make_vec(
        "blank", 2, address=exec_server.address, profile="desktop", capabilities=["exec", "files", "clipboard"],
        screen=(320, 240),
    )
    try:
        envs.reset(seed=0)
        envs.put_file(0, "who.txt", "zero")
        envs.put_file(1, "who.txt", "one")
        assert (envs.get_file(0, "who.txt"), envs.get_file(1, "who.txt")) == (b"zero", b"one")
        assert envs.exec(1, ["cat", "who.txt"]).stdout == "one"
        # The same verbs as a handle on one env, with the single env's signatures.
        one = envs.desktop(1)
        assert isinstance(one, deskgym.Desktop) and one.exec("cat who.txt", shell=True).stdout == "one"
        assert [e.path for e in one.list_directory(".").entries if e.path == "who.txt"] == ["who.txt"]
        envs.set_clipboard(0, "clip zero")
        assert (envs.clipboard(0), envs.clipboard(1)) == ("clip zero", "")
        assert envs.screenshot(1).width == 320
    finally:
        envs.close()


@pytest.mark.spec("smcp:5.timeout", "smcp:5.cancel", "aci:3.4.exec-cancel")
def test_a_cancelled_exec_is_killed_and_frees_its_env(exec_server: Server) -> None:
    # A client that gives up on a long command (an MCP or SMCP cancel, a Ctrl+C) cancels
    # the RPC: the command dies with it, and the env takes the next call instead of
    # answering ABORTED until the command's own bound.
    import threading

    from deskgym.client import Cancel, cancellable

    c = deskgym.Client(exec_server.address)
    pool = c.create_pool("blank", 1, profile="desktop", capabilities=["exec"], screen=(640, 480))
    try:
        env = pool.env_ids[0]
        c.reset(env, seed=0)
        token, outcome = Cancel(), {}

        def long_command() -> None:
            with cancellable(token):
                try:
                    outcome["result"] = c.exec(env, "sleep 40; touch ~/late", shell=True, timeout=60)
                except deskgym.DeskgymError as e:
                    outcome["error"] = e

        t = threading.Thread(target=long_command)
        t.start()
        time.sleep(1.5)
        token.cancel()
        t.join(10)
        assert not t.is_alive() and outcome["error"].code == "CANCELLED", outcome

        def free() -> deskgym.ExecResult | None:
            try:
                return c.exec(env, "pgrep -x sleep || echo none", shell=True)
            except deskgym.DeskgymError as e:
                assert e.code == "ABORTED", e  # the env still busy: try again
                return None

        left = wait_for(free, timeout=25, what="the env to take calls again")
        assert left.stdout.strip() == "none", left.stdout
        assert c.exec(env, "test -e ~/late", shell=True).exit_code == 1
    finally:
        c.release(pool)
        c.close()


@pytest.mark.spec("aci:3.launch-app", "aci:3.activate-window", "aci:3.list-windows")
def test_launch_app_runs_a_program_by_path_under_exec_and_activate_window_finds_it_by_title(
    exec_server: Server,
) -> None:
    c = deskgym.Client(exec_server.address)
    plain = c.create_pool("blank", 1, profile="desktop", capabilities=["launch_app", "windows"], screen=(800, 600))
    granted = c.create_pool("blank", 1, profile="desktop", capabilities=["exec", "launch_app", "windows"],
                            screen=(800, 600))
    try:
        env = plain.env_ids[0]
        c.reset(env, seed=0)
        # Without exec, only the profile's catalog: a program by path is refused.
        with pytest.raises(deskgym.DeskgymError) as e:
            c.step(env, deskgym.to_proto({"verb": "launch_app", "app": "/usr/bin/xmessage"}))
        assert e.value.code == "INVALID_ARGUMENT" and "needs the pool's exec grant" in e.value.message
        env = granted.env_ids[0]
        c.reset(env, seed=0)
        for bad in ("../bin/xmessage", "-rf", "bin/xmessage"):
            with pytest.raises(deskgym.DeskgymError) as e:
                c.step(env, deskgym.to_proto({"verb": "launch_app", "app": bad}))
            assert e.value.code == "INVALID_ARGUMENT" and e.value.field == "action.launch_app.app", bad
        # An absolute path and a PATH name, arguments verbatim (flags included).
        c.step(env, deskgym.to_proto({"verb": "launch_app", "app": "/usr/bin/xmessage",
                                      "args": ["-title", "Proof One", "one"]}))
        c.step(env, deskgym.to_proto({"verb": "launch_app", "app": "xmessage", "args": ["-title", "Proof Two", "two"]}))
        wait_for(lambda: {"Proof One", "Proof Two"} <= {w.title for w in c.windows(env)}, what="both windows")
        for title in ("proof one", "PROOF TWO", "Proof One"):
            c.step(env, deskgym.to_proto({"verb": "activate_window", "app": title}))
            focused = wait_for(lambda: [w.title for w in c.windows(env) if w.focused] == [title.title()] or None,
                               what=f"{title} focused")
            assert focused
        with pytest.raises(deskgym.DeskgymError) as e:
            c.step(env, deskgym.to_proto({"verb": "activate_window", "app": "no such window"}))
        assert e.value.code == "INVALID_ARGUMENT" and "Proof One" in e.value.message
    finally:
        c.release(plain)
        c.release(granted)
        c.close()


@pytest.mark.spec("aci:3.4.exec-stream")
def test_exec_stream_yields_output_as_it_comes_and_ends_with_the_result(exec_server: Server) -> None:
    env = deskgym.make("blank", address=exec_server.address, profile="desktop", capabilities=["exec"], screen=(320, 240))
    try:
        env.reset(seed=0)
        pieces = list(env.exec_stream("echo first; echo oops >&2; echo second", shell=True))
        result = pieces.pop()
        assert isinstance(result, deskgym.ExecResult) and result.ok, result
        assert b"".join(d for c, d in pieces if c == "stdout") == b"first\nsecond\n"
        assert b"".join(d for c, d in pieces if c == "stderr") == b"oops\n"
        assert result.stdout == "first\nsecond\n" and result.stderr == "oops\n"
        # Output past max_exec_output is drained and flagged, never a stalled child.
        big = list(env.exec_stream("head -c 600000 /dev/zero", shell=True))
        assert big[-1].truncated and sum(len(d) for c, d in big[:-1]) == 256 * 1024, big[-1]
        # The first piece comes while the command still runs: with a 20 s deadline on
        # the call and a command that sleeps for an hour (its own bound 60 s), only a
        # streamed piece can arrive in time. Closing the stream then ends the command.
        quick = deskgym.Client(exec_server.address, timeout=20)
        it = quick.exec_stream(env.env_id, "echo go; sleep 3600", shell=True, timeout=60)
        assert next(it) == ("stdout", b"go\n")
        it.close()
        left = wait_for(lambda: _exec_or_none(env, "pgrep -x sleep || echo none"), timeout=25, what="the env free")
        assert left.stdout.strip() == "none", left.stdout
        quick.close()
    finally:
        env.close()


def _exec_or_none(env, line: str):
    try:
        return env.exec(line, shell=True)
    except deskgym.DeskgymError as e:
        assert e.code == "ABORTED", e
        return None


def test_a_fork_after_typing_into_a_terminal_is_exact_and_sends_typed_keys_without_settles(
    tmp_path: pathlib.Path,
) -> None:
    """A rebuild replays a run of typed keys without waiting for the screen between them
    (only the run's first and last keys wait): the replicas still show exactly the checkpoint's
    terminal, and the server's counters say the keys went unsettled, not replayed twice."""
    import urllib.request

    from deskgym.v1 import deskgym_pb2 as pb

    s = Server("--metrics-listen", "127.0.0.1:0", "--idle-timeout-s", "0", "--data-dir", str(tmp_path / "d"))
    # A short lease: the replicas' pool inherits it, and a fork that takes longer must
    # still hand over a pool that lives.
    c = deskgym.Client(s.address, lease_ttl_s=1.0)
    try:
        assert s.proc.stdout is not None
        url = s.proc.stdout.readline().split()[-1]

        def counters() -> tuple[float, float]:
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            v = {ln.rsplit(" ", 1)[0]: float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if ln and ln[0] != "#"}
            return v["deskgym_replay_unsettled_actions_total"], v["deskgym_replays_settled_again_total"]

        pool = c.create_pool("blank", 1, screen=(800, 600), profile="desktop", capabilities=["launch_app"])
        e = pool.env_ids[0]
        c.reset(e, seed=0)
        c.step(e, deskgym.to_proto({"verb": "launch_app", "app": "terminal"}))
        c.step(e, deskgym.to_proto({"verb": "wait", "ms": 1000}))
        typed = 0
        for cmd in ("echo one-two", "printf '%s\\n' three", "ls -d /tm"):
            for ch in cmd:
                c.step(e, deskgym.to_proto({"verb": "type_text", "text": ch}))
            # A run: the command's keys and a BackSpace; its first and last keys wait.
            typed += len(cmd) - 1
            c.step(e, deskgym.to_proto({"verb": "key", "keys": "BackSpace"}))
            c.step(e, deskgym.to_proto({"verb": "key", "keys": "Return"}))
        last = c.step(e, deskgym.to_proto({"verb": "noop"}), encoding="png")
        before = counters()
        cp = c.save(e)
        fork = c.fork(cp, 2, encoding="png")
        after = counters()
        assert [r.fidelity for r in fork.replicas] == [pb.FIDELITY_EXACT] * 2, fork.expected_hash
        assert all(r.observation.frame_hash == last.observation.frame_hash for r in fork.replicas)
        # Per replica: every key of each run but its first and last.
        assert after[0] - before[0] == 2 * typed, (before, after)
        assert after[1] == before[1], "no replica was replayed a second time"
        time.sleep(1.5)  # past the lease: the client renews the new pool
        for r in fork.replicas:
            c.step(r.env_id, deskgym.to_proto({"verb": "noop"}))
        c.close_pool(fork.pool_id)
    finally:
        c.close()
        s.stop()
