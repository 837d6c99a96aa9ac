"""axstream: run a model's streamed actions on a desktop while the model still writes.

The model writes narration, then a fence of JSON lines (``axstream-spec 0.1``)::

    I'll press the OK button.
    ```jsonl
    {"op":"act","do":"click","target":{"ax":{"role":"AXButton","title":"OK"}}}
    {"op":"done","status":"success"}
    ```

Feed the text as it arrives, in chunks of any size; each line inside a fence runs on the
server the moment its newline arrives (the ``Drive`` RPC), and :meth:`Executor.feed`
returns the reports of the lines that chunk completed::

    ex = Executor(env)                      # a deskgym env (``deskgym.make``) or (client, env_id)
    for chunk in model.stream(prompt):      # any iterator of text
        for r in ex.feed(chunk):
            print(r.line, r.status, r.reason)
    ex.close()

Every fence line gets one :class:`Report`: ``executed``, ``skipped`` (not an action, or
after the burst or the task ended), ``aborted`` (an earlier line of the burst failed or
was held), ``held`` (a ``"risk": "risky"`` action under ``policy="hold"``) or ``failed``
(ran and failed: an ``assert`` whose target is not on screen, a click on an element that
is gone). ``observe`` reports carry the fresh observation; ``done`` records the agent's
verdict in the episode (``info["agent_status"]``, ``info["agent_reason"]``) and in the
``.skn`` event log.

An ``observe`` ends the model's turn: every later line, in any fence, is skipped until
the next response arrives with ``feed(chunk, turn=True)``. A held risky action runs
when confirmed (:meth:`Executor.confirm`). With ``observe=`` (``max_long_edge``,
``scope``), an observation is that shaped frame, and ``{"x","y"}`` targets after it are
its pixels, mapped to the screen through its geometry. See docs/agents.md, "axstream",
for the whole contract and its conformance table.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np

from deskgym.a11y import Tree, tree_request
from deskgym.client import Client, encoding_of, observe_spec
from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb

STATUSES = {
    pb.LINE_STATUS_EXECUTED: "executed",
    pb.LINE_STATUS_SKIPPED: "skipped",
    pb.LINE_STATUS_ABORTED: "aborted",
    pb.LINE_STATUS_HELD: "held",
    pb.LINE_STATUS_FAILED: "failed",
}

POLICIES = {"hold": pb.RISK_POLICY_HOLD, "allow": pb.RISK_POLICY_ALLOW}


@dataclass
class Report:
    """What one fence line did."""

    #: 1-based line number in the whole stream (narration counts) and fence number.
    line: int
    burst: int
    #: The line (cut at 1 KiB).
    text: str
    #: ``act``, ``assert``, ``observe``, ``done``; ``""`` for a line that did not parse.
    op: str
    #: For an act, its ``do``.
    action: str
    #: ``executed``, ``skipped``, ``aborted``, ``held`` or ``failed``.
    status: str
    #: Why it was not executed (or failed).
    reason: str
    #: For a failed line, the deskgym error code (``NOT_FOUND``, ``FAILED_PRECONDITION``...).
    code: str
    #: Milliseconds from the start of the stream: newline received, execution start, end.
    received_ms: float
    started_ms: float
    finished_ms: float
    #: For an executed act: its step's reward and episode ends.
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    #: For an executed observe: the screen (H, W, 3 uint8) and, when asked, its tree.
    frame: np.ndarray | None = None
    tree: Tree | None = None
    #: For done: ``success`` or ``failure``, and the agent's reason.
    done_status: str = ""
    done_reason: str = ""
    #: The episode's info extras after an executed act or done (a done's carry
    #: ``agent_status`` and ``agent_reason``).
    extra: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        what = self.action or self.op or "?"
        why = f" ({self.reason})" if self.reason else ""
        return f"line {self.line} [{what}] {self.status}{why}"


_END = object()


class Executor:
    """An axstream executor on one env, over the server's ``Drive`` stream.

    ``env``: a deskgym env (anything with ``client`` and ``env_id``) or a
    ``(client, env_id)`` pair. ``policy``: ``"hold"`` (default) holds risky actions and
    aborts the rest of their burst; ``"allow"`` runs them. ``tree``: observations of
    ``observe`` lines carry the element tree (``True`` or :func:`deskgym.a11y.tree_request`
    options). ``observe``: what an observation shows (:func:`deskgym.client.observe_spec`
    keywords: ``scope``, ``window``, ``max_long_edge``); pixel targets after one are its
    pixels. ``timeout``: seconds one chunk may take to run.
    """

    def __init__(
        self,
        env: Any,
        policy: str = "hold",
        *,
        encoding: str = "rgb",
        tree: bool | dict[str, Any] = False,
        observe: dict[str, Any] | None = None,
        timeout: float = 120.0,
    ) -> None:
        if policy not in POLICIES:
            raise DeskgymError("INVALID_ARGUMENT", f"policy {policy!r} is not one of {sorted(POLICIES)}")
        if isinstance(env, tuple):
            client, env_id = env
        else:
            inner = getattr(env, "unwrapped", env)  # through gymnasium.make's wrappers
            client, env_id = inner.client, inner.env_id
        self.client: Client = client
        self.env_id: str = env_id
        self.timeout = timeout
        self.reports: list[Report] = []
        self._outgoing: queue.Queue[Any] = queue.Queue()
        self._ack = 0
        self._closed = False
        treq = tree_request(**tree) if isinstance(tree, dict) else (tree_request() if tree else None)
        first = pb.DriveRequest(env_id=env_id, risky=POLICIES[policy], encoding=encoding_of(encoding), tree=treq,
                                observe=observe_spec(**observe) if observe else None)

        def requests() -> Iterator[pb.DriveRequest]:
            yield first
            while (m := self._outgoing.get()) is not _END:
                yield m

        self._call = client._stub.Drive(requests(), metadata=client._metadata)
        self._events: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._read, name="deskgym-axstream", daemon=True).start()
        self._wait_ack(self._send(""))  # surfaces a bad env or policy here, not at the first chunk

    def _read(self) -> None:
        try:
            for ev in self._call:
                self._events.put(ev)
        except grpc.RpcError as e:
            self._events.put(DeskgymError.from_rpc(e))
        self._events.put(_END)

    def _send(self, text: str, turn: bool = False, confirm: Iterable[int] = ()) -> int:
        if self._closed:
            raise DeskgymError("FAILED_PRECONDITION", "the executor is closed")
        self._ack += 1
        self._outgoing.put(pb.DriveRequest(text=text, ack=self._ack, turn=turn, confirm=list(confirm)))
        return self._ack

    def _next(self) -> Any:
        try:
            ev = self._events.get(timeout=self.timeout)
        except queue.Empty:
            self._call.cancel()
            raise DeskgymError("DEADLINE_EXCEEDED", f"no report within {self.timeout} s") from None
        if isinstance(ev, DeskgymError):
            self._closed = True
            raise ev
        return ev

    def _wait_ack(self, ack: int) -> list[Report]:
        out: list[Report] = []
        while True:
            ev = self._next()
            if ev is _END:
                self._closed = True
                raise DeskgymError("UNAVAILABLE", "the server ended the stream")
            if ev.WhichOneof("kind") == "ack":
                if ev.ack == ack:
                    return out
                continue
            out.append(self._report(ev.line))

    def _report(self, r: pb.LineReport) -> Report:
        rep = Report(
            line=r.line, burst=r.burst, text=r.text, op=r.op, action=r.action,
            status=STATUSES.get(r.status, "unknown"), reason=r.reason,
            code=_code_name(r.code) if r.code else "",
            received_ms=r.received_ms, started_ms=r.started_ms, finished_ms=r.finished_ms,
            done_status=r.done_status, done_reason=r.done_reason,
        )
        if r.HasField("result"):
            rep.reward, rep.terminated, rep.truncated = r.result.reward, r.result.terminated, r.result.truncated
            rep.extra = dict(r.result.info.extra)
        if r.HasField("info"):
            rep.extra = dict(r.info.extra)
        if r.HasField("observation"):
            rep.frame, _ = self.client.resolve(r.observation)
            if r.observation.HasField("tree"):
                rep.tree = Tree.from_proto(r.observation.tree)
        self.reports.append(rep)
        return rep

    def feed(self, chunk: str, *, turn: bool = False) -> list[Report]:
        """Sends a chunk of model text; returns the reports of the lines it completed
        (after they ran), in order. ``turn=True`` on the first chunk of the model's next
        response (after an ``observe``)."""
        return self._wait_ack(self._send(chunk, turn))

    def confirm(self, *lines: int) -> list[Report]:
        """Runs the risky actions held on ``lines`` (a person or a policy approved them);
        a second report for each: executed or failed, or skipped when the line holds
        nothing. The rest of their bursts stays aborted."""
        return self._wait_ack(self._send("", confirm=lines))

    def close(self) -> list[Report]:
        """Ends the stream: a line still waiting for its newline is reported skipped
        (never run). Returns the reports still due."""
        if self._closed:
            return []
        self._closed = True
        self._outgoing.put(_END)
        out: list[Report] = []
        while (ev := self._next()) is not _END:
            if ev.WhichOneof("kind") == "line":
                out.append(self._report(ev.line))
        return out

    def run(self, chunks: Iterable[str]) -> Iterator[Report]:
        """Feeds every chunk of a model's stream and closes; yields each report as soon
        as its line has run."""
        for chunk in chunks:
            yield from self.feed(chunk)
        yield from self.close()

    @property
    def verdict(self) -> tuple[str, str] | None:
        """The agent's ``done`` (status, reason), once a done line has run."""
        for r in self.reports:
            if r.op == "done" and r.status == "executed":
                return r.done_status, r.done_reason
        return None

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._closed:
            self._closed = True
            self._outgoing.put(_END)
            self._call.cancel()


def _code_name(code: int) -> str:
    return next((c.name for c in grpc.StatusCode if c.value[0] == code), "UNKNOWN")


def parse_all(text: str) -> list[str]:
    """The fence lines of a whole response, as a non-streaming parser would see them
    (the baseline the streaming executor is measured against)."""
    out, fenced = [], False
    for raw in text.split("\n"):
        t = raw.strip()
        if not fenced:
            fenced = t.startswith("```")
        elif t == "```":
            fenced = False
        elif t:
            out.append(t)
    return out
