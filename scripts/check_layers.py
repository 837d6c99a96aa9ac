#!/usr/bin/env python3
"""Fails when modules depend on each other in a circle.

Reads the `crate::` paths of each Rust crate (`server/src`, `env-worker/src`), by
top-level module, and the `deskgym` imports of the Python package (function-level
imports count: a cycle broken only by importing late is still a cycle). Test code
(`#[cfg(test)]` modules, `tests/`) is left out: a test may reach anywhere.

The same reading draws the repository's layout (`docs/layout.md`): each crate's and the
package's modules layer by layer with the first sentence of their own doc comments, so
the layout doc cannot drift from the tree; CI fails when the two differ.

    python3 scripts/check_layers.py                                # each graph one way, or its cycles
    python3 scripts/check_layers.py --layers                       # and the modules layer by layer
    python3 scripts/check_layers.py --write-layout docs/layout.md  # redraw the layout between its markers
    python3 scripts/check_layers.py --check-layout docs/layout.md  # fail when the doc and the tree differ
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUST_CRATES = ("server/src", "env-worker/src", "datasets/src")
PYTHON_PACKAGE = "python-client/deskgym"

_TEST_MOD = re.compile(r"^#\[cfg\(test\)\]\s*\n\s*(pub\s+)?mod \w+", re.M)
_PATH = re.compile(r"\bcrate::(\{[^}]*\}|\w+)")


def rust_module(src: Path, f: Path) -> str | None:
    """`pool/mod.rs` and `pool/x.rs` are `pool`; `lib.rs`/`main.rs` are the root."""
    rel = f.relative_to(src).parts
    name = rel[0].removesuffix(".rs")
    return None if name in ("lib", "main") else name


def root_reexports(src: Path) -> dict[str, str]:
    """Names the crate root re-exports (`pub use error::{DesktopError, Result}`): a
    `crate::Result` is a use of `error`."""
    out: dict[str, str] = {}
    for f in ("lib.rs", "main.rs"):
        if (src / f).exists():
            for m, rest in re.findall(r"^\s*(?:pub\s+)?use (\w+)::(\{[^}]*\}|[\w:]+);", (src / f).read_text(), re.M):
                for name in re.findall(r"(\w+)\s*(?:[,}]|$)", rest) if rest.startswith("{") else [rest.split("::")[-1]]:
                    out[name] = m
    return out


def test_files(src: Path) -> set[Path]:
    """Files of modules declared under `#[cfg(test)]` (`mod tests;` beside the code)."""
    out = set()
    for f in src.rglob("*.rs"):
        for name in re.findall(r"#\[cfg\(test\)\]\s*\n\s*mod (\w+);", f.read_text()):
            here = f.parent if f.name in ("mod.rs", "lib.rs", "main.rs") else f.parent / f.stem
            out |= {here / f"{name}.rs", here / name / "mod.rs"}
    return out


def rust_graph(src: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    alias = root_reexports(src)
    tests = test_files(src)
    for f in sorted(src.rglob("*.rs")):
        me = rust_module(src, f)
        if me is None or "bin" in f.relative_to(src).parts or f in tests:
            continue
        text = f.read_text()
        m = _TEST_MOD.search(text)
        if m:
            text = text[: m.start()]
        text = re.sub(r"//[^\n]*", "", text)
        deps = graph.setdefault(me, set())
        for p in _PATH.findall(text):
            names = re.findall(r"(?:^|[{,])\s*(\w+)", p) if p.startswith("{") else [p]
            deps.update(alias.get(n, n) for n in names)
        deps.discard(me)
    known = set(graph)
    return {m: {d for d in ds if d in known} for m, ds in graph.items()}


def python_graph(pkg: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for f in sorted(pkg.rglob("*.py")):
        rel = f.relative_to(pkg).parts
        if rel[0] == "v1":
            continue
        me = rel[0].removesuffix(".py")
        if me == "__init__":
            continue  # the package's face re-exports everything
        deps = graph.setdefault(me, set())
        for node in ast.walk(ast.parse(f.read_text())):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("deskgym"):
                parts = node.module.split(".")
                names = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("deskgym.")]
            deps.update(n for n in names if n not in (me, "v1"))
    known = set(graph)
    return {m: {d for d in ds if d in known} for m, ds in graph.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def layers(graph: dict[str, set[str]]) -> list[list[str]]:
    """Modules by layer: each depends only on layers before its own."""
    placed: dict[str, int] = {}
    while len(placed) < len(graph):
        for m in sorted(graph):
            if m not in placed and all(d in placed for d in graph[m]):
                placed[m] = 1 + max((placed[d] for d in graph[m]), default=-1)
    by: dict[int, list[str]] = {}
    for m, n in placed.items():
        by.setdefault(n, []).append(m)
    return [sorted(by[n]) for n in sorted(by)]


LAYOUT_BEGIN = "<!-- layout: generated by scripts/check_layers.py --write-layout; do not edit by hand -->"
LAYOUT_END = "<!-- /layout -->"


def first_sentence(doc: str) -> str:
    """The first sentence of a doc comment's first paragraph, as one table cell."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    m = re.search(r"\.(\s+[A-Z`(]|$)", para)
    cut = para[: m.start() + 1] if m else para
    return cut.replace("|", "\\|") or "—"


