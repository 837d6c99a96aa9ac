"""The boundary verbs of one env (exec, files, clipboard, windows, screenshots, port
forwarding), each signature written once: :class:`deskgym.DeskgymEnv` has them as its
own methods, and a vector env hands out one :class:`Desktop` per env
(``vec.desktop(i)``). Each needs the capability it names, granted to the pool."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from deskgym.artifacts import Artifacts, TreeStats
from deskgym.client import Client, ExecResult
from deskgym.tunnel import PortForward
from deskgym.v1 import deskgym_pb2 as pb

__all__ = ["Desktop"]


class Desktop:
    """One env's boundary verbs, over ``client`` for ``env_id``."""

    client: Client
    env_id: str

    def __init__(self, client: Client, env_id: str) -> None:
        self.client, self.env_id = client, env_id

    def put_dir(self, local: str | os.PathLike[str], dest: str) -> TreeStats:
        """Sends a local directory tree into this env's sandbox (needs ``files``)."""
        return self.client.put_dir(self.env_id, local, dest)

    def get_dir(self, src: str, local: str | os.PathLike[str]) -> TreeStats:
        """Fetches a directory tree of this env's sandbox (needs ``files``)."""
        return self.client.get_dir(self.env_id, src, local)

    @property
    def artifacts(self) -> Artifacts:
        """The artifact store, uploads referenced from this env's recording."""
        return Artifacts(self.client, self.env_id)

    def put_file(self, path: str, data: bytes | str, *, mode: int = 0) -> int:
        """Writes a file in this env's sandbox (needs the ``files`` capability)."""
        return self.client.put_file(self.env_id, path, data, mode=mode)

    def get_file(self, path: str) -> bytes:
        """Reads a file of this env's sandbox (needs the ``files`` capability)."""
        return self.client.get_file(self.env_id, path)

    def list_directory(self, path: str = ".", depth: int = 1) -> pb.ListDirectoryResponse:
        """Lists a directory of this env's sandbox (needs the ``files`` capability)."""
        return self.client.list_directory(self.env_id, path, depth)

    def forward(self, port: int, local_port: int = 0) -> PortForward:
        """A local TCP port (``.port``) reaching ``port`` on this env's own loopback, inside
        its sandbox (a browser's debugging port, say); needs the ``exec`` capability.
        Close it (or use it as a context manager) when done."""
        return PortForward(self.client, self.env_id, port, local_port=local_port)

    def watch(self, **options: Any) -> Iterator[pb.ScreencastFrame]:
        """This env's screen as it changes (see :meth:`deskgym.client.Client.watch`:
        ``fps``, ``max_long_edge``, ``scope``, ``window``, ``jpeg_quality``)."""
        return self.client.watch(self.env_id, **options)

    def screenshot(self, **options: Any) -> pb.Observation:
        """A screenshot of this env (see :meth:`deskgym.client.Client.screenshot`)."""
        return self.client.screenshot(self.env_id, **options)

    def clipboard(self) -> str:
        """This env's CLIPBOARD text (needs the ``clipboard`` capability)."""
        return self.client.clipboard(self.env_id)

    def set_clipboard(self, text: str) -> None:
        """Makes ``text`` this env's CLIPBOARD (needs the ``clipboard`` capability)."""
        self.client.set_clipboard(self.env_id, text)

    def windows(self) -> list[pb.WindowInfo]:
        """This env's top-level windows (needs the ``windows`` capability)."""
        return self.client.windows(self.env_id)

    def exec(
        self,
        cmd: str | Sequence[str],
        *,
        shell: bool = False,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout: float | None = None,
    ) -> ExecResult:
        """Runs a command in this env's sandbox (see :meth:`deskgym.client.Client.exec`);
        needs ``capabilities=["exec"]`` and a sandboxed profile such as ``"desktop"``."""
        return self.client.exec(self.env_id, cmd, shell=shell, cwd=cwd, env=env, stdin=stdin, timeout=timeout)

    def exec_stream(self, cmd: str | Sequence[str], **kwargs: Any) -> Iterator[tuple[str, bytes] | ExecResult]:
        """:meth:`exec` with the output as it comes (see
        :meth:`deskgym.client.Client.exec_stream`): ``(channel, bytes)`` pieces, then the
        :class:`ExecResult`."""
        return self.client.exec_stream(self.env_id, cmd, **kwargs)
