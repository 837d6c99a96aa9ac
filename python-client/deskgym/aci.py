"""The shape of ACI's session (spec §2), written once for :class:`deskgym.Session` and
:class:`deskgym.aio.AsyncSession`: the results their verbs return, each verb's arguments
checked and turned into its action or request, and each reply read back. The two faces
differ only in how they wait; everything a verb decides before or after its RPC is here,
so a wrong argument is refused the same way, before any call, by both.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deskgym.a11y import Element
from deskgym.calls import CheckpointInfo, Pool, snapshot_kind
from deskgym.env import fidelity_name
from deskgym.errors import DeskgymError
from deskgym.execution import ExecResult
from deskgym.v1 import deskgym_pb2 as pb

__all__ = [
    "IN_SANDBOX",
    "MAX_CODE",
    "RUN_GRACE_S",
    "UNSANDBOXED",
    "Acted",
    "Restored",
    "RunError",
    "RunResult",
    "SessionState",
    "Shot",
]

#: The capabilities a new session asks for when none are named: the in-sandbox powers
#: (§1 principle 8: the guest does real work; crossing the boundary, ``network``, is
#: asked for by name), each only where the server's policy allows it.
IN_SANDBOX = ("exec", "files", "clipboard", "windows", "launch_app")

#: The one profile without a sandbox (the bundled task app's), where no boundary verb runs.
UNSANDBOXED = "tasks"

#: The largest ``code`` a session's ``run`` sends (the server's ``max_exec_stdin`` is
#: checked too, with its own message).
MAX_CODE = 1 << 20

#: Seconds an ``exec`` carrying a ``run()`` may take beyond the code's own timeout: the
#: interpreter interrupts the code at its timeout and answers; this is for the answer.
RUN_GRACE_S = 15.0


# -- what the verbs return --------------------------------------------------------------


@dataclass(frozen=True)
class Shot(Mapping[str, Any]):
    """A screenshot as ACI's §2 returns it: ``shot["png"]`` (bytes, or ``shot["jpeg"]``),
    ``shot["w"]``, ``shot["h"]``; the wire observation (frame geometry, pointer, hash)
    is :attr:`observation`."""

    observation: pb.Observation

    def _items(self) -> dict[str, Any]:
        o = self.observation
        fmt = "jpeg" if o.encoding == pb.IMAGE_ENCODING_JPEG else "png"
        return {fmt: bytes(o.frame), "w": o.width, "h": o.height}

    def __getitem__(self, key: str) -> Any:
        return self._items()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return 3


@dataclass(frozen=True)
class Acted:
    """What an action did: the task's reward, whether its episode ended, and the hash of
    the screen it left (equal hashes are equal pixels)."""

    reward: float
    terminated: bool
    truncated: bool
    frame_hash: str
    #: The action's number in its episode (the server's ``step_index``: the recording's
    #: ``steps`` row), and that episode's number on this desktop.
    step_index: int = 0
    episode: int = 0

    @classmethod
    def of(cls, r: pb.StepResult) -> Acted:
        """A Step reply as the session's verbs return it."""
        return cls(r.reward, r.terminated, r.truncated, r.observation.frame_hash, r.info.step_index, r.info.episode)


@dataclass(frozen=True)
class RunError:
    """The exception a session's ``run`` raised inside the interpreter."""

    #: The exception's class name (``"ZeroDivisionError"``, ``"SyntaxError"``,
    #: ``"TimeoutError"`` when the code ran past its timeout).
    type: str
    message: str
    #: Python's traceback text, starting in the run's own code (``File "<run-3>"``).
    traceback: str


@dataclass(frozen=True)
class RunResult:
    """The answer of a session's ``run`` (the old shinken's rich result)."""

    #: What the code wrote on stdout and stderr (its child processes too), in order,
    #: without the final newline: ``run("print(30)").output == "30"``.
    output: str
    #: The exception, or ``None`` when the code ran to its end.
    error: RunError | None
    #: ``repr`` of the last statement's value when it is an expression (as a REPL shows
    #: it), else ``None``.
    value_repr: str | None
    #: Time the code ran, measured in the interpreter.
    duration_ms: float
    #: ``output`` (past 128 KiB) or ``value_repr`` (past 8 KiB) was cut.
    truncated: bool
    #: The namespace was empty when this code started: the session's first ``run``, or
    #: the first since the desktop's session restarted (a restore; see docs/agents.md).
    fresh: bool

    @property
    def ok(self) -> bool:
        """The code raised nothing."""
        return self.error is None