def rust_doc(f: Path) -> str:
    lines = []
    for line in f.read_text().splitlines():
        if line.startswith("//!"):
            lines.append(line[3:].removeprefix(" "))
        elif lines or line.strip():
            break
    return first_sentence("\n".join(lines)) if lines else "—"


def python_doc(f: Path) -> str:
    doc = ast.get_docstring(ast.parse(f.read_text()))
    return first_sentence(doc) if doc else "—"


def _module_files(src: Path, name: str, ext: str) -> tuple[Path, list[Path]]:
    """A module's own file, and the files of its folder (a room) beside it."""
    folder = src / name
    if folder.is_dir():
        head = folder / ("mod.rs" if ext == ".rs" else "__init__.py")
        tests = test_files(src) if ext == ".rs" else set()
        rest = [
            f for f in sorted(folder.rglob(f"*{ext}")) if f != head and f not in tests and not f.name.startswith("test")
        ]
        return head, rest
    return src / f"{name}{ext}", []


def layout_table(src: Path, graph: dict[str, set[str]], ext: str) -> list[str]:
    doc = rust_doc if ext == ".rs" else python_doc
    rows = ["| layer | module | what |", "|---|---|---|"]
    for i, layer in enumerate(layers(graph)):
        for name in layer:
            head, rest = _module_files(src, name, ext)
            shown = f"`{name}/`" if rest or head.parent != src else f"`{name}`"
            rows.append(f"| {i} | {shown} | {doc(head) if head.exists() else '—'} |")
            rows += [f"| | `{f.relative_to(src).as_posix()}` | {doc(f)} |" for f in rest]
    return rows


def _cargo_field(toml: Path, key: str) -> str:
    m = re.search(rf'^{key}\s*=\s*"([^"]*)"', toml.read_text(), re.M)
    return m.group(1) if m else "—"


def _script_doc(f: Path) -> str:
    if f.suffix == ".py":
        return python_doc(f)
    lines = [ln[1:].strip() for ln in f.read_text().splitlines()[1:] if ln.startswith("#")]
    return first_sentence("\n".join(lines[:3])) if lines else "—"


def _rel(f: Path) -> str:
    return f.relative_to(ROOT).as_posix()


def _file_table(files: list[tuple[Path, str]]) -> list[str]:
    return ["| file | what |", "|---|---|", *(f"| `{_rel(f)}` | {doc} |" for f, doc in files)]


def _folders() -> list[str]:
    cargo = (ROOT / "Cargo.toml").read_text()
    members = re.findall(r'"([^"]+)"', re.search(r"members\s*=\s*\[([^]]*)\]", cargo).group(1))
    out = ["## Folders", "", "| folder | what |", "|---|---|"]
    for m in members:
        toml = ROOT / m / "Cargo.toml"
        out.append(f"| `{m}/` | crate `{_cargo_field(toml, 'name')}`: {_cargo_field(toml, 'description')} |")
    pyproject = ROOT / "python-client" / "pyproject.toml"
    out += [
        f"| `python-client/` | package `deskgym`: {_cargo_field(pyproject, 'description')} |",
        "| `scripts/` | setup, the two commands and the CI checks (below) |",
        "| `docs/` | the guides, the protocol reference, the decisions, this layout |",
        "",
    ]
    return out


