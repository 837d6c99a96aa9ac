"""The README is the front door and docs/ the guides behind it: every Python snippet in
them runs as written against a real server (`DESKGYM_ADDRESS` pointing at it), and the
tables name every server flag and every action verb. A snippet is skipped only where
the page says why just above it (`<!-- snippet: skip: ... -->`): another machine, a
cluster, another Python. A snippet for frameworks that live in their own venv (marked
`<!-- snippet: venv: .venv-faces -->`) runs there, as its own process, beside an OpenEnv
face of the server at `$DESKGYM_OPENENV_URL`. (test_docs.py keeps the generated pages and
the links true.)"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Server, server_binary

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SKIP = re.compile(r"<!-- snippet: skip: (.+?) -->\n$")
VENV = re.compile(r"<!-- snippet: venv: (\S+) -->\n$")


def snippets() -> list[tuple[str, str, str | None]]:
    """(page:line, code, skip reason or ``venv:NAME``) of every ```python block of the
    README and the guides; a snippet two pages share runs once."""
    out, seen = [], set()
    for page in PAGES:
        text = page.read_text()
        # A block ends at a line of its own ``` (a ``` inside a line, as in a string, does not).
        for m in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M):
            if m.group(1) in seen:
                continue
            seen.add(m.group(1))
            where = f"{page.relative_to(ROOT).as_posix()}:{text.count(chr(10), 0, m.start()) + 1}"
            before = text[: m.start()]
            above = before[before.rfind("\n", 0, len(before) - 1) + 1 :]
            skip, venv = SKIP.search(above), VENV.search(above)
            out.append((where, m.group(1), skip.group(1) if skip else f"venv:{venv.group(1)}" if venv else None))
    return out


SNIPPETS = snippets()


@pytest.fixture(scope="module")
def readme_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("readme-data")
    s = Server("--idle-timeout-s", "0", "--data-dir", str(data), "--allow-capabilities", "exec,files")
    yield s
    s.stop()


@pytest.fixture()
def readme_cwd(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, readme_server: Server) -> pathlib.Path:
    """A working directory with what the snippets open (OSWorld's task file), and the
    server as the default address."""
    tasks = tmp_path / "evaluation_examples" / "examples" / "os"
    tasks.mkdir(parents=True)
    for f in (ROOT / "python-client" / "tests" / "osworld_tasks" / "os").glob("*.json"):
        shutil.copy(f, tasks)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DESKGYM_ADDRESS", readme_server.address)
    return tmp_path


@pytest.fixture(scope="module")
def openenv_face(readme_server: Server) -> Iterator[str]:
    """``python -m deskgym.openenv`` over the snippets' server, in .venv-faces."""
    python = ROOT / ".venv-faces" / "bin" / "python"
    assert python.exists(), "run scripts/setup-faces.sh (scripts/test.sh does)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python-client"), "DESKGYM_ADDRESS": readme_server.address}
    face = subprocess.Popen([str(python), "-m", "deskgym.openenv", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"{url}/health", timeout=1)
                break
            except OSError:
                assert face.poll() is None, "the OpenEnv face exited"
                time.sleep(0.1)
        yield url
    finally:
        face.terminate()
        face.wait(timeout=30)


def run_in_venv(venv: str, where: str, code: str, cwd: pathlib.Path, face: str) -> None:
    """A snippet as its own program under ``venv``'s Python, pointed at the server and the face."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "python-client"), "DESKGYM_OPENENV_URL": face}
    r = subprocess.run([str(ROOT / venv / "bin" / "python"), "-c", code], cwd=cwd, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{where} under {venv}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"


@pytest.mark.parametrize("where,code,skip", SNIPPETS, ids=[s[0] for s in SNIPPETS])
def test_snippet_runs_as_written(where: str, code: str, skip: str | None, readme_cwd: pathlib.Path,
                                 request: pytest.FixtureRequest) -> None:
    if skip is not None and skip.startswith("venv:"):
        run_in_venv(skip.removeprefix("venv:"), where, code, readme_cwd, request.getfixturevalue("openenv_face"))
        return
    if skip is not None:
        pytest.skip(skip)
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    exec(compile(code, where, "exec"), namespace)  # noqa: S102 - the docs' own code
    for value in list(namespace.values()):
        close = getattr(value, "close", None)
        if callable(close) and type(value).__module__.startswith(("deskgym", "gymnasium", "stable_baselines3")):
            close()


def test_every_skip_says_why() -> None:
    reasons = [s for _, _, s in SNIPPETS if s is not None and not s.startswith("venv:")]
    # Another machine, a cluster, another Python (3), a model from the Hub trained for
    # hours (TRL's two, which test_trl.py runs with a tiny model), and a vendor's model
    # API (drive's, which test_drive.py runs against stubs): each names its test.
    assert len(reasons) <= 6, reasons
    for r in reasons:
        assert "test" in r, f"a skipped snippet names the test that runs it elsewhere: {r}"


def test_the_server_flags_table_names_every_flag() -> None:
    help_text = subprocess.run([server_binary(), "--help"], capture_output=True, text=True, check=True).stdout
    flags = sorted(set(re.findall(r"^\s+(--[a-z][a-z0-9-]+)", help_text, re.M)) - {"--help"})
    section = (ROOT / "docs" / "server.md").read_text()
    missing = [f for f in flags if f"`{f}`" not in section]
    assert flags and not missing, f"flags of --help missing from docs/server.md's table: {missing}"


def test_the_actions_table_names_every_verb() -> None:
    proto = (ROOT / "proto" / "deskgym" / "v1" / "deskgym.proto").read_text()
    block = proto[proto.index("message Action {") :]
    block = block[block.index("oneof verb {") : block.index("}")]
    verbs = re.findall(r"^\s+\w+ (\w+) = \d+;", block, re.M)
    guide = (ROOT / "docs" / "training.md").read_text()
    table = guide[guide.index("## Actions") : guide.index("## Observations")]
    missing = [v for v in verbs if f"`{v}`" not in table]
    assert verbs and not missing, f"verbs of the proto missing from docs/training.md's Actions table: {missing}"