@dataclass(frozen=True)
class Restored:
    """What a session's ``restore`` rebuilt: ``fidelity`` ``"exact"`` when the screen's
    hash equals the checkpoint's, else ``"diverged"`` (both hashes given, and
    ``left_at_step``: the 1-based step where the rebuild left the original's path);
    ``replayed_from_step``: where its replay began (0: from a reset; else the step of
    the parked replica it took); ``idle_ms``: how long the replay waited for the apps
    to go idle where the original's agent had paused (decision 203)."""

    fidelity: str
    expected_hash: str
    frame_hash: str
    left_at_step: int = 0
    replayed_from_step: int = 0
    idle_ms: int = 0

    @classmethod
    def of(cls, r: pb.RestoreResponse) -> Restored:
        """A Restore reply as the session's ``restore`` returns it."""
        return cls(fidelity_name(r.fidelity), r.expected_hash, r.observation.frame_hash, r.path.left_at_step,
                   r.path.replayed_from_step, r.path.idle_ms)


class SessionState:
    """What a session is besides its verbs, the same for :class:`deskgym.Session` and
    :class:`deskgym.aio.AsyncSession` (each also a desktop of its client's, which sets
    ``env_id``): its id, what its desktop was made as, and whether it is still open."""

    env_id: str

    def __init__(self, *, own_client: bool, profile: str | None, capabilities: tuple[str, ...] | None,
                 record: str | None, fidelity: str | None, snapshot_kind: str | None) -> None:
        # Whether closing the session closes its client too (one it made itself).
        self._own_client = own_client
        self._closed = False
        # The last screen's hash, sent as if_none_match: an unchanged screen costs no bytes.
        self._last_hash: str | None = None
        #: The desktop profile, and the capabilities its pool was granted.
        self.profile, self.capabilities = profile, capabilities
        #: The run name this session records under (``None``: not recording).
        self.record = record
        #: A fork replica's fidelity (``"exact"`` / ``"diverged"``), else ``None``.
        self.fidelity = fidelity
        self._snapshot_kind = snapshot_kind

    @property
    def id(self) -> str:
        """The session id ``connect`` reattaches with: the desktop's env id (the server's
        opaque id; the server tells its owner the rest, ``GetEnv``)."""
        return self.env_id

    def client_open(self) -> bool:
        """Whether this session's client can still call (it is closed with an owned one)."""
        return not (self._closed and self._own_client)

    def _live(self) -> None:
        """Refuses a verb once the session is closed or detached, before any call: its
        desktop may live on (a fork's pool, a detached one) and answer someone else."""
        if self._closed:
            raise closed_session(self.env_id)


# -- arguments checked, actions built ----------------------------------------------------


def _bad(field: str, msg: str) -> DeskgymError:
    return DeskgymError("INVALID_ARGUMENT", f"{field}: {msg}", field)


def _int(field: str, v: Any) -> int:
    # bool is an int to Python; a True pixel is a caller's slip, not a coordinate.
    if not isinstance(v, int) or isinstance(v, bool):
        raise _bad(field, f"expected an int, got {type(v).__name__} {v!r}")
    return v


def _str(field: str, v: Any) -> str:
    if not isinstance(v, str):
        raise _bad(field, f"expected a str, got {type(v).__name__}")
    return v


def point_action(verb: str, target: Element | str | None, x: int | None, y: int | None,
                 **extra: Any) -> dict[str, Any]:
    """The action of a pointer verb (``click``, ``double_click``, ``right_click``,
    ``move``, ``scroll``) on an element (a tree's :class:`deskgym.Element` or its ref
    ``"e12"``) or the pixel ``x``, ``y``; ``extra``'s values are whole numbers (``count``,
    ``dx``, ``dy``) or, for ``button``, a name."""
    a: dict[str, Any] = {"verb": verb}
    for k, v in extra.items():
        # `pixels` is the scroll verb's own flag, never the caller's.
        a[k] = _str(k, v) if k == "button" else v if k == "pixels" else _int(k, v)
    if target is not None:
        if x is not None or y is not None:
            raise DeskgymError("INVALID_ARGUMENT", f"{verb}: give an element or x=/y=, not both")
        if not isinstance(target, (Element, str)):
            raise _bad("target", f"expected an Element or its ref ('e12'), got {type(target).__name__}")
        a["ref"] = target.ref if isinstance(target, Element) else target
    elif x is not None or y is not None:
        if x is None or y is None:
            raise DeskgymError("INVALID_ARGUMENT", f"{verb}: give both x= and y=")
        a["x"], a["y"] = _int("x", x), _int("y", y)
    return a


