"""Real OSWorld task files (../shared/osworld/tasks) on deskgym through the DesktopEnv
shim: OSWorld's own setup controller, getters and metric functions (desktop-env 1.0.2),
oracles that act only through ``env.step`` as an agent would."""

from __future__ import annotations

import io
import json
import os
import pathlib
import time
import uuid
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import Server, mp4_frames
from PIL import Image

import deskgym
from deskgym import osworld  # scripts/test.sh installs desktop-env and the osworld extra

TASKS = pathlib.Path(__file__).parent / "osworld_tasks"


def task(rel: str) -> dict[str, Any]:
    return json.loads((TASKS / rel).read_text())


@pytest.fixture()
def make_env(exec_server: Server, tmp_path: pathlib.Path) -> Iterator[Any]:
    envs = []

    def make(**kw: Any) -> Any:
        kw.setdefault("cache_dir", str(tmp_path / "cache"))
        kw.setdefault("screen_size", (1280, 720))
        env = osworld.DesktopEnv(address=exec_server.address, **kw)
        envs.append(env)
        return env

    yield make
    for e in envs:
        e.close()


def fill_cache(cache_dir: str, t: dict[str, Any]) -> None:
    """Stand-ins for a task's downloads, where OSWorld's SetupController looks first."""
    from PIL import Image

    for step in t.get("config", []):
        if step["type"] != "download":
            continue
        for f in step["parameters"]["files"]:
            name = os.path.basename(f["path"])
            path = pathlib.Path(cache_dir) / t["id"] / f"{uuid.uuid5(uuid.NAMESPACE_URL, f['url'])}_{name}"
            path.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith(".zip"):
                # A small project: the folder the zip is named after, with two files.
                with zipfile.ZipFile(path, "w") as z:
                    z.writestr(f"{name[:-4]}/README.md", "# stand-in project\n")
                    z.writestr(f"{name[:-4]}/environment.yml", "name: stand-in\n")
                continue
            buf = io.BytesIO()
            Image.new("RGB", (32, 24), (200, 30, 30)).save(buf, format="PNG" if name.endswith(".png") else "JPEG")
            path.write_bytes(buf.getvalue())


def wait_window(env: Any, pred: Callable[[Any], bool], what: str) -> None:
    """Waits for a window the predicate accepts, then a moment for input. The bound only
    ends a test whose window never comes: 60 s, since Chromium relaunched by a task's
    postconfig took over 20 s on CI's machine with builds beside it."""
    t0 = time.monotonic()
    while not any(pred(w) for w in env.deskgym.windows()):
        assert time.monotonic() - t0 < 60, f"no {what} window"
        time.sleep(0.2)
    env.step("WAIT", pause=1.0)


def terminal(env: Any, pause: float = 0.3) -> None:
    """Opens a terminal the way a user does (Ctrl+Alt+T) and waits for its window."""
    env.step("pyautogui.hotkey('ctrl', 'alt', 't')", pause=pause)
    # By class: the home's .bashrc (Debian's, as Ubuntu's on OSWorld's image) titles the
    # window "user@deskgym: ~" once bash has started.
    wait_window(env, lambda w: w.wm_class == "Gnome-terminal", "Terminal")


def type_line(env: Any, line: str) -> None:
    env.step(f"pyautogui.typewrite({line + chr(10)!r}, interval=0.01)", pause=1.0)


def test_rename_folder_with_sudo_setup(make_env: Any) -> None:
    t = task("os/e0df059f-28a6-4169-924f-b9623e7184cc.json")
    env = make_env()
    obs = env.reset(task_config=t)
    assert obs["instruction"] == t["instruction"] and obs["screenshot"][:8] == b"\x89PNG\r\n\x1a\n"
    assert obs["accessibility_tree"].startswith("<desktop-frame")
    assert env.evaluate() == 0
    terminal(env)
    type_line(env, "mv ~/Desktop/todo_list_Jan_1 ~/Desktop/todo_list_Jan_2")
    assert env.evaluate() == 1
    assert env.controller.native_actions >= 2, "pure pyautogui ran as deskgym actions"


def test_copy_jpgs_with_cached_downloads(make_env: Any) -> None:
    t = task("os/23393935-50c7-4a86-aeea-2b78fd089c5c.json")
    env = make_env(require_a11y_tree=False)
    fill_cache(env.cache_dir_base, t)
    env.reset(task_config=t)
    assert env.evaluate() == 0
    terminal(env)
    type_line(env, "find ~/Desktop/photos -name '*.jpg' -exec cp {} ~/Desktop/cpjpg/ \\;")
    assert env.evaluate() == 1


