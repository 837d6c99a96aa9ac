"""The persistent Python interpreter behind :meth:`deskgym.Session.run`, as the program
that runs inside an env's sandbox (its source travels in an ``exec``; nothing here is
imported by the client, and only the standard library is used, so the sandbox's own
``python3`` runs it).

One ``exec`` per ``run()`` starts this file in ``run`` mode: it reads one request (JSON:
``code``, ``timeout``) on stdin, hands it to the interpreter over a unix socket in the
sandbox's private ``/tmp`` and prints the interpreter's answer (JSON) on stdout. When
no interpreter listens there (the session's first ``run()``, or the sandbox restarted:
a reset, a restore), it starts one first, in ``serve`` mode, detached in a session of
its own so that it outlives the ``exec`` that started it and is not in the process
group an ``exec`` timeout kills. The interpreter keeps one namespace for its lifetime;
it ends with the sandbox.

Why a socket and not a long-lived ``exec``: an ``exec`` holds the env's flight (one call
per env at a time, decision 47), so a command that never ends would lock every other
verb out of the desktop.
"""

from __future__ import annotations

import ast
import io
import json
import linecache
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

#: Where the interpreter listens: the sandbox's ``/tmp`` is private to the env.
SOCKET = "/tmp/.deskgym-python.sock"
#: Bytes of output (stdout and stderr together, in order) an answer carries; more is cut
#: and flagged ``truncated``. Under ``exec``'s own 256 KiB cap on the printed answer.
MAX_OUTPUT = 128 << 10
#: Characters of ``value_repr`` an answer carries (also flagged ``truncated``).
MAX_REPR = 8 << 10


def _send_all(conn: socket.socket, data: bytes) -> None:
    conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)


def _recv_all(conn: socket.socket) -> bytes:
    chunks: list[bytes] = []
    while True:
        b = conn.recv(1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


class _Timeout(BaseException):
    """Raised in the running code when its time is up (a ``BaseException``, so a bare
    ``except Exception`` in the user's code does not swallow it)."""


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


class Interpreter:
    """One namespace and the code run in it, one request at a time."""

    def __init__(self) -> None:
        self.namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
        #: How many requests ran before the current one (0: the namespace is fresh).
        self.runs = 0

    def run(self, code: str, timeout: float) -> dict[str, Any]:
        """Runs ``code`` (a last expression's value is ``value_repr``), its output on
        fds 1 and 2 caught in order (so a subprocess's output is caught too)."""
        fresh, self.runs = self.runs == 0, self.runs + 1
        name = f"<run-{self.runs}>"
        # Source lines in tracebacks: linecache serves the run's own text.
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        out: dict[str, Any] = {"output": "", "error": None, "value_repr": None, "truncated": False, "fresh": fresh}
        capture = tempfile.TemporaryFile(prefix="deskgym-run-")
        saved = os.dup(1), os.dup(2)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(capture.fileno(), 1)
        os.dup2(capture.fileno(), 2)
        started = time.perf_counter()
        try:
            value = self._execute(code, name, timeout)
            if value is not None:
                text = repr(value)
                if len(text) > MAX_REPR:
                    text, out["truncated"] = text[:MAX_REPR], True
                out["value_repr"] = text
        except _Timeout:
            out["error"] = {"type": "TimeoutError", "message": f"the code ran past its timeout of {timeout:g} s "
                            "and was interrupted (the namespace keeps what it had set)", "traceback": ""}
        except BaseException as e:  # noqa: BLE001 - every failure of the user's code is data
            tb = e.__traceback__
            # Drop this program's own frames: the traceback starts in the user's code.
            while tb is not None and tb.tb_frame.f_code.co_filename != name:
                tb = tb.tb_next
            out["error"] = {
                "type": type(e).__name__,
                "message": str(e),
                "traceback": "".join(traceback.format_exception(type(e), e, tb)),
            }
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            out["duration_ms"] = (time.perf_counter() - started) * 1e3
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            capture.seek(0)
            data = capture.read(MAX_OUTPUT + 1)
            capture.close()
        if len(data) > MAX_OUTPUT:
            data, out["truncated"] = data[:MAX_OUTPUT], True
        text = data.decode("utf-8", "replace")
        # One print is its line: the final newline is the print's, not the output's.
        out["output"] = text[:-1] if text.endswith("\n") else text
        return out

    def _execute(self, code: str, name: str, timeout: float) -> Any:
        tree = ast.parse(code, name, "exec")
        last = tree.body[-1] if tree.body else None
        if isinstance(last, ast.Expr):
            tree.body.pop()
        else:
            last = None
        if timeout > 0:
            signal.setitimer(signal.ITIMER_REAL, timeout)
        exec(compile(tree, name, "exec"), self.namespace)  # noqa: S102 - running it is the point
        if last is None:
            return None
        return eval(compile(ast.Expression(last.value), name, "eval"), self.namespace)  # noqa: S307


def serve(path: str) -> None:
    """Listens on ``path``, says ``ready`` on stdout, then answers requests forever."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)
    srv.bind(path)
    os.umask(old)
    srv.listen(8)
    signal.signal(signal.SIGALRM, _alarm)
    # Text streams that write straight through: output lands in the capture file in
    # the order the code wrote it, whether from print() or a child process.
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", 0), write_through=True)
    sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", 0), write_through=True)
    interp = Interpreter()
    print("ready", flush=True)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        conn, _ = srv.accept()
        with conn:
            try:
                req = json.loads(_recv_all(conn))
                answer = interp.run(str(req["code"]), float(req.get("timeout", 0)))
            except Exception as e:  # noqa: BLE001 - a bad request is answered, not fatal
                answer = {"protocol_error": f"{type(e).__name__}: {e}"}
            try:
                _send_all(conn, json.dumps(answer).encode())
            except OSError:
                pass  # the asking command was killed (its exec timed out)


def _start(path: str) -> None:
    """Starts the interpreter detached (its own session) and waits for its ``ready``."""
    p = subprocess.Popen(
        [sys.executable, "-c", _own_source(), "serve", path],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    p.stdout.close()
    if line.strip() != b"ready":
        raise SystemExit(f"deskgym: the Python interpreter did not start (exit {p.poll()})")


def ask(path: str) -> None:
    """Sends the request on stdin to the interpreter (starting it when none listens)
    and prints its answer."""
    req = sys.stdin.buffer.read()
    for attempt in (0, 1):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            conn.close()
            if attempt:
                raise
            _start(path)
            continue
        with conn:
            _send_all(conn, req)
            sys.stdout.buffer.write(_recv_all(conn))
        return


def _own_source() -> str:
    """This program's text, to start the interpreter with: the ``-c`` argument it was
    started with (``sys.orig_argv``, Python 3.10+), or its file."""
    argv = getattr(sys, "orig_argv", [])
    if "-c" in argv:
        return str(argv[argv.index("-c") + 1])
    with open(__file__, encoding="utf-8") as f:
        return f.read()


if __name__ == "__main__":
    mode, where = sys.argv[1], sys.argv[2]
    if mode == "serve":
        serve(where)
    else:
        ask(where)