def type_action(text: str) -> dict[str, Any]:
    """The action of ``type(text)``."""
    return {"verb": "type_text", "text": _str("text", text)}


def key_action(keys: str) -> dict[str, Any]:
    """The action of ``key(keys)`` (X keysym names: ``"Return"``, ``"ctrl+s"``)."""
    if not _str("keys", keys):
        raise _bad("keys", "empty: name a key or a chord, e.g. 'Return' or 'ctrl+s'")
    return {"verb": "key", "keys": keys}


def check_observe(structured: bool, options: Mapping[str, Any]) -> None:
    """``observe``'s options go with ``structured=True`` only."""
    if not isinstance(structured, bool):
        raise _bad("structured", f"expected a bool, got {type(structured).__name__}")
    if options and not structured:
        raise DeskgymError("INVALID_ARGUMENT", f"observe() takes {sorted(options)} only with structured=True")


def check_fork(checkpoint: Any, n: Any) -> None:
    """``fork``'s checkpoint (one, its id, or ``None``: saved now) and ``n`` (1 or more)."""
    if checkpoint is not None and not isinstance(checkpoint, (CheckpointInfo, str)):
        raise _bad("checkpoint", f"expected a checkpoint (save()) or its id, got {type(checkpoint).__name__}")
    if _int("n", n) < 1:
        raise _bad("n", f"{n} replicas: fork makes 1 or more")


def check_checkpoint(checkpoint: Any) -> None:
    """``restore``'s checkpoint: one of :meth:`save`'s, or its id."""
    if not isinstance(checkpoint, (CheckpointInfo, str)):
        raise _bad("checkpoint", f"expected a checkpoint (save()) or its id, got {type(checkpoint).__name__}")


def closed_session(session_id: str) -> DeskgymError:
    """The error of a verb on a closed (or detached) session."""
    return DeskgymError("FAILED_PRECONDITION",
                        f"session {session_id} is closed: connect() makes another (connect(id) reattaches a detached one)")


# -- run(code): one exec of the interpreter program ---------------------------------------


def run_exec(code: Any, timeout: Any) -> tuple[list[str], str, float]:
    """The ``exec`` that carries ``run(code, timeout=)``: its argv (the sandbox's
    ``python3`` running :mod:`deskgym.interpreter` as a client of the session's
    interpreter), its stdin and its own timeout; the arguments checked first."""
    if not isinstance(code, str):
        raise DeskgymError("INVALID_ARGUMENT", f"code: expected a str of Python, got {type(code).__name__}")
    if len(code.encode()) > MAX_CODE:
        raise DeskgymError("INVALID_ARGUMENT", f"code: {len(code.encode())} bytes is over {MAX_CODE}; "
                           "put large inputs in a file (put_file) and read it from the code")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise DeskgymError("INVALID_ARGUMENT", f"timeout: {timeout} is not a positive number of seconds")
    from deskgym import interpreter

    src = pathlib.Path(interpreter.__file__).read_text(encoding="utf-8")
    req = json.dumps({"code": code, "timeout": timeout})
    return ["python3", "-c", src, "ask", interpreter.SOCKET], req, float(timeout) + RUN_GRACE_S


