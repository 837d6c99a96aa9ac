"""The README and the guides stay true to the tree: every relative link lands on a file
(and a heading, when it names one), the README stays a front door, and the server
reference is what the binary's own `--help` says (test_readme.py runs the snippets)."""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest
from conftest import server_binary

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The page without its code: links in fenced blocks and inline code are not links."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def broken_links(page: pathlib.Path) -> list[str]:
    out = []
    for target in _LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto: are not the tree's to check
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            out.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{target} (no heading #{anchor} in {path or page.name})")
    return out


def test_the_link_checker_can_fail(tmp_path: pathlib.Path) -> None:
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Frames without copies (same host)\n")
    page.write_text(
        "[ok](b.md#frames-without-copies-same-host) [gone](c.md) [bad](b.md#nope) `[code](d.md)` [web](https://x.y/z)\n"
    )
    bad = broken_links(page)
    assert bad[0] == "c.md (no such file)" and bad[1].startswith("b.md#nope (no heading #nope in "), bad
    assert len(bad) == 2, bad


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_resolves(page: pathlib.Path) -> None:
    bad = broken_links(page)
    assert not bad, f"{page.relative_to(ROOT)}: links that land nowhere: {bad}"


def test_the_readme_is_a_front_door() -> None:
    readme = (ROOT / "README.md").read_text()
    lines = readme.count("\n")
    assert lines <= 250, f"README.md has {lines} lines; move a section into a guide under docs/"
    assert "bash scripts/run-demo.sh\n" in readme and "bash scripts/test.sh\n" in readme, "the two commands"
    guides = {p.name for p in (ROOT / "docs").glob("*.md")}
    linked = {pathlib.Path(t.partition("#")[0]).name for t in _LINK.findall(readme) if t.startswith("docs/")}
    # The walkthroughs for contributors hang off the layout, not the front door.
    missing = sorted(guides - linked - {"adding-a-verb.md", "adding-a-family.md"})
    assert not missing, f"guides the README does not link: {missing}"


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_server_reference", ROOT / "scripts" / "gen_server_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_server_reference_is_drawn_from_help() -> None:
    gen = _generator()
    text, drawn = gen.regenerate(server_binary())
    assert text == drawn, f"docs/server.md's flag table differs from deskgym-server --help; redraw it with: {gen.FIX}"


def test_the_reference_reads_clap_help() -> None:
    """The parser on clap's long help, so a change of its format fails here, not silently."""
    gen = _generator()
    help_text = """Usage: x [OPTIONS]

Options:
      --listen <LISTEN>
          Address to listen on: host:port, or unix:PATH
          (a second line)

          [default: 127.0.0.1:50051]

      --backend <BACKEND>
          What a desktop is

          Possible values:
          - real: Real X11 desktops
          - fake: In-memory desktops, for tests

          [default: real]

      --record-video-variable-rate
          Elide repeated frames
  -h, --help
          Print help
"""
    assert gen.render(help_text).splitlines()[2:] == [
        "| `--listen` | `127.0.0.1:50051` | Address to listen on: host:port, or unix:PATH (a second line). |",
        "| `--backend` | `real` | What a desktop is. One of: `real` (Real X11 desktops), `fake` (In-memory desktops, for tests). |",
        "| `--record-video-variable-rate` | off | Elide repeated frames. |",
    ]


def test_every_decision_is_in_the_index_under_its_own_title() -> None:
    """docs/decisions.md's index by topic names each entry once, with the entry's own
    bold title, so a new or retitled decision cannot fall out of it."""
    text = (ROOT / "docs" / "decisions.md").read_text()
    index, entries = text.split("\n## Entries\n", 1)
    titles = {int(n): " ".join(t.split()).rstrip(".:") for n, t in re.findall(r"^(\d+)\. \*\*(.+?)\*\*", entries, re.M | re.S)}
    assert sorted(titles) == list(range(1, len(titles) + 1)), "entries are numbered 1..N, none removed"
    listed = [(int(n), t) for n, t in re.findall(r"^  - (\d+): (.+?)(?: \(folded into \d+\))?$", index, re.M)]
    numbers = [n for n, _ in listed]
    missing = sorted(set(titles) - set(numbers))
    twice = sorted({n for n in numbers if numbers.count(n) > 1})
    assert not missing and not twice, f"decisions missing from the index by topic: {missing}; listed twice: {twice}"
    wrong = [n for n, t in listed if titles.get(n) != t]
    assert not wrong, f"index titles that differ from their entry's bold title: {wrong}"
