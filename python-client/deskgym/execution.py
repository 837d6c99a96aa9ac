"""Commands in an env's sandbox: the request from ``subprocess``-like arguments, and how a
command ended (:class:`ExecResult`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb

__all__ = ["ExecResult", "exec_request", "exec_result"]


@dataclass(frozen=True)
class ExecResult:
    """How a command run in an env's sandbox ended, and what it wrote."""

    #: Exit status, or ``None`` when a signal ended it.
    exit_code: int | None
    #: The signal that ended it (9 after a timeout), or ``None``.
    signal: int | None
    #: Output as bytes, each cut at the server's ``max_exec_output`` (256 KiB).
    stdout_bytes: bytes
    stderr_bytes: bytes
    #: True when stdout or stderr was longer than what came back.
    truncated: bool
    #: True when the time bound ended it.
    timed_out: bool
    #: Wall time of the command in milliseconds.
    duration_ms: float

    @property
    def stdout(self) -> str:
        """Stdout as text (UTF-8; undecodable bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", errors="replace")

    @property
    def stderr(self) -> str:
        """Stderr as text (UTF-8; undecodable bytes replaced)."""
        return self.stderr_bytes.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        """Exited with status 0 within its time bound."""
        return self.exit_code == 0 and not self.timed_out


def exec_request(env_id: str, cmd: str | Sequence[str], *, shell: bool = False, cwd: str | None = None,
                 env: dict[str, str] | None = None, stdin: bytes | str | None = None,
                 timeout: float | None = None) -> pb.ExecRequest:
    """An ExecRequest from :meth:`deskgym.client.Client.exec`'s arguments."""
    if shell:
        if not isinstance(cmd, str):
            raise DeskgymError("INVALID_ARGUMENT", "shell=True takes the command line as one string", "shell")
        argv: list[str] = []
        line = cmd
    else:
        argv = [cmd] if isinstance(cmd, str) else list(cmd)
        line = ""
    data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
    return pb.ExecRequest(
        env_id=env_id, argv=argv, shell=line, cwd=cwd or "", env=env or {}, stdin=data,
        timeout_ms=0 if timeout is None else max(1, int(timeout * 1000)),
    )


def exec_result(r: pb.ExecResponse, stdout: bytes, stderr: bytes) -> ExecResult:
    """An ExecResult from an Exec reply (or a stream's end, with the streamed output)."""
    return ExecResult(
        exit_code=r.exit_code if r.HasField("exit_code") else None,
        signal=r.signal if r.HasField("signal") else None,
        stdout_bytes=r.stdout or stdout,
        stderr_bytes=r.stderr or stderr,
        truncated=r.stdout_truncated or r.stderr_truncated,
        timed_out=r.timed_out,
        duration_ms=r.duration_ms,
    )