def run_result(r: ExecResult) -> RunResult:
    """The interpreter's answer to a ``run`` (the ``exec``'s result) as a
    :class:`RunResult`; an interpreter that could not answer is an error."""
    if r.exit_code != 0 or r.timed_out:
        why = "timed out" if r.timed_out else f"exited {r.exit_code}"
        raise DeskgymError("UNAVAILABLE", f"the sandbox's Python interpreter {why}: {r.stderr.strip()[-500:]}")
    if not r.stdout.strip():
        raise DeskgymError(
            "ABORTED",
            "the interpreter ended while it ran the code (os._exit, a signal, out of memory): its namespace "
            "is gone, and the next run() starts a fresh one",
        )
    try:
        d = json.loads(r.stdout)
    except ValueError:
        raise DeskgymError("INTERNAL", f"the interpreter's answer is not JSON: {r.stdout[:200]!r}") from None
    if "protocol_error" in d:
        raise DeskgymError("INTERNAL", f"the interpreter refused the request: {d['protocol_error']}")
    err = d["error"]
    return RunResult(
        output=d["output"], error=RunError(err["type"], err["message"], err["traceback"]) if err else None,
        value_repr=d["value_repr"], duration_ms=float(d["duration_ms"]), truncated=bool(d["truncated"]),
        fresh=bool(d["fresh"]),
    )


# -- lifecycles: connect, reattach, fork ------------------------------------------------------


def default_capabilities(caps: pb.Capabilities, task: str, profile: str | None) -> list[str]:
    """What a new session asks for when the caller names nothing: the in-sandbox powers
    (:data:`IN_SANDBOX`) the server's policy allows, none on the unsandboxed profile."""
    runs = profile or next((t.profile for t in caps.tasks if t.id == task), "")
    # The `tasks` profile has no sandbox, hence no boundary verbs (decision 44).
    allowed = set(caps.allowed_capabilities) if runs != UNSANDBOXED else set()
    return [x for x in IN_SANDBOX if x in allowed]


def split_id(session_id: str) -> tuple[str | None, str]:
    """A session id's pool (``None`` in today's form) and env: ``"<env id>"``
    (a session's ``id``), or the first form ``"<pool id>/<env id>"``, still taken."""
    if not isinstance(session_id, str):
        raise _bad("session_id", f"expected a session's id (a str), got {type(session_id).__name__}")
    pool_id, sep, env_id = session_id.rpartition("/")
    if not env_id or (sep and not pool_id) or "/" in pool_id or ":" in session_id:
        raise DeskgymError(
            "INVALID_ARGUMENT",
            f"session id {session_id!r} is not an env id (Session.id); a server address goes in address=",
        )
    return (pool_id if sep else None), env_id


def check_reattach(pool_options: Mapping[str, Any], options: Any, seed: Any, capabilities: Any) -> None:
    """``connect(session_id)`` reattaches: pool options have nothing to shape."""
    if pool_options or options is not None or seed is not None or capabilities is not None:
        raise DeskgymError("INVALID_ARGUMENT", "connect(session_id) reattaches: it takes no pool options")


def not_found(session_id: str) -> DeskgymError:
    """A session id that names no live desktop of the caller's (closed, reaped, never
    made, or another principal's: the same answer, so nothing says it exists)."""
    return DeskgymError("NOT_FOUND", f"no live session {session_id!r} of yours (closed, reaped, or never made)")


@dataclass(frozen=True)
class Attached:
    """What the server says of a desktop a session reattaches to (``GetEnv``): the pool
    the session then holds and how it reads."""

    pool: Pool
    profile: str
    capabilities: tuple[str, ...]
    record: str | None
    snapshot_kind: str


def attached(session_id: str, info: pb.EnvInfo) -> Attached:
    """``GetEnv``'s answer for a reattaching ``session_id`` (in the first form, its pool
    must be the env's)."""
    pool_id, env_id = split_id(session_id)
    if pool_id is not None and pool_id != info.pool_id:
        raise not_found(session_id)
    caps = tuple(info.capabilities)
    pool = Pool(info.pool_id, [env_id], info.screen.width, info.screen.height, info.max_steps,
                profile=info.profile, capabilities=caps)
    return Attached(pool, info.profile, caps, info.record or None, snapshot_kind(info.snapshot_kind))


def fork_pool(r: pb.ForkResponse, checkpoint: CheckpointInfo | str, profile: str | None,
              capabilities: Sequence[str] | None) -> Pool:
    """The pool a fork's replicas stand on (the last of their sessions to close closes it)."""
    width, height = (checkpoint.width, checkpoint.height) if isinstance(checkpoint, CheckpointInfo) else (0, 0)
    return Pool(r.pool_id, [x.env_id for x in r.replicas], width, height, 0, profile=profile or "",
                capabilities=tuple(capabilities or ()))
