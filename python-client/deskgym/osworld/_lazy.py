"""OSWorld's metric and getter packages, loaded one module at a time.

``desktop_env.evaluators.metrics`` and ``...getters`` import every module of theirs in
their ``__init__`` (and with them easyocr, torch, librosa...). These stand-ins read the
real ``__init__``'s ``from .module import (names)`` lines without running them and
import a module only when one of its names is first used, so a task whose metric needs
none of the heavy packages never imports them.

Two metric modules also import a heavy package at their top that few of their functions
use (``docs.py`` easyocr, ``vlc.py`` librosa). When such a package is not installed, the
module is imported with a stand-in for it that fails on first use, naming the extra that
brings it (``deskgym[osworld-full]``): the other metrics of that module work, and a task
never fails its reset for a package its metric does not call.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pathlib
import sys
import types
from typing import Any

__all__ = ["OPTIONAL", "install", "module_of"]

#: Heavy packages metric modules import but few of their functions use -> the extra.
OPTIONAL = {"easyocr": "osworld-full", "librosa": "osworld-full"}


class _Absent(types.ModuleType):
    """A package that is not installed: importing it works, using it raises."""

    def __init__(self, name: str, extra: str) -> None:
        super().__init__(name)
        self._why = f"this OSWorld metric needs {name}, which is not installed: pip install 'deskgym[{extra}]'"

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise ModuleNotFoundError(self._why, name=self.__name__)


def _import_with_stand_ins(name: str) -> types.ModuleType:
    """Imports ``name`` with stand-ins for the optional packages that are missing, only
    while it imports (the process's own ``import easyocr`` still fails as it should)."""
    absent = [p for p in OPTIONAL if p not in sys.modules and importlib.util.find_spec(p) is None]
    for p in absent:
        sys.modules[p] = _Absent(p, OPTIONAL[p])
    try:
        return importlib.import_module(name)
    finally:
        for p in absent:
            if isinstance(sys.modules.get(p), _Absent):
                del sys.modules[p]

_PACKAGES = ("desktop_env.evaluators.metrics", "desktop_env.evaluators.getters")


def _names(init: pathlib.Path) -> tuple[dict[str, str], ast.Module]:
    """name -> submodule, from the package's ``from .x import a, b`` statements; and
    the functions the ``__init__`` defines itself (``metrics.infeasible``), without
    its imports."""
    tree = ast.parse(init.read_text(encoding="utf-8"))
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                out[alias.asname or alias.name] = node.module
    own = ast.Module(body=[n for n in tree.body if isinstance(n, ast.FunctionDef)], type_ignores=[])
    return out, own


class _LazyPackage(types.ModuleType):
    """A package whose attributes are imported from their submodule on first access."""

    def __init__(self, name: str, path: pathlib.Path) -> None:
        super().__init__(name)
        self.__path__ = [str(path)]
        self.__file__ = str(path / "__init__.py")
        self.__package__ = name
        self._where, own = _names(path / "__init__.py")
        exec(compile(own, self.__file__, "exec"), self.__dict__)

    def __getattr__(self, attr: str) -> Any:
        where = self.__dict__.get("_where", {})
        if attr not in where:
            raise AttributeError(f"{self.__name__} has no {attr!r}")
        module = _import_with_stand_ins(f"{self.__name__}.{where[attr]}")
        value = getattr(module, attr)
        setattr(self, attr, value)
        return value


def install() -> None:
    """Puts the lazy packages in place before ``desktop_env`` imports them (idempotent)."""
    spec = importlib.util.find_spec("desktop_env")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "deskgym.osworld needs OSWorld's package: pip install --no-deps desktop-env==1.0.2 "
            "and the extra deskgym[osworld] (see the README)"
        )
    root = pathlib.Path(list(spec.submodule_search_locations)[0])
    importlib.import_module("desktop_env.evaluators")
    for name in _PACKAGES:
        if isinstance(sys.modules.get(name), _LazyPackage):
            continue
        pkg = _LazyPackage(name, root / "evaluators" / name.rsplit(".", 1)[1])
        sys.modules[name] = pkg
        setattr(sys.modules["desktop_env.evaluators"], name.rsplit(".", 1)[1], pkg)


def module_of(package: str, name: str) -> str | None:
    """The submodule of ``package`` (``"metrics"`` or ``"getters"``) that defines ``name``."""
    mod = sys.modules.get(f"desktop_env.evaluators.{package}")
    return mod._where.get(name) if isinstance(mod, _LazyPackage) else None