def test_a_missing_download_names_the_url_and_the_cache_path(make_env: Any) -> None:
    t = task("os/23393935-50c7-4a86-aeea-2b78fd089c5c.json")
    env = make_env(require_a11y_tree=False)
    with pytest.raises(Exception) as e:
        env.reset(task_config=t)
    msg = str(e.value)
    assert "huggingface.co" in msg and env.cache_dir_base in msg, msg


def test_gsettings_lock_with_computer_13_actions(make_env: Any) -> None:
    t = task("os/a4d98375-215b-4a4d-aee9-3d4370fccc41.json")
    env = make_env(action_space="computer_13", require_a11y_tree=False)
    env.reset(task_config=t)
    assert env.evaluate() == 0
    env.step({"action_type": "HOTKEY", "parameters": {"keys": ["ctrl", "alt", "t"]}}, pause=2.0)
    env.step({"action_type": "TYPING", "parameters": {"text": "gsettings set org.gnome.desktop.screensaver lock-enabled true"}}, pause=0.3)
    env.step({"action_type": "PRESS", "parameters": {"key": "enter"}}, pause=1.0)
    assert env.evaluate() == 1


def test_git_push_from_the_terminal_the_task_opened(make_env: Any) -> None:
    t = task("multi_apps/2c9fc0de-3ee7-45e1-a5df-c86206ad78b5.json")
    env = make_env(require_a11y_tree=False)
    fill_cache(env.cache_dir_base, t)
    env.reset(task_config=t)
    assert env.evaluate() == 0
    # The task's setup opened gnome-terminal in the project (through the session bus).
    wait_window(env, lambda w: "terminal" in w.wm_class.lower(), "the setup's terminal")
    type_line(env, 'git add -A && git commit -q -m "daily update" && git push -q origin main')
    env.step("WAIT", pause=1.0)
    assert env.evaluate() == 1


def test_infeasible_task_scores_only_fail(make_env: Any) -> None:
    t = task("os/b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa.json")
    env = make_env(require_a11y_tree=False)
    env.reset(task_config=t)
    _, _, done, info = env.step("FAIL", pause=0)
    assert done and info == {"fail": True}
    assert env.evaluate() == 1
    env.reset(task_config=t)
    _, _, done, _ = env.step("DONE", pause=0)
    assert done and env.evaluate() == 0


@pytest.mark.spec("aci:6.adapters")
def test_run_single_example_loop(make_env: Any, tmp_path: pathlib.Path) -> None:
    """The shape of OSWorld's lib_run_single.run_single_example with a scripted agent,
    every command run inside the desktop as OSWorld runs it (``python -c``)."""
    t = task("os/e0df059f-28a6-4169-924f-b9623e7184cc.json")
    env = make_env(native_actions=False)
    env.reset(task_config=t)
    time.sleep(0.5)
    obs = env._get_obs()
    assert obs["screenshot"] and obs["instruction"] == t["instruction"]
    env.controller.start_recording()
    actions = [
        "pyautogui.hotkey('ctrl', 'alt', 't')",
        "WAIT",
        "pyautogui.typewrite('mv ~/Desktop/todo_list_Jan_1 ~/Desktop/todo_list_Jan_2\\n', interval=0.01)",
        "DONE",
    ]
    done = False
    for step_idx, action in enumerate(actions):
        obs, reward, done, info = env.step(action, pause=1.5)
        (tmp_path / f"step_{step_idx}.png").write_bytes(obs["screenshot"])
        if done:
            break
    assert done
    assert env.evaluate() == 1
    time.sleep(1.0)  # the screen at rest: the recording's last frames show it
    last = env.controller.get_screenshot()
    env.controller.end_recording(str(tmp_path / "recording.mp4"))
    video = (tmp_path / "recording.mp4").read_bytes()
    # A finished MP4: the file type box first, and the index (moov) written at the end.
    assert video[4:8] == b"ftyp" and b"moov" in video, video[:64]
    # What a person sees: the decoded video shows the screen, not black. Its last frame
    # is the final screenshot, to within H.264's loss (and the two pointer drawings).
    frames = mp4_frames(tmp_path / "recording.mp4", tmp_path / "frames")
    assert len(frames) >= 5, len(frames)
    shot = rgb_of(last)
    assert frames[-1].shape == shot.shape, (frames[-1].shape, shot.shape)
    off = float(np.abs(frames[-1].astype(np.int16) - shot.astype(np.int16)).mean())
    black = float(shot.astype(np.int16).mean())
    assert black > 20, "the final screenshot is itself nearly black: nothing to compare"
    assert off < 0.1 * black, f"the video's last frame differs from the screen by {off:.1f} (black: {black:.1f})"
    # Frames during the episode change with it (the terminal opening, the typing).
    assert len({f.tobytes() for f in frames}) > 1, "every frame of the recording is the same"
    running = env.deskgym.exec(["pgrep", "-f", "location=/tmp/deskgym-recording.mp4"])
    assert running.exit_code == 1, f"the recorder stopped: {running.stdout}"


