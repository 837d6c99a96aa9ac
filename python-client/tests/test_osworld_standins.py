"""Stand-ins let a metric tell a task left undone from a task done (issue 41 item 3, the
suspects): for the tasks whose metric compares the input file with a gold one only in a
part a plain stand-in lacks (tables, images, references, a sheet's name, charts, pivot
tables), OSWorld's own metric, given the input stand-in as the result (what the desktop
holds when nothing was done) and the gold stand-in as expected, scores 0. No desktop."""

from __future__ import annotations

import json
import os
import pathlib
import uuid
from typing import Any

import pytest

from deskgym.osworld import _lazy, standins

EXAMPLES = pathlib.Path(__file__).parent / "osworld_tasks" / "evaluation_examples" / "examples"

#: The suspects a stand-in now tells apart: each scored 1 with no action before.
SUSPECTS = [
    "libreoffice_writer/66399b0d", "libreoffice_writer/6ada715d", "libreoffice_writer/936321ce",
    "libreoffice_calc/51719eea", "libreoffice_calc/1954cced", "libreoffice_calc/12382c62",
    "libreoffice_calc/535364ea", "libreoffice_calc/1de60575",
    "multi_apps/00fa164e", "multi_apps/d1acdb87", "multi_apps/deec51c9", "multi_apps/2c1ebcd7",
    # Its gold comes by a postconfig download that the expected getter reads back.
    "libreoffice_calc/4e6fcf72",
]


def _task(rel: str) -> dict[str, Any]:
    return json.loads(next(EXAMPLES.glob(rel + "*.json")).read_text())


def _undone_scores(task: dict[str, Any], cache: pathlib.Path) -> list[float]:
    """Each metric's score with the result getter reading the downloaded input (the file
    at the result's path when nobody touched it) and the expected getter the gold."""
    _lazy.install()
    from desktop_env.evaluators import metrics

    standins.fill(cache, task)
    def where(f: dict[str, str]) -> pathlib.Path:
        return cache / task["id"] / f"{uuid.uuid5(uuid.NAMESPACE_URL, f['url'])}_{os.path.basename(f['path'])}"

    downloads = {f["path"]: where(f)
                 for s in task["config"] + task["evaluator"].get("postconfig", []) if s["type"] == "download"
                 for f in s["parameters"]["files"]}
    ev = task["evaluator"]
    many = isinstance(ev["func"], list)
    funcs = ev["func"] if many else [ev["func"]]
    results = ev["result"] if many else [ev["result"]]
    expected = ev["expected"] if many else [ev["expected"]]
    options = ev.get("options", {})
    options = options if isinstance(options, list) else [options] * len(funcs)
    scores = []
    for func, res, exp, opts in zip(funcs, results, expected, options):
        assert res["type"] == "vm_file" and exp["type"] in ("cloud_file", "vm_file"), (res, exp)
        got = str(downloads[res["path"]])
        gold = cache / task["id"] / exp["dest"] if exp["type"] == "cloud_file" else downloads[exp["path"]]
        scores.append(float(getattr(metrics, func)(got, str(gold), **opts)))
    return scores


@pytest.mark.parametrize("rel", SUSPECTS)
def test_a_suspect_left_undone_scores_0_on_stand_ins(rel: str, tmp_path: pathlib.Path) -> None:
    assert _undone_scores(_task(rel), tmp_path) and not any(_undone_scores(_task(rel), tmp_path / "again"))


def test_the_gold_scores_1_against_itself(tmp_path: pathlib.Path) -> None:
    """The gold stand-in is a file the metric reads (not one it fails on): compared with
    itself, each metric above says equal."""
    _lazy.install()
    from desktop_env.evaluators import metrics

    sheet2 = {"sheet_idx0": "RNSheet2", "sheet_idx1": "ENSheet2"}
    pivot = {"type": "pivot_table", **sheet2, "pivot_props": ["col_fields", "filter", "row_fields", "data_fields"]}
    chart = {"type": "chart", **sheet2, "chart_props": ["type", "title"]}
    for name, func, opts in [
        ("g.docx", "compare_docx_tables", {}), ("g.docx", "compare_docx_images", {}),
        ("g.docx", "compare_references", {"content_only": True, "reference_base_result": 0.93}),
        ("g.xlsx", "compare_table", {"rules": [pivot]}), ("g.xlsx", "compare_table", {"rules": [chart]}),
    ]:
        path = tmp_path / name
        path.write_bytes(standins.stand_in(name, "gold") or b"")
        assert float(getattr(metrics, func)(str(path), str(path), **opts)) == 1.0, (name, func)


