"""ACI's session (spec §2) as coroutines: :class:`deskgym.Session`'s verbs, names and
results over the asyncio client, so one event loop drives many agents' desktops over one
channel.

    async with deskgym.aio.ephemeral(address=address) as s:
        await s.click(x=640, y=400); await s.type("Q3 report"); await s.key("ctrl+s")
        r = await s.run("a = 10\\nb = 20\\nprint(a + b)")   # r.output == "30"; `a` stays
        cp = await s.save(); await s.restore(cp); kids = await s.fork(cp, n=2)
        async with s.events() as events:                   # watching from here on
            ...

Everything a verb decides before and after its call (argument checks, the action it
builds, the result it returns) is :mod:`deskgym.aci`'s, the sync session's too; this
module only awaits. Sessions made with ``client=`` share that :class:`AsyncClient` (its
channel, its ``max_in_flight`` slots, its frame cache); without, each makes its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from deskgym import aci
from deskgym.a11y import Element, Tree, tree_request
from deskgym.aci import Acted, Restored, RunResult, Shot
from deskgym.actions import to_proto
from deskgym.aio.client import AsyncCheckpoint, AsyncClient, AsyncDesktop, _PoolShare
from deskgym.aio.events import AsyncEventStream
from deskgym.calls import CheckpointInfo, snapshot_kind
from deskgym.client import DEFAULT_LEASE_TTL_S
from deskgym.env import fidelity_name, known_hashes
from deskgym.options import PoolOptions
from deskgym.v1 import deskgym_pb2 as pb

__all__ = ["AsyncSession", "connect", "ephemeral"]


class AsyncSession(AsyncDesktop, aci.SessionState):
    """One desktop as ACI's session, for asyncio: the verbs of :class:`deskgym.Session`
    as coroutines, returning the same results (:class:`~deskgym.aci.Shot`,
    :class:`~deskgym.aci.Acted`, :class:`~deskgym.aci.RunResult`...). Make one with
    :func:`connect` (or :func:`ephemeral`); the boundary verbs (``exec``, ``put_file``,
    ``get_file``, ``clipboard``, ``windows``) are :class:`AsyncDesktop`'s. Each verb takes
    ``deadline=`` (seconds; default the client's ``timeout``). One call at a time per
    session, as the server has it (a concurrent second one answers ABORTED)."""

    def __init__(
        self, client: AsyncClient, env_id: str, share: _PoolShare, *, own_client: bool, profile: str | None,
        capabilities: tuple[str, ...] | None, record: str | None = None, fidelity: str | None = None,
        snapshot_kind: str | None = None,
    ) -> None:
        AsyncDesktop.__init__(self, client, env_id)
        aci.SessionState.__init__(self, own_client=own_client, profile=profile, capabilities=capabilities,
                                  record=record, fidelity=fidelity, snapshot_kind=snapshot_kind)
        self._share = share

    # -- identity and lifetime (the id and client_open: aci.SessionState's) -----------------

    @property
    def snapshot_kind(self) -> str:
        """What :meth:`save` captures (ACI §5), as the server said when the session
        started (``GetEnv``): ``"replay"`` on every deskgym profile today."""
        return self._snapshot_kind or ""

    async def close(self) -> None:
        """Ends the session: closes its desktop (for a fork's replicas, the last one
        closed closes their pool) and the client it made (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await self._share.leave(self.client)
        if self._own_client:
            await self.client.close()

    async def detach(self) -> str:
        """Leaves the desktop running and returns its :attr:`id`, for ``connect(id)``
        elsewhere within the lease (see :meth:`deskgym.Session.detach`)."""
        pool = self._share.pool
        if pool is not None:
            self.client.abandon_pool(pool.pool_id)
        self._share.pool = None
        await self.close()
        return self.id

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- observe -----------------------------------------------------------------------

    async def screenshot(self, **options: Any) -> Shot:  # type: ignore[override]
        """The screen as ACI's §2 has it, a :class:`~deskgym.aci.Shot` (see
        :meth:`deskgym.Session.screenshot`; options ``scope``, ``window``,
        ``max_long_edge``, ``encoding``, ``jpeg_quality``, ``deadline``)."""
        self._live()
        return Shot(await self.client.screenshot(self.env_id, **options))

    async def observe(self, structured: bool = False, *, deadline: float | None = None,
                      **options: Any) -> Shot | Tree:
        """The screen now (a :class:`~deskgym.aci.Shot`), or with ``structured=True``
        the accessibility tree (a :class:`deskgym.Tree`; options ``osworld_xml``,
        ``line_budget``, ``diff_from``, ``timeout_ms``)."""
        self._live()
        aci.check_observe(structured, options)
        if structured:
            # The frame rides along as JPEG (the cheapest encoding); only the tree is used.
            o = await self.client.observe(self.env_id, "jpeg", tree=tree_request(**options), deadline=deadline)
            return Tree.from_proto(o.tree)
        return Shot(await self.client.observe(self.env_id, "png", deadline=deadline))

    # -- act ---------------------------------------------------------------------------

    async def act(self, action: Mapping[str, Any] | pb.Action, *, deadline: float | None = None) -> Acted:
        """Runs any action (a dict form of :mod:`deskgym.actions` or a ``pb.Action``):
        what the verbs below call."""
        self._live()
        a = to_proto(action)
        r = await self.client.step(self.env_id, a, "jpeg", known_hashes(self._last_hash, []), deadline=deadline)
        self._last_hash = r.observation.frame_hash
        return Acted.of(r)

    async def reset(self, seed: int | None = None, *, deadline: float | None = None) -> pb.StepInfo:
        """Starts a new episode of this desktop's task (see :meth:`deskgym.Session.reset`);
        a sandboxed desktop restarts its session, the :meth:`run` namespace with it."""
        self._live()
        r = await self.client.reset(self.env_id, seed, "jpeg", deadline=deadline)
        self._last_hash = r.observation.frame_hash
        return r.info

    async def click(self, target: Element | str | None = None, *, x: int | None = None, y: int | None = None,
                    button: str = "left", count: int = 1, deadline: float | None = None) -> Acted:
        """Clicks an element (a :class:`deskgym.Element` or its ref ``"e12"``) or the
        pixel ``x=``, ``y=``."""
        return await self.act(aci.point_action("click", target, x, y, button=button, count=count), deadline=deadline)

    async def double_click(self, target: Element | str | None = None, *, x: int | None = None,
                           y: int | None = None, deadline: float | None = None) -> Acted:
        """Double-clicks an element or a pixel (as :meth:`click`)."""
        return await self.act(aci.point_action("double_click", target, x, y), deadline=deadline)

    async def right_click(self, target: Element | str | None = None, *, x: int | None = None,
                          y: int | None = None, deadline: float | None = None) -> Acted:
        """Right-clicks an element or a pixel (as :meth:`click`)."""
        return await self.act(aci.point_action("right_click", target, x, y), deadline=deadline)

    async def move(self, target: Element | str | None = None, *, x: int | None = None, y: int | None = None,
                   deadline: float | None = None) -> Acted:
        """Moves the pointer to an element or a pixel."""
        return await self.act(aci.point_action("move", target, x, y), deadline=deadline)

    async def type(self, text: str, *, deadline: float | None = None) -> Acted:
        """Types ``text`` (any Unicode) where the keyboard focus is."""
        return await self.act(aci.type_action(text), deadline=deadline)

    async def key(self, keys: str, *, deadline: float | None = None) -> Acted:
        """Presses a key or a chord by X keysym names: ``"Return"``, ``"ctrl+s"``."""
        return await self.act(aci.key_action(keys), deadline=deadline)

    async def scroll(self, target: Element | str | None = None, *, x: int | None = None, y: int | None = None,
                     dx: int = 0, dy: int = 0, deadline: float | None = None) -> Acted:
        """Scrolls at an element or a pixel by ``dx``/``dy`` pixels (see
        :meth:`deskgym.Session.scroll`)."""
        return await self.act(aci.point_action("scroll", target, x, y, dx=dx, dy=dy, pixels=True), deadline=deadline)

    # -- code as action ----------------------------------------------------------------

    async def run(self, code: str, *, timeout: float = 60.0) -> RunResult:
        """Runs Python ``code`` in this session's interpreter inside the sandbox, one
        namespace per session (see :meth:`deskgym.Session.run`: the ``exec`` grant, the
        timeout, what restores and forks do to the namespace). Cancelling the awaiting
        task kills the ``exec`` that carries it, and the interpreter with the code."""
        self._live()
        argv, stdin, bound = aci.run_exec(code, timeout)
        return aci.run_result(await self.exec(argv, stdin=stdin, timeout=bound))

    # -- checkpoints -------------------------------------------------------------------

    async def save(self, park: int = 0, *, deadline: float | None = None) -> AsyncCheckpoint:
        """A checkpoint of this desktop (``.snapshot_kind`` says what it holds); ``park``
        as :meth:`deskgym.Client.save`."""
        self._live()
        return await self.client.save(self.env_id, park, deadline=deadline)

    async def restore(self, checkpoint: CheckpointInfo | str, *, deadline: float | None = None) -> Restored:
        """Rewinds this desktop to ``checkpoint`` (by replay on a fresh session; the
        interpreter of :meth:`run` starts afresh)."""
        self._live()
        aci.check_checkpoint(checkpoint)
        r = await self.client.restore(self.env_id, checkpoint, "jpeg", deadline=deadline)
        self._last_hash = r.observation.frame_hash
        return Restored.of(r)

    async def fork(self, checkpoint: CheckpointInfo | str | None = None, n: int = 1, *,
                   deadline: float | None = None) -> list[AsyncSession]:
        """``n`` new desktops rebuilt at ``checkpoint`` (default: one saved now), each a
        session with its replica's :attr:`fidelity`, sharing this session's client;
        their pool closes with the last of them."""
        self._live()
        aci.check_fork(checkpoint, n)
        cp = await self.save(deadline=deadline) if checkpoint is None else checkpoint
        r = await self.client.fork(cp, n, "jpeg", deadline=deadline)
        share = _PoolShare(aci.fork_pool(r, cp, self.profile, self.capabilities), len(r.replicas))
        kids = []
        for x in r.replicas:
            s = AsyncSession(self.client, x.env_id, share, own_client=False, profile=self.profile,
                             capabilities=self.capabilities, fidelity=fidelity_name(x.fidelity),
                             snapshot_kind=self._snapshot_kind)
            s._last_hash = x.observation.frame_hash
            kids.append(s)
        return kids

    # -- boundary powers (ACI's unlock) --------------------------------------------------

    @asynccontextmanager
    async def unlock(
        self, capability: str, scope: str | Sequence[str] = (), reason: str = ""
    ) -> AsyncIterator[pb.UnlockResponse]:
        """``async with s.unlock("files", reason="read the home") as grant:`` holds a
        boundary power on this desktop for the block (:meth:`AsyncClient.unlock`),
        released when the block ends, however it ends (a cancelled task too). Refused:
        a :class:`deskgym.DeskgymError` (PERMISSION_DENIED naming what the operator
        would list)."""
        self._live()
        grant = await self.client.unlock(self.env_id, capability, scope, reason)
        try:
            yield grant
        finally:
            if self.client_open():
                await self.client.relock(self.env_id, grant.grant_id)

    # -- streams -----------------------------------------------------------------------

    def events(self) -> AsyncEventStream:
        """ACI's ``events()``: this desktop's event log as it happens (see
        :meth:`deskgym.Session.events`), an :class:`~deskgym.aio.AsyncEventStream`.
        ``async with s.events() as ev:`` (or ``ev = await s.events()``) returns once
        the server watches, then ``async for e in ev:`` reads each
        :class:`deskgym.EnvEvent`; it ends when the desktop closes or the block does."""
        self._live()
        return self.client.watch_events(self.env_id)


async def connect(
    session_id: str | None = None,
    *,
    address: str | None = None,
    token: str | None = None,
    task: str = "blank",
    profile: str | None = "desktop",
    capabilities: Sequence[str] | None = None,
    seed: int | None = None,
    client: AsyncClient | None = None,
    lease_ttl_s: float | None = DEFAULT_LEASE_TTL_S,
    options: PoolOptions | None = None,
    **pool_options: Any,
) -> AsyncSession:
    """A ready desktop session, as :func:`deskgym.connect` makes one (the same keywords:
    ``task``, ``profile``, ``capabilities`` defaulting to the in-sandbox powers the
    server allows, pool options), over ``client`` (an :class:`AsyncClient` of the
    caller's, which stays open at the session's close) or one of its own.
    ``connect(session_id)`` reattaches to a live desktop of the caller's principal;
    another's, or one that is gone, is NOT_FOUND."""
    if session_id is not None:
        aci.check_reattach(pool_options, options, seed, capabilities)
        return await _reattach(session_id, address=address, token=token, client=client, lease_ttl_s=lease_ttl_s)
    opts = PoolOptions.of(options, {"profile": profile, **pool_options}, "connect")
    c = client or AsyncClient(address, token, lease_ttl_s=lease_ttl_s)
    pool = None
    try:
        if capabilities is None:
            capabilities = aci.default_capabilities(await c.capabilities(), task, opts.profile)
        opts = dataclasses.replace(opts, capabilities=tuple(capabilities))
        pool = await c.create_pool(task, 1, **opts.pool_args(seed=seed or 0, encoding="jpeg"))
        env_id = pool.env_ids[0]
        r = await c.reset(env_id, seed, "jpeg")
        kind = snapshot_kind((await c.get_env(env_id)).snapshot_kind)
    except BaseException:
        if client is None:
            await c.close()
        elif pool is not None:
            await c.release(pool)
        raise
    s = AsyncSession(c, env_id, _PoolShare(pool), own_client=client is None, profile=pool.profile,
                     capabilities=pool.capabilities, record=opts.record, snapshot_kind=kind)
    s._last_hash = r.observation.frame_hash
    return s


async def _reattach(session_id: str, *, address: str | None, token: str | None, client: AsyncClient | None,
                    lease_ttl_s: float | None) -> AsyncSession:
    env_id = aci.split_id(session_id)[1]
    c = client or AsyncClient(address, token, lease_ttl_s=lease_ttl_s)
    try:
        # The server says what the env is, to its owner only (another principal's env is
        # NOT_FOUND, as one that never was).
        a = aci.attached(session_id, await c.get_env(env_id))
        # Renewed at once: the lease may be near its end.
        if await c.keep_alive([a.pool.pool_id]):
            raise aci.not_found(session_id)
    except BaseException:
        if client is None:
            await c.close()
        raise
    c.adopt_pool(a.pool.pool_id)
    return AsyncSession(c, env_id, _PoolShare(a.pool), own_client=client is None, profile=a.profile,
                        capabilities=a.capabilities, record=a.record, snapshot_kind=a.snapshot_kind)


@asynccontextmanager
async def ephemeral(**kwargs: Any) -> AsyncIterator[AsyncSession]:
    """``async with deskgym.aio.ephemeral(...) as s:`` a new session (:func:`connect`'s
    keywords) closed at the block's end, whatever happens in it."""
    s = await connect(**kwargs)
    try:
        yield s
    finally:
        await s.close()