def rgb_of(png: bytes) -> Any:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def element_center(env: Any, role: str, name: str) -> tuple[int, int]:
    """Where an element is on screen, read from the accessibility tree as an agent that
    reads ``obs["accessibility_tree"]`` would (waits 10 s at most for it to show)."""
    t0 = time.monotonic()
    while True:
        found = [e.center for e in env.deskgym.observe(structured=True, line_budget=5000).find(role, name, showing=True) if e.center]
        if found:
            return found[-1]
        assert time.monotonic() - t0 < 10, f"no {role} {name!r} on screen"
        time.sleep(0.3)


def test_chrome_bookmark_folder_through_the_bookmark_manager(make_env: Any) -> None:
    """google-chrome with remote debugging, socat, pkill and a relaunch at postconfig,
    and the `bookmarks` getter reading Chrome's profile."""
    t = task("chrome/2ad9387a-65d8-4e33-ad5b-7580065a27ca.json")
    env = make_env()
    env.reset(task_config=t)
    wait_window(env, lambda w: "chromium" in w.wm_class.lower(), "Chromium")
    assert env.evaluate() == 0
    wait_window(env, lambda w: "chromium" in w.wm_class.lower(), "the relaunched Chromium")
    env.step("pyautogui.hotkey('ctrl', 'shift', 'o')", pause=1.0)
    x, y = element_center(env, "push button", "Organize")
    env.step(f"pyautogui.click({x}, {y})", pause=0.5)
    x, y = element_center(env, "menu item", "Add new folder")
    env.step(f"pyautogui.click({x}, {y})", pause=1.0)
    env.step("pyautogui.typewrite('Favorites\\n', interval=0.02)", pause=3.0)
    assert env.evaluate() == 1


def test_chromium_port_reaches_this_envs_browser_over_cdp(make_env: Any) -> None:
    """OSWorld's own playwright paths (the `chrome_open_tabs` setup step, the
    `open_tabs_info` getter) reach the env's Chromium at (vm_ip, chromium_port): a
    port tunnelled into this env's sandbox, not a host port shared between envs."""
    from desktop_env.evaluators import getters

    t = task("chrome/2ad9387a-65d8-4e33-ad5b-7580065a27ca.json")
    env, other = make_env(require_a11y_tree=False), make_env(require_a11y_tree=False)
    env.reset(task_config=t)
    other.reset(task_config=t)
    assert env.chromium_port != other.chromium_port
    env.setup_controller.setup([{"type": "chrome_open_tabs", "parameters": {
        "urls_to_open": ["data:text/html,<title>deskgym-tab</title>tunnelled"]}}])
    titles = [tab["title"] for tab in getters.get_open_tabs_info(env, {})]
    assert "deskgym-tab" in titles, titles
    assert "deskgym-tab" not in [tab["title"] for tab in getters.get_open_tabs_info(other, {})]


def test_wallpaper_setup_and_getter(make_env: Any) -> None:
    """OSWorld's `change_wallpaper` setup step and `vm_wallpaper` getter agree through
    GNOME's background setting (dconf in the desktop's session)."""
    from desktop_env.evaluators import getters
    from PIL import Image

    env = make_env(require_a11y_tree=False)
    env.reset(task_config=task("os/b3d4a89c-53f2-4d6b-8b6a-541fb5d205fa.json"))
    import requests

    # A fresh desktop has a wallpaper, as OSWorld's snapshot does (the profile sets one).
    first = requests.post(f"http://{env.vm_ip}:{env.server_port}/wallpaper", timeout=30)
    assert first.status_code == 200 and first.content == pathlib.Path("/usr/share/pixmaps/debian-logo.png").read_bytes()
    buf = io.BytesIO()
    Image.new("RGB", (40, 30), (10, 120, 200)).save(buf, format="PNG")
    env.deskgym.put_file("/home/user/Pictures/my wall.png", buf.getvalue())
    env.setup_controller.setup([{"type": "change_wallpaper", "parameters": {"path": "~/Pictures/my wall.png"}}])
    os.makedirs(env.cache_dir, exist_ok=True)
    got = getters.get_vm_wallpaper(env, {"dest": "wallpaper.png"})
    assert pathlib.Path(got).read_bytes() == buf.getvalue()


def test_a_server_without_the_grants_names_both(server: Server) -> None:
    """The shared test server allows no exec: the shim says which grants it needs."""
    with pytest.raises(deskgym.DeskgymError) as e:
        osworld.DesktopEnv(address=server.address)
    assert e.value.code == "PERMISSION_DENIED"
    assert "--allow-capabilities exec,files" in e.value.message, e.value.message


WHOLE_SET = TASKS / "evaluation_examples"