def test_extension_stand_ins_are_extensions_vs_code_installs() -> None:
    """vs_code/53ad5833 and multi_apps/510f64c8 unzip vscodeEvalExtension.zip and run
    ``code --install-extension vscodeEvalExtension/eval-0.0.1.vsix``: the stand-in holds
    an extension package there (a generic zip made that step fail), with the command the
    metric reads back; a bare .vsix stand-in is an extension too."""
    import io
    import zipfile

    outer = zipfile.ZipFile(io.BytesIO(standins.stand_in("vscodeEvalExtension.zip") or b""))
    inner = zipfile.ZipFile(io.BytesIO(outer.read("vscodeEvalExtension/eval-0.0.1.vsix")))
    pkg = json.loads(inner.read("extension/package.json"))
    assert (pkg["name"], pkg["version"], pkg["main"]) == ("eval", "0.0.1", "./extension.js"), pkg
    assert [c["command"] for c in pkg["contributes"]["commands"]] == ["eval.OpenProject"]
    assert "extension.vsixmanifest" in inner.namelist() and "eval.OpenProject" in inner.read("extension/extension.js").decode()
    bare = zipfile.ZipFile(io.BytesIO(standins.stand_in("ms-python.python-2024.1.vsix") or b""))
    assert json.loads(bare.read("extension/package.json"))["name"] == "ms-python.python"


def test_a_marketplace_install_is_a_cached_extension_of_that_id(tmp_path: pathlib.Path) -> None:
    """vs_code/e2b5e914's setup runs ``code --install-extension ms-python.python``, which
    an offline desktop cannot fetch: the task's files list that extension (so an offline
    run asks for it, ``cache fetch`` gets it from Open VSX and ``fill`` stands in for it),
    and the stand-in is an extension of that publisher and name, as ``code
    --list-extensions`` would name the real one. A path to a ``.vsix``, another ``code``
    command or a shell line is not a marketplace install."""
    import io
    import zipfile

    task = _task("vs_code/e2b5e914")
    [(rel, name, tag, url)] = standins.needed(task)
    assert (name, tag, url) == ("ms-python.python.vsix", "input", "https://open-vsx.org/api/ms-python/python/latest")
    assert rel == f"{uuid.uuid5(uuid.NAMESPACE_URL, url)}_{name}"
    assert standins.fill(tmp_path, task) == []
    vsix = zipfile.ZipFile(io.BytesIO((tmp_path / task["id"] / rel).read_bytes()))
    pkg = json.loads(vsix.read("extension/package.json"))
    assert (pkg["publisher"], pkg["name"]) == ("ms-python", "python"), pkg
    assert 'Id="python"' in vsix.read("extension.vsixmanifest").decode()
    assert 'Publisher="ms-python"' in vsix.read("extension.vsixmanifest").decode()
    assert standins.marketplace_install(["code", "--install-extension", "ms-python.python"]) == (2, "ms-python.python", url)
    for other in (["code", "--install-extension", "vscodeEvalExtension/eval-0.0.1.vsix"],
                  ["code", "--install-extension", "eval.vsix"], ["code", "--list-extensions"],
                  ["code", "--install-extension"], ["codium", "--install-extension", "a.b"],
                  "code --install-extension ms-python.python"):
        assert standins.marketplace_install(other) is None, other


def test_every_task_files_list_reads() -> None:
    """``needed`` over the whole task set: each getter shape OSWorld writes (one path, a
    list with ``multi``) reads; multi_apps 185f29bd's list of paths once raised, and its
    sweep row was lost with the worker that ran it."""
    tasks = [json.loads(p.read_text()) for p in EXAMPLES.glob("*/*.json")]
    assert len(tasks) > 360
    files = {t["id"]: standins.needed(t) for t in tasks}
    assert files["185f29bd-5da0-40a6-b69c-ba7f4e0324ef"]


def test_a_cache_an_earlier_version_filled_gets_the_new_stand_ins(tmp_path: pathlib.Path) -> None:
    """A reused cache once kept a History stand-in from before its fix (chrome 44ee5668
    then scored 1 with no action in one sweep): ``fill`` writes anew what an earlier
    version wrote and nobody changed, and keeps a file fetched over a stand-in, or one
    it has no record of."""
    import hashlib

    task = _task("chrome/44ee5668")
    assert standins.fill(tmp_path, task) == []
    folder = tmp_path / task["id"]
    history = folder / "history_new.sqlite"
    fresh = history.read_bytes()
    manifest = json.loads((folder / standins.MANIFEST).read_text())
    assert manifest == {"history_new.sqlite": [standins.VERSION, hashlib.sha256(fresh).hexdigest()]}

    def written_by_an_earlier_version(data: bytes) -> None:
        history.write_bytes(data)
        (folder / standins.MANIFEST).write_text(json.dumps(
            {"history_new.sqlite": [standins.VERSION - 1, hashlib.sha256(data).hexdigest()]}))

    written_by_an_earlier_version(b"an old stand-in")
    standins.fill(tmp_path, task)
    assert history.read_bytes() == fresh
    # The real file fetched over an old stand-in stays.
    written_by_an_earlier_version(b"an old stand-in")
    history.write_bytes(b"the real file")
    standins.fill(tmp_path, task)
    assert history.read_bytes() == b"the real file"
    # So does a file the folder has no record of.
    (folder / standins.MANIFEST).unlink()
    standins.fill(tmp_path, task)
    assert history.read_bytes() == b"the real file"
