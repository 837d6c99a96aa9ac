"""ACI's session (spec §2): one object for one desktop, with the verbs as methods, code
as an action with a persistent namespace, checkpoints, the recording and the video.

    s = deskgym.connect()                  # a ready desktop (profile "desktop")
    s.click(x=640, y=400); s.type("Q3 report"); s.key("ctrl+s")
    r = s.run("a = 10\\nb = 20\\nprint(a + b)")   # r.output == "30"; `a` stays
    cp = s.save(); s.restore(cp); kids = s.fork(cp, n=2)
    s.close()

It is the agent developer's face over the same machinery as the RL faces
(:class:`deskgym.Client`, :class:`deskgym.Desktop`, :class:`deskgym.DeskgymEnv`): the
boundary verbs (``exec``, files, clipboard, windows, ``forward``) are
:class:`~deskgym.Desktop`'s, actions go through :func:`deskgym.to_proto`, trees through
:func:`deskgym.env.read_tree`, pools through :class:`deskgym.PoolOptions`.

Lifecycles (§6's create / connect / ephemeral): :func:`connect` makes a desktop, or
with a session id reattaches to a live one of the caller's (its principal's: another
principal's id is NOT_FOUND, as every unknown id); :func:`ephemeral` is ``connect`` as
a context manager that closes the desktop at the block's end.

:meth:`Session.events` is the desktop's event log as it happens, the records its
recording (:attr:`Session.replay`) holds.

:meth:`Session.drive` runs an agent on the desktop in one call (:mod:`deskgym.drive`).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from deskgym import aci
from deskgym.a11y import Element, Tree
from deskgym.aci import (
    IN_SANDBOX,
    MAX_CODE,
    RUN_GRACE_S,
    UNSANDBOXED,
    Acted,
    Restored,
    RunError,
    RunResult,
    Shot,
)
from deskgym.drive import DriveResult, drive_session
from deskgym.actions import to_proto
from deskgym.calls import CapabilityRequest, snapshot_kind
from deskgym.client import DEFAULT_LEASE_TTL_S, Checkpoint, Client, EventStream, Pool
from deskgym.desktop import Desktop
from deskgym.env import fidelity_name, known_hashes, read_tree
from deskgym.errors import DeskgymError
from deskgym.options import PoolOptions
from deskgym.v1 import deskgym_pb2 as pb

# The results, constants and argument checks are deskgym.aci's, shared with the asyncio
# session (deskgym.aio.AsyncSession); they are named here too, where they were first.
__all__ = ["IN_SANDBOX", "MAX_CODE", "RUN_GRACE_S", "UNSANDBOXED", "Acted", "CapabilityRequest", "CapabilityWatcher",
           "Restored", "RunError", "RunResult", "Session", "Shot", "connect", "ephemeral"]


class _Share:
    """A pool several sessions stand on (a fork's replicas): the last to close closes it."""

    def __init__(self, pool: Pool | None, sessions: int) -> None:
        self.pool, self.sessions = pool, sessions

    def leave(self, client: Client) -> None:
        self.sessions -= 1
        if self.sessions == 0:
            pool, self.pool = self.pool, None
            client.release(pool)


class Replay:
    """A session's recording (``connect(record="run-name")``), the ``.skn`` bundle the
    server writes of everything the desktop did (actions, observations' hashes,
    rewards, episodes; decision 99). Its ``events`` table holds the records
    :meth:`Session.events` streamed, in the same order."""

    def __init__(self, session: Session) -> None:
        self._session = session

    @property
    def run(self) -> str:
        """The recording's run name."""
        run = self._session.record
        if run is None:
            raise DeskgymError(
                "FAILED_PRECONDITION",
                "this session does not record: connect(record='NAME') records it",
            )
        return run

    def save(self, path: str | os.PathLike[str]) -> str:
        """Writes the recording to ``path`` (a ``.skn`` folder :func:`deskgym.datasets.open`
        reads) and returns it. While the session lives that is what the server has
        rolled so far (every ``--record-roll-every-s``, 30 s by default, and at each
        episode's end); after :meth:`Session.close` the whole bundle."""
        run = self.run
        dest = pathlib.Path(path)
        s = self._session
        client = s.client if s.client_open() else Client(s.address, s.token)
        try:
            with tempfile.TemporaryDirectory(dir=dest.parent if str(dest.parent) else ".") as tmp:
                got = pathlib.Path(client.download_recording(run, tmp))
                if dest.exists():
                    shutil.rmtree(dest)
                got.rename(dest)
        finally:
            if client is not s.client:
                client.close()
        return str(dest)


#: What a controller's callback returns: allow (True), refuse (False), or allow a
#: ``net.egress`` request for these hosts only (a host name, or several).
Verdict = bool | str | Sequence[str]


class CapabilityWatcher:
    """The controller :meth:`Session.on_capability_required` starts: a daemon thread
    that watches the desktop's events and answers each ``capability_required`` request
    with its callback's verdict. Requests that were waiting before it started (listed by
    ``GetEnv``) are answered first. Stop it with :meth:`close` (or ``with``); it also
    ends when the desktop closes."""

    def __init__(self, session: Session, callback: Callable[[CapabilityRequest], Verdict]) -> None:
        self._client, self._env_id, self._callback = session.client, session.env_id, callback
        # Watching from here on (the call returns once the server watches), so a request
        # opened from now is in the stream, and one opened before is in GetEnv's list.
        self._stream = self._client.watch_events(self._env_id)
        self._seen: set[str] = set()
        #: Each request answered, and whether it was allowed, in order.
        self.answered: list[tuple[CapabilityRequest, bool]] = []
        #: What stopped the thread other than :meth:`close` or the desktop's end.
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="deskgym-capabilities", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for r in self._client.get_env(self._env_id).pending_capabilities:
                self._answer(CapabilityRequest.from_proto(self._env_id, r))
            for e in self._stream:
                if e.kind == "capability_required":
                    self._answer(CapabilityRequest.from_event(e))
        except DeskgymError as e:
            # The desktop closed under the listing: nothing more to answer.
            if e.code != "NOT_FOUND":
                self.error = e
        except BaseException as e:  # a thread's failure is kept for its owner to see
            self.error = e

    def _answer(self, req: CapabilityRequest) -> None:
        if req.token in self._seen:
            return
        self._seen.add(req.token)
        reason = ""
        try:
            verdict = self._callback(req)
        except Exception as e:  # a failing controller refuses rather than leaving the call to time out
            verdict, reason = False, f"the controller's callback raised {type(e).__name__}: {e}"
        allow, scope = _verdict(verdict)
        try:
            self._client.answer_capability(self._env_id, req.token, allow, scope, reason)
        except DeskgymError as e:
            # Answered meanwhile (by hand), timed out, or its desktop reset or closed:
            # the request is over either way.
            if e.code not in ("FAILED_PRECONDITION", "NOT_FOUND"):
                raise
            return
        self.answered.append((req, allow))

    def close(self) -> None:
        """Stops answering (idempotent); requests then wait for another answer or time out."""
        self._stream.close()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def __enter__(self) -> CapabilityWatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _verdict(v: Verdict) -> tuple[bool, tuple[str, ...]]:
    """A callback's verdict as AnswerCapability's ``allow`` and ``scope``."""
    if isinstance(v, bool):
        return v, ()
    hosts = (v,) if isinstance(v, str) else tuple(v)
    if not hosts or not all(isinstance(h, str) for h in hosts):
        raise TypeError(f"a capability verdict is True, False, or host names; got {v!r}")
    return True, hosts


class Session(Desktop, aci.SessionState):
    """One desktop as ACI's session: the verbs of §2 as methods. Make one with
    :func:`connect` (or :func:`ephemeral`); the boundary verbs (:meth:`exec`,
    :meth:`put_file`, :meth:`get_file`, :meth:`clipboard`, :meth:`windows`...) are
    :class:`deskgym.Desktop`'s and need the capability they name."""

    def __init__(
        self, client: Client, env_id: str, share: _Share, *, own_client: bool, profile: str | None,
        capabilities: tuple[str, ...] | None, record: str | None = None, token: str | None = None,
        fidelity: str | None = None, snapshot_kind: str | None = None,
    ) -> None:
        Desktop.__init__(self, client, env_id)
        aci.SessionState.__init__(self, own_client=own_client, profile=profile, capabilities=capabilities,
                                  record=record, fidelity=fidelity, snapshot_kind=snapshot_kind)
        self._share = share
        self.address, self.token = client.address, token
        #: The recording (:meth:`Replay.save`).
        self.replay = Replay(self)
        self._watchers: list[CapabilityWatcher] = []

    # -- identity and lifetime ---------------------------------------------------------

    @property
    def snapshot_kind(self) -> str:
        """What :meth:`save` captures (ACI §5: none | replay | disk | memory |
        process), as the server says for this desktop's profile: ``"replay"`` on every
        deskgym profile today (checkpoints replay the action log)."""
        if self._snapshot_kind is None:
            self._snapshot_kind = snapshot_kind(self.client.get_env(self.env_id).snapshot_kind)
        return self._snapshot_kind

    def close(self) -> None:
        """Ends the session: closes its desktop (for a fork's replicas, the last one
        closed closes their pool) and the client it made (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for w in self._watchers:
            w.close()
        self._share.leave(self.client)
        if self._own_client:
            self.client.close()

    def detach(self) -> str:
        """Leaves the desktop running and returns its :attr:`id`: another process
        reattaches with ``connect(id)``. Nothing renews its lease meanwhile, so that
        process must come within the lease (``connect(lease_ttl_s=...)``, 6 s by default)."""
        pool = self._share.pool
        if pool is not None:
            self.client.abandon_pool(pool.pool_id)
        sid = self.id
        self._share.pool = None
        self.close()
        return sid

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- observe -----------------------------------------------------------------------

    def screenshot(self, **options: Any) -> Shot:  # type: ignore[override]
        """The screen as ACI's §2 has it, ``{"png": bytes, "w": int, "h": int}`` (a
        :class:`Shot`; its ``observation`` is the wire reply). The options are
        :meth:`deskgym.Client.screenshot`'s: ``scope``, ``window``, ``max_long_edge``,
        ``encoding``, ``jpeg_quality``. (Overrides :meth:`Desktop.screenshot`, which
        returns the observation itself: §2's shape is the mapping.)"""
        self._live()
        return Shot(self.client.screenshot(self.env_id, **options))

    def observe(self, structured: bool = False, **options: Any) -> Shot | Tree:
        """The screen now (a :class:`Shot`), or with ``structured=True`` the
        accessibility tree (a :class:`deskgym.Tree`: ``view["e12"]`` or
        ``view["Delete all"]`` is an element that :meth:`click` takes). Tree options:
        ``osworld_xml``, ``line_budget``, ``diff_from``, ``timeout_ms``."""
        self._live()
        aci.check_observe(structured, options)
        if structured:
            return read_tree(self.client, self.env_id, **options)
        return Shot(self.client.observe(self.env_id, encoding="png"))

    # -- act ---------------------------------------------------------------------------

    def act(self, action: Mapping[str, Any] | pb.Action) -> Acted:
        """Runs any action (a dict form of :mod:`deskgym.actions` or a ``pb.Action``):
        what the sugar methods below call."""
        self._live()
        known = known_hashes(self._last_hash, [])
        r = self.client.step(self.env_id, to_proto(action), encoding="jpeg", if_none_match=known)
        self._last_hash = r.observation.frame_hash
        return Acted.of(r)

    def reset(self, seed: int | None = None) -> pb.StepInfo:
        """Starts a new episode of this desktop's task (its ``seed``, else the next one
        the server derives); the episode's info: ``instruction``, ``task``, ``seed``,
        ``episode``. A sandboxed desktop restarts its session (the :meth:`run`
        namespace with it), as a restore does."""
        self._live()
        r = self.client.reset(self.env_id, seed=seed, encoding="jpeg")
        self._last_hash = r.observation.frame_hash
        return r.info

    def _point(self, verb: str, target: Element | str | None, x: int | None, y: int | None,
               **extra: Any) -> Acted:
        return self.act(aci.point_action(verb, target, x, y, **extra))

    def click(self, target: Element | str | None = None, *, x: int | None = None, y: int | None = None,
              button: str = "left", count: int = 1) -> Acted:
        """Clicks an element (an :class:`deskgym.Element` of :meth:`observe`'s tree, or
        its ref ``"e12"``), or the pixel ``x=``, ``y=``."""
        return self._point("click", target, x, y, button=button, count=count)

    def double_click(self, target: Element | str | None = None, *, x: int | None = None,
                     y: int | None = None) -> Acted:
        """Double-clicks an element or a pixel (as :meth:`click`)."""
        return self._point("double_click", target, x, y)

    def right_click(self, target: Element | str | None = None, *, x: int | None = None,
                    y: int | None = None) -> Acted:
        """Right-clicks an element or a pixel (as :meth:`click`)."""
        return self._point("right_click", target, x, y)

    def move(self, target: Element | str | None = None, *, x: int | None = None, y: int | None = None) -> Acted:
        """Moves the pointer to an element or a pixel."""
        return self._point("move", target, x, y)

    def type(self, text: str) -> Acted:
        """Types ``text`` (any Unicode) where the keyboard focus is."""
        return self.act(aci.type_action(text))

    def key(self, keys: str) -> Acted:
        """Presses a key or a chord by X keysym names: ``"Return"``, ``"ctrl+s"``."""
        return self.act(aci.key_action(keys))

    def scroll(self, target: Element | str | None = None, *, x: int | None = None, y: int | None = None,
               dx: int = 0, dy: int = 0) -> Acted:
        """Scrolls at an element or a pixel by ``dx``/``dy`` pixels, as ACI counts them
        (sent as wheel clicks of 100 px; negative ``dy`` scrolls up)."""
        return self._point("scroll", target, x, y, dx=dx, dy=dy, pixels=True)

    # -- code as action ----------------------------------------------------------------

    def run(self, code: str, *, timeout: float = 60.0) -> RunResult:
        """Runs Python ``code`` in this session's interpreter inside the sandbox (ACI's
        ``run``): one namespace for the session, so ``run("a = 10")`` then
        ``run("print(a)")`` prints 10. Needs the ``exec`` capability (each call is one
        ``exec`` of the sandbox's ``python3``). Past ``timeout`` seconds the code is
        interrupted (a ``TimeoutError`` in :attr:`RunResult.error`; code blocked inside
        C is not interruptible, and the ``exec`` then ends ``RUN_GRACE_S`` later).

        The namespace lives as long as the desktop's session: a :meth:`restore` restarts
        the session and a :meth:`fork`'s replicas are new desktops, so after either the
        next ``run`` starts with an empty namespace (``fresh``): checkpoints replay
        actions, and ``run`` is not an action (docs/agents.md, decision 177)."""
        self._live()
        argv, stdin, bound = aci.run_exec(code, timeout)
        return aci.run_result(self.exec(argv, stdin=stdin, timeout=bound))

    # -- checkpoints -------------------------------------------------------------------

    def save(self, park: int = 0) -> Checkpoint:
        """A checkpoint of this desktop (``.snapshot_kind`` says what it holds); ``park``
        as :meth:`deskgym.Client.save`."""
        self._live()
        return self.client.save(self.env_id, park)

    def restore(self, checkpoint: Checkpoint | str) -> Restored:
        """Rewinds this desktop to ``checkpoint`` (by replay on a fresh session; the
        interpreter of :meth:`run` starts afresh)."""
        self._live()
        aci.check_checkpoint(checkpoint)
        r = self.client.restore(self.env_id, checkpoint, encoding="jpeg")
        self._last_hash = r.observation.frame_hash
        return Restored.of(r)

    def fork(self, checkpoint: Checkpoint | str | None = None, n: int = 1) -> list[Session]:
        """``n`` new desktops rebuilt at ``checkpoint`` (default: one saved now), each a
        session whose :attr:`fidelity` says whether it looks exactly like the
        checkpoint. They share this session's client; their pool closes with the last."""
        self._live()
        aci.check_fork(checkpoint, n)
        cp = self.save() if checkpoint is None else checkpoint
        r = self.client.fork(cp, n, encoding="jpeg")
        share = _Share(aci.fork_pool(r, cp, self.profile, self.capabilities), len(r.replicas))
        kids = []
        for x in r.replicas:
            s = Session(self.client, x.env_id, share, own_client=False, profile=self.profile,
                        capabilities=self.capabilities, token=self.token, fidelity=fidelity_name(x.fidelity),
                        snapshot_kind=self._snapshot_kind)
            s._last_hash = x.observation.frame_hash
            kids.append(s)
        return kids

    # -- the agent loop (ACI's drive) ---------------------------------------------------

    def drive(self, agent: Any, task: str | None = None, *, max_steps: int = 50, max_turns: int | None = None,
              seed: int | None = None) -> DriveResult:
        """ACI's ``drive``: runs ``agent`` on this desktop until the task ends, the agent
        stops, or ``max_steps`` actions; a :class:`~deskgym.drive.DriveResult`
        (``success``, ``reward``, ``steps``, ``recording``, ``stop``, ``error``, each
        step). ``agent``: :class:`~deskgym.drive.models.AnthropicAgent`,
        :class:`~deskgym.drive.models.OpenAIAgent`,
        :class:`~deskgym.drive.models.ChatAgent` (text through :mod:`deskgym.dialect`),
        :func:`deskgym.agent` (one of them by model name) or a callable
        ``agent(observation) -> actions``. ``task``: ``None`` or this desktop's task id
        starts a new episode (``seed``) and gives the agent its instruction; any other
        text is the instruction, on the desktop as it is. See
        :func:`deskgym.drive.drive_session`."""
        return drive_session(self, agent, task, max_steps=max_steps, max_turns=max_turns, seed=seed)

    # -- boundary powers (ACI's unlock) --------------------------------------------------

    @contextmanager
    def unlock(
        self, capability: str, scope: str | Sequence[str] = (), reason: str = ""
    ) -> Iterator[pb.UnlockResponse]:
        """``with s.unlock("net.egress", scope="pypi.org", reason="install pandas"):``
        holds a boundary power on this desktop for the block (:meth:`Client.unlock`);
        it is released when the block ends, however it ends. Refused: a
        :class:`DeskgymError` (PERMISSION_DENIED naming what the operator would list)."""
        grant = self.client.unlock(self.env_id, capability, scope, reason)
        try:
            yield grant
        finally:
            if self.client_open():
                self.client.relock(self.env_id, grant.grant_id)

    def on_capability_required(self, callback: Callable[[CapabilityRequest], Verdict]) -> CapabilityWatcher:
        """ACI's control channel: answers every call on this desktop that waits for a
        boundary power the operator's policy says to ask for (``--ask-unlock``; an
        :meth:`unlock`, or a verb such as :meth:`exec` on a desktop without the power).
        ``callback(request)`` (a :class:`CapabilityRequest`) runs on a daemon thread and
        returns True to grant the power (as :meth:`unlock` would, until relocked or the
        next reset), False to refuse it (the call raises PERMISSION_DENIED), or host
        names to grant a ``net.egress`` request for those only. A callback that raises
        refuses. Without a controller the server's timeout refuses
        (``GetCapabilities().ask.timeout_ms``). Returns the watcher; :meth:`close` stops
        it (closing the session does too)."""
        w = CapabilityWatcher(self, callback)
        self._watchers.append(w)
        return w

    def answer_capability(
        self, request: CapabilityRequest | str, allow: bool = True, scope: str | Sequence[str] = (), reason: str = ""
    ) -> pb.AnswerCapabilityResponse:
        """Answers one capability request by hand (see :meth:`on_capability_required`):
        ``request`` or its token; ``scope`` narrows an allowed ``net.egress`` request."""
        token = request.token if isinstance(request, CapabilityRequest) else request
        return self.client.answer_capability(self.env_id, token, allow, scope, reason)

    def pending_capabilities(self) -> list[CapabilityRequest]:
        """The capability requests waiting on this desktop now, oldest first."""
        info = self.client.get_env(self.env_id)
        return [CapabilityRequest.from_proto(self.env_id, r) for r in info.pending_capabilities]

    # -- streams -----------------------------------------------------------------------

    def events(self) -> EventStream:
        """ACI's ``events()``: this desktop's typed event log as it happens, an iterator
        of :class:`deskgym.EnvEvent` (``kind``, ``payload``: each action and its ack
        with the reward and the screen's hash, resets, restores, ``exec`` and ``run``
        results, file operations, refused permissions, errors) from the return of this
        call on. They are the records :attr:`replay` saves, in the same order, and they
        flow whether or not the session records. The stream ends when the desktop
        closes; close it (or use ``with``) to stop earlier. A reader that falls behind
        loses the oldest events, counted in the next one's ``lost``: the desktop never
        waits for it."""
        return self.client.watch_events(self.env_id)

    def video(self, **options: Any) -> Iterator[pb.ScreencastFrame]:
        """ACI's on-demand pixel channel: the screen as it changes (JPEG or
        ``codec="h264"`` frames; see :meth:`deskgym.Client.watch`). Watching never
        steps the desktop nor enters its recording."""
        return self.watch(**options)


def connect(
    session_id: str | None = None,
    *,
    address: str | None = None,
    token: str | None = None,
    task: str = "blank",
    profile: str | None = "desktop",
    capabilities: Sequence[str] | None = None,
    seed: int | None = None,
    client: Client | None = None,
    lease_ttl_s: float | None = DEFAULT_LEASE_TTL_S,
    options: PoolOptions | None = None,
    **pool_options: Any,
) -> Session:
    """A ready desktop session (ACI §2's ``connect()``), local or remote alike:
    ``address`` (``host:port`` or ``unix:PATH``; default ``$DESKGYM_ADDRESS``, else the
    local server). A new desktop runs ``task`` (``"blank"``) on ``profile``
    (``"desktop"``), granted ``capabilities``: by default the in-sandbox ones
    (:data:`IN_SANDBOX`) that the server's policy allows, none on the unsandboxed
    ``tasks`` profile. Other pool options
    (``screen=``, ``record=``, ``max_steps=``, ``settle_ms=``...) are
    :class:`deskgym.PoolOptions`' fields.

    ``connect(session_id)`` reattaches to a live desktop of the caller's principal
    (:attr:`Session.id`, or what :meth:`Session.detach` returned) and renews its lease
    from then on; an id that is not the caller's is NOT_FOUND."""
    if session_id is not None:
        aci.check_reattach(pool_options, options, seed, capabilities)
        return _reattach(session_id, address=address, token=token, client=client, lease_ttl_s=lease_ttl_s)
    opts = PoolOptions.of(options, {"profile": profile, **pool_options}, "connect")
    c = client or Client(address, token, lease_ttl_s=lease_ttl_s)
    try:
        if capabilities is None:
            capabilities = aci.default_capabilities(c.capabilities(), task, opts.profile)
        opts = dataclasses.replace(opts, capabilities=tuple(capabilities))
        pool = opts.create_pool(c, task, 1, seed=seed or 0, encoding="jpeg")
        s = Session(c, pool.env_ids[0], _Share(pool, 1), own_client=client is None, profile=pool.profile,
                    capabilities=pool.capabilities, record=opts.record, token=token)
        r = c.reset(s.env_id, seed=seed, encoding="jpeg")
    except BaseException:
        if client is None:
            c.close()
        raise
    s._last_hash = r.observation.frame_hash
    return s


def _reattach(session_id: str, *, address: str | None, token: str | None, client: Client | None,
              lease_ttl_s: float | None) -> Session:
    env_id = aci.split_id(session_id)[1]
    c = client or Client(address, token, lease_ttl_s=lease_ttl_s)
    try:
        # The server says what the env is, to its owner only (another principal's env is
        # NOT_FOUND, as one that never was).
        a = aci.attached(session_id, c.get_env(env_id))
        # Renewed at once: the lease may be near its end.
        if c.keep_alive([a.pool.pool_id]):
            raise aci.not_found(session_id)
    except BaseException:
        if client is None:
            c.close()
        raise
    c.adopt_pool(a.pool.pool_id)
    return Session(c, env_id, _Share(a.pool, 1), own_client=client is None, profile=a.profile,
                   capabilities=a.capabilities, record=a.record, token=token, snapshot_kind=a.snapshot_kind)


@contextmanager
def ephemeral(**kwargs: Any) -> Iterator[Session]:
    """``with deskgym.ephemeral(...) as s:`` a new session (:func:`connect`'s keywords)
    closed at the block's end, whatever happens in it."""
    s = connect(**kwargs)
    try:
        yield s
    finally:
        s.close()