def whole_set() -> list[tuple[str, dict[str, Any]]]:
    """(domain, task) for each of OSWorld's 369 Ubuntu tasks."""
    ids = json.loads((WHOLE_SET / "test_all.json").read_text())
    return [(d, json.loads((WHOLE_SET / "examples" / d / f"{i}.json").read_text())) for d, tids in ids.items()
            for i in tids]


def test_every_task_of_the_whole_set_resolves_its_metric_and_getters() -> None:
    """desktop-env resolves a task's metric and getters at reset: each of the 369 must
    import with the `osworld` extra (a metric module that imports a heavy package it does
    not call for that task loads with a stand-in for it)."""
    import sys

    from deskgym.osworld import _lazy

    _lazy.install()
    metrics = sys.modules["desktop_env.evaluators.metrics"]
    getters = sys.modules["desktop_env.evaluators.getters"]
    tasks = whole_set()
    assert len(tasks) == 369
    failed = []
    for domain, t in tasks:
        ev = t["evaluator"]
        funcs = ev["func"] if isinstance(ev["func"], list) else [ev["func"]]
        kinds = [x["type"] for k in ("result", "expected")
                 for x in (ev.get(k) if isinstance(ev.get(k), list) else [ev.get(k)]) if isinstance(x, dict) and "type" in x]
        try:
            for f in funcs:
                assert callable(getattr(metrics, f))
            for k in kinds:
                assert callable(getattr(getters, f"get_{k}"))
        except Exception as e:  # noqa: BLE001 - each task's failure is reported
            failed.append(f"{domain}/{t['id']}: {type(e).__name__}: {e}")
    assert not failed, f"{len(failed)} of 369 tasks cannot resolve their evaluator:\n" + "\n".join(failed[:20])


def test_a_metric_that_needs_an_absent_heavy_package_says_which_extra(caplog: pytest.LogCaptureFixture) -> None:
    import importlib.util
    import sys

    from deskgym.osworld import _lazy

    _lazy.install()
    if importlib.util.find_spec("easyocr") is not None:
        pytest.skip("easyocr is installed (deskgym[osworld-full]): nothing is stood in")
    metrics = sys.modules["desktop_env.evaluators.metrics"]
    # docs.py imports easyocr at its top; its other metrics work without it...
    assert metrics.compare_line_spacing is not None
    # ...and the one that reads text from an image fails on use (scores 0, as OSWorld's
    # metric does on an error), its log naming the extra.
    assert metrics.compare_image_text(str(TASKS / "README.md"), {"type": "text", "text": "x"}) == 0
    assert any("deskgym[osworld-full]" in r.getMessage() for r in caplog.records)
    # The process's own import of the package still fails as it should.
    with pytest.raises(ImportError):
        import easyocr  # noqa: F401
    assert "easyocr" not in sys.modules


def test_check_sweeps_every_domain_offline_and_resumes(exec_server: Server, tmp_path: pathlib.Path) -> None:
    """`python -m deskgym.osworld.run --check` over the first 4 tasks of every domain (40),
    offline with stand-in files: each task evaluates, or fails naming what it needs; the
    sweep resumes without rerunning finished tasks."""
    from deskgym.osworld import run

    argv = ["--check", "--test-all", str(WHOLE_SET / "test_all.json"), "--limit", "4", "--num-envs", "2",
            "--result-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache"), "--stand-ins",
            "--screen", "1280x720", "--address", exec_server.address]
    run.main(argv)
    log = tmp_path / "results" / "check.jsonl"
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    domains = json.loads((WHOLE_SET / "test_all.json").read_text())
    assert len(rows) == 40 and {r["domain"] for r in rows} == set(domains)
    for r in rows:
        if r["evaluate_ok"]:
            assert isinstance(r["score"], float)
        elif r.get("no_stand_in"):
            # A file with no stand-in and no network: the reset names one (the first it
            # meets), with its URL and where to put it.
            assert not r["reset_ok"] and "put the file at" in r["error"], r
            assert any(n in r["error"] for n in r["no_stand_in"]), r
        else:
            assert r["error"], r
    # Every task of the apps the profile has (office, GIMP, VLC, Thunderbird, VS Code)
    # evaluates; of the 40, only a live page or a Google account may stop one.
    by = {d: [r for r in rows if r["domain"] == d] for d in domains}
    for d in ("libreoffice_calc", "libreoffice_writer", "libreoffice_impress", "gimp", "vlc", "thunderbird",
              "vs_code", "os"):
        assert all(r["evaluate_ok"] for r in by[d]), by[d]
    assert sum(r["evaluate_ok"] for r in rows) >= 38, [(r["domain"], r["error"][:80]) for r in rows]
    table = (tmp_path / "results" / "coverage.md").read_text()
    assert "| **all** | 40 |" in table
    # Stopped and started again: nothing reruns.
    run.main(argv)
    assert len(log.read_text().splitlines()) == 40
