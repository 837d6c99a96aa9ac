"""OSWorld's ``DesktopEnv`` on deskgym desktops: change one import line of a harness.

    # from desktop_env.desktop_env import DesktopEnv
    from deskgym.osworld import DesktopEnv

It is a subclass of ``desktop_env.desktop_env.DesktopEnv`` (PyPI ``desktop-env`` 1.0.2,
installed without its dependencies, plus the ``deskgym[osworld]`` extra), with the same
keyword arguments, methods and attributes; OSWorld's own controllers, setup steps,
getters and metric functions run unchanged. Instead of booting a VM it takes a desktop of
a deskgym server (``address=`` or ``DESKGYM_ADDRESS``, ``token=``; the server must allow
the ``exec`` and ``files`` capabilities) and serves OSWorld's in-VM HTTP interface for it
on the harness's machine (:mod:`deskgym.osworld.bridge`); a reset reverts by starting the
desktop's session afresh, not by restoring a VM snapshot. Each setup step's outcome is
kept in ``env.setup_outcomes`` (:mod:`deskgym.osworld.outcomes`).

This package is only a face: importing it imports nothing of OSWorld's. The classes live
in :mod:`deskgym.osworld.env` and are imported on first use of their name; that module
puts the lazy metric and getter packages of :mod:`deskgym.osworld._lazy` in place before
it imports ``desktop_env``, so a task never pays for torch or librosa it does not use.
The runner (:mod:`deskgym.osworld.run`) and its helpers import without ``desktop_env``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from deskgym.osworld.env import CAPABILITIES, DesktopEnv, NativeController, RecordingSetupController

__all__ = ["CAPABILITIES", "DesktopEnv", "NativeController", "RecordingSetupController"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module("deskgym.osworld.env"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'deskgym.osworld' has no attribute {name!r}")