def render_layout() -> str:
    """The layout, drawn from the tree: folders, then each crate's and the package's
    modules lowest layer first, binaries, benches and scripts."""
    out = _folders()
    for crate in RUST_CRATES:
        src = ROOT / crate
        name = _cargo_field(src.parent / "Cargo.toml", "name")
        out += [f"## `{crate}` (crate `{name}`), lowest layer first", ""]
        out += [*layout_table(src, rust_graph(src), ".rs"), ""]
        bins = sorted((src / "bin").glob("*.rs")) + [f for f in (src / "main.rs",) if f.exists()]
        if bins:
            out += ["Binaries: " + "; ".join(f"`{_rel(f)}` ({rust_doc(f)})" for f in bins), ""]
    pkg = ROOT / PYTHON_PACKAGE
    out += [f"## `{PYTHON_PACKAGE}` (package `deskgym`), lowest layer first", ""]
    out += [*layout_table(pkg, python_graph(pkg), ".py"), ""]
    protos = ", ".join(f"`{_rel(f)}`" for f in sorted((ROOT / "proto").rglob("*.proto")))
    out += ["## `proto/`", "", f"The wire contract, the single source of truth: {protos}.", ""]
    benches = [(f, rust_doc(f)) for f in sorted((ROOT / "benches" / "benches").glob("*.rs"))]
    benches += [(f, python_doc(f)) for f in sorted((ROOT / "benches").glob("*.py"))]
    out += ["## `benches/`", "", *_file_table(benches), ""]
    scripts = [(f, _script_doc(f)) for f in sorted((ROOT / "scripts").iterdir()) if f.is_file()]
    out += ["## `scripts/`", "", *_file_table(scripts)]
    return "\n".join(out) + "\n"


def layout_doc(path: Path) -> tuple[str, str]:
    """(the doc as it is, the doc with its generated block redrawn)."""
    text = path.read_text()
    if LAYOUT_BEGIN not in text or LAYOUT_END not in text:
        raise SystemExit(f"{path}: no layout markers ({LAYOUT_BEGIN} ... {LAYOUT_END})")
    head, rest = text.split(LAYOUT_BEGIN, 1)
    _, tail = rest.split(LAYOUT_END, 1)
    return text, f"{head}{LAYOUT_BEGIN}\n\n{render_layout()}\n{LAYOUT_END}{tail}"


def layout_main(flag: str, path: Path) -> int:
    text, drawn = layout_doc(path)
    if flag == "--write-layout":
        path.write_text(drawn)
        return 0
    if text != drawn:
        print(f"{path}: the layout differs from the tree; redraw it with: python3 scripts/check_layers.py --write-layout {path}")
        return 1
    print(f"{path}: the layout matches the tree")
    return 0


def main() -> int:
    for flag in ("--write-layout", "--check-layout"):
        if flag in sys.argv:
            return layout_main(flag, Path(sys.argv[sys.argv.index(flag) + 1]))
    # The detector itself: a check that could never fail would prove nothing.
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    graphs = {c: rust_graph(ROOT / c) for c in RUST_CRATES}
    graphs[PYTHON_PACKAGE] = python_graph(ROOT / PYTHON_PACKAGE)
    bad = False
    for name, g in graphs.items():
        found = cycles(g)
        if found:
            bad = True
            for c in found:
                edges = [f"{a} -> {b}" for a in c for b in sorted(g[a]) if b in c]
                print(f"{name}: modules in a cycle: {', '.join(c)} ({'; '.join(edges)})")
        else:
            print(f"{name}: one way, {len(g)} modules in {len(layers(g))} layers")
            if "--layers" in sys.argv:
                for i, layer in enumerate(layers(g)):
                    print(f"  {i}: {' '.join(layer)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
