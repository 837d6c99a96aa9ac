"""EnvPool-style asynchronous stepping: ``send`` actions to some envs, ``recv`` the first
``batch_size`` envs whose steps finished, so a slow desktop (or a slow server) never
holds back the others.

    env = deskgym.make_vec("click-target", 16, batch_size=8, address=[...])
    env.async_reset()
    while True:
        obs, rew, term, trunc, info = env.recv()        # 8 envs, ids in info["env_id"]
        env.send(policy(obs), info["env_id"])

Each server gets one ``StepStream`` (a bidirectional gRPC stream): every request starts
on the server as it arrives and its result comes back as soon as it is done. Envs are
placed over the servers by free capacity, seeded as in a one-server vector env. An env
whose episode ended is reset by its next ``send`` (its result is the new episode's first
observation, reward 0), as Gymnasium's next-step autoreset does. When a server's stream
fails, its envs in flight come back truncated with ``info["error"]``, and their next
``send`` places them on a server with room (a restarted one too), as the sharded vector
env does; the loop never sees an exception for it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import numpy as np

from deskgym.actions import to_proto
from deskgym.client import Client, Pool, encoding_of
from deskgym.errors import SERVER_FAULTS, DeskgymError, code_name
from deskgym.fleet import place
from deskgym.modes import convert_obs
from deskgym.observation import info as info_of
from deskgym.options import OBS_TYPES, PoolOptions
from deskgym.v1 import deskgym_pb2 as pb

_END = object()

logger = logging.getLogger("deskgym.envpool")


class _Stream:
    """One server's StepStream: a request queue and a thread reading results."""

    def __init__(self, server: int, client: Client, out: queue.Queue[Any]) -> None:
        self.server, self.client = server, client
        #: Set when the stream failed (its server is gone): its envs move elsewhere.
        self.dead: DeskgymError | None = None
        self.requests: queue.Queue[Any] = queue.Queue()

        def requests() -> Iterator[pb.StepStreamRequest]:
            while (m := self.requests.get()) is not _END:
                yield m

        self.call = client._stub.StepStream(requests(), metadata=client._metadata)

        def read() -> None:
            try:
                for r in self.call:
                    out.put((self, r))
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.CANCELLED:
                    out.put((self, DeskgymError.from_rpc(e)))

        threading.Thread(target=read, name="deskgym-stepstream", daemon=True).start()

    def close(self) -> None:
        self.requests.put(_END)
        self.call.cancel()


class DeskgymEnvPool:
    """``num_envs`` desktops of ``task`` stepped asynchronously, ``batch_size`` at a time
    (default: all). ``address``: one server or a list. The pool options (``screen``,
    ``obs_type``, ``action_mode``...: :class:`deskgym.options.PoolOptions`) are as for
    :class:`deskgym.DeskgymVectorEnv`, less ``record``."""

    def __init__(
        self,
        task: str,
        num_envs: int,
        *,
        batch_size: int | None = None,
        address: str | Sequence[str] | None = None,
        token: str | None = None,
        seed: int | None = None,
        timeout: float = 120.0,
        options: PoolOptions | None = None,
        **kwargs: Any,
    ) -> None:
        #: What the pools were made with (as :attr:`deskgym.DeskgymEnv.pool_options`).
        self.pool_options = opts = PoolOptions.of(options, kwargs, "DeskgymEnvPool")
        obs_type = opts.obs_type
        if obs_type not in OBS_TYPES or "a11y" in obs_type:
            raise DeskgymError("INVALID_ARGUMENT", f"obs_type {obs_type!r}: rgb, png or jpeg")
        if opts.record:
            # One run name over several servers' pools, and envs re-placed one by one into
            # pools of their own: the recordings would have no one name to gather by.
            raise DeskgymError("INVALID_ARGUMENT", "record: the asynchronous pool does not record; record with "
                               "deskgym.make_vec (one server or a list) instead")
        self.num_envs = num_envs
        self.batch_size = batch_size or num_envs
        if not 1 <= self.batch_size <= num_envs:
            raise DeskgymError("INVALID_ARGUMENT", f"batch_size {batch_size} is not in 1..{num_envs}")
        self.timeout = timeout
        self.obs_type, self.obs_format, self.info_timing = obs_type, opts.obs_format, opts.info_timing
        self._encoding = encoding_of(obs_type)
        addresses = [address] if address is None or isinstance(address, str) else list(address)
        self.clients = [Client(a, token) for a in addresses]
        base = seed if seed is not None else int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> 1)
        free = [int(c.capabilities().capacity.envs_free) for c in self.clients]
        self._results: queue.Queue[Any] = queue.Queue()
        self._pools: list[tuple[Client, Pool]] = []
        #: Per env: its server's stream and its id there.
        self._where: list[tuple[_Stream, str]] = []
        self._streams: list[_Stream] = []
        self._task = task
        self._base = base
        try:
            for server, start, k in place(num_envs, 0, free):
                c = self.clients[server]
                p = opts.create_pool(c, task, k, seed=base + start, encoding=obs_type)
                self._pools.append((c, p))
                s = _Stream(server, c, self._results)
                self._streams.append(s)
                self._where += [(s, e) for e in p.env_ids]
        except BaseException:
            self.close()
            raise
        w, h = self._pools[0][1].width, self._pools[0][1].height
        self.single_observation_space = opts.frame_space(obs_type, w, h)
        self._mode = opts.action_mode_for(w, h)
        self.single_action_space = self._mode.space
        self.observation_space, self.action_space = self.single_observation_space, self.single_action_space
        #: What a failed env's observation is (zeros of the frame's shape), rgb only.
        self._blank: np.ndarray | None = (
            np.zeros(self.single_observation_space.shape or (), self.single_observation_space.dtype)
            if obs_type == "rgb" else None
        )
        self._index = {(id(s), e): i for i, (s, e) in enumerate(self._where)}
        self._hashes: list[str] = [""] * num_envs
        self._ended = np.zeros(num_envs, dtype=bool)
        self._pending = np.zeros(num_envs, dtype=bool)
        #: Results made here for envs whose server is gone: (env, code, message).
        self._failed: list[tuple[int, str, str]] = []
        self._tag = 0

    # -- requests ----------------------------------------------------------------------

    def _put(self, i: int, kind: str, msg: Any) -> None:
        if self._pending[i]:
            raise DeskgymError("FAILED_PRECONDITION", f"env {i} has a step in flight: recv() it first")
        self._pending[i] = True
        self._tag += 1
        stream, _ = self._where[i]
        msg.frame_ring = stream.client.frame_ring()
        stream.requests.put(pb.StepStreamRequest(tag=self._tag, **{kind: msg}))

    def _lose(self, stream: _Stream, e: DeskgymError) -> None:
        """A stream that failed: every env of it in flight comes back truncated."""
        if stream.dead is None:
            logger.warning("deskgym server %s lost: %s", stream.client.address, e)
            stream.dead = e
        for i, (s, _) in enumerate(self._where):
            if s is stream and self._pending[i] and all(f[0] != i for f in self._failed):
                self._failed.append((i, e.code, e.message))

    def _move(self, i: int) -> bool:
        """Places env ``i``, whose server is gone, on a server with room (a restarted one
        too): a pool of one, seeded as it was. False when none has room."""
        free = []
        for c in self.clients:
            try:
                free.append(int(c.capabilities().capacity.envs_free))
            except DeskgymError:
                free.append(0)
        server = max(range(len(free)), key=lambda k: (free[k], -k))
        if free[server] <= 0:
            return False
        c = self.clients[server]
        try:
            p = self.pool_options.create_pool(c, self._task, 1, seed=self._base + i, encoding=self.obs_type)
        except DeskgymError:
            return False
        self._pools.append((c, p))
        stream = next((s for s in self._streams if s.server == server and s.dead is None), None)
        if stream is None:
            stream = _Stream(server, c, self._results)
            self._streams.append(stream)
        self._where[i] = (stream, p.env_ids[0])
        self._index[(id(stream), p.env_ids[0])] = i
        self._hashes[i] = ""
        return True

    def _reset_req(self, i: int, seed: int | None = None) -> pb.ResetRequest:
        _, env_id = self._where[i]
        req = pb.ResetRequest(env_id=env_id, encoding=self._encoding, if_none_match=[h for h in [self._hashes[i]] if h])
        if seed is not None:
            req.seed = seed
        return req

    def async_reset(self, seed: int | None = None) -> None:
        """Resets every env (env ``i`` with ``seed + i`` when given); collect with ``recv``."""
        for i in range(self.num_envs):
            self._put(i, "reset", self._reset_req(i, None if seed is None else seed + i))

    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Steps envs ``env_ids`` (default: all) with ``actions`` (one each, in order);
        an env whose episode ended is reset instead."""
        ids = list(range(self.num_envs)) if env_ids is None else [int(i) for i in env_ids]
        acts = list(actions)
        if len(acts) != len(ids):
            raise DeskgymError("INVALID_ARGUMENT", f"actions: got {len(acts)} actions for {len(ids)} env ids")
        for i, a in zip(ids, acts):
            if not 0 <= i < self.num_envs:
                raise DeskgymError("INVALID_ARGUMENT", f"env_ids: {i} is outside 0..{self.num_envs - 1}")
            stream, _ = self._where[i]
            if stream.dead is not None and not self._move(i):
                # Nowhere to go yet: it comes back truncated again, and tries next time.
                if self._pending[i]:
                    raise DeskgymError("FAILED_PRECONDITION", f"env {i} has a step in flight: recv() it first")
                self._pending[i] = True
                self._failed.append((i, stream.dead.code, stream.dead.message))
                continue
            if self._ended[i]:
                self._put(i, "reset", self._reset_req(i))
                continue
            _, env_id = self._where[i]
            self._put(i, "step", pb.StepRequest(env_id=env_id, action=to_proto(self._mode.to_action(a)),
                                                 encoding=self._encoding,
                                                 if_none_match=[h for h in [self._hashes[i]] if h]))

    # -- results -----------------------------------------------------------------------

    def recv(self) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """The first ``batch_size`` results to arrive (any envs), as batched arrays;
        ``info["env_id"]`` says whose. Failing envs come back truncated with
        ``info["error"]``, as in the vector envs."""
        n = min(self.batch_size, int(self._pending.sum()))
        if n == 0:
            raise DeskgymError("FAILED_PRECONDITION", "nothing in flight: send() or async_reset() first")
        obs: list[Any] = []
        rew: list[float] = []
        term: list[bool] = []
        trunc: list[bool] = []
        ids: list[int] = []
        infos: list[dict[str, Any]] = []

        def failed(i: int, code: str, message: str) -> None:
            self._pending[i] = False
            self._ended[i] = True
            ids.append(i)
            obs.append(np.zeros_like(self._blank) if self._blank is not None else b"")
            rew.append(0.0)
            term.append(False)
            trunc.append(True)
            infos.append({"error": {"code": code, "message": message, "server": self._where[i][0].client.address}})

        while len(ids) < n:
            if self._failed:
                failed(*self._failed.pop(0))
                continue
            try:
                stream, r = self._results.get(timeout=self.timeout)
            except queue.Empty:
                raise DeskgymError("DEADLINE_EXCEEDED", f"no step result within {self.timeout} s") from None
            if isinstance(r, DeskgymError):
                if r.code not in SERVER_FAULTS:
                    raise r
                self._lose(stream, r)
                continue
            i = self._index.get((id(stream), r.env_id))
            if i is None or self._where[i][0] is not stream:
                continue  # a late answer from a stream the env has left
            if r.code != 0:
                failed(i, code_name(r.code), r.message)
                continue
            self._pending[i] = False
            ids.append(i)
            if r.HasField("step"):
                res = r.step
                o, step_info, reward, t, tr = res.observation, res.info, res.reward, res.terminated, res.truncated
            else:
                o, step_info, reward, t, tr = r.reset.observation, r.reset.info, 0.0, False, False
            frame, _ = stream.client.resolve(o)
            self._hashes[i] = o.frame_hash
            self._ended[i] = bool(t or tr)
            obs.append(convert_obs(self.obs_format, frame) if isinstance(frame, np.ndarray) else frame)
            rew.append(reward)
            term.append(t)
            trunc.append(tr)
            infos.append(info_of(o, step_info, self.info_timing))
        batch = np.stack(obs) if self.obs_type == "rgb" else tuple(obs)
        keys = sorted({k for d in infos for k in d})
        info: dict[str, Any] = {k: [d.get(k) for d in infos] for k in keys}
        info["env_id"] = np.asarray(ids, dtype=np.int64)
        return batch, np.asarray(rew), np.asarray(term, dtype=bool), np.asarray(trunc, dtype=bool), info

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        """Synchronous reset of every env: results in env order."""
        self.async_reset(seed)
        got: dict[int, tuple[Any, dict[str, Any]]] = {}
        while len(got) < self.num_envs:
            obs, _, _, _, info = self.recv()
            for j, i in enumerate(info["env_id"]):
                got[int(i)] = (obs[j], {k: v[j] for k, v in info.items() if k != "env_id"})
        order = [got[i] for i in range(self.num_envs)]
        frames = [o for o, _ in order]
        return (np.stack(frames) if self.obs_type == "rgb" else tuple(frames)), {"infos": [d for _, d in order]}

    def step(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> tuple[Any, ...]:
        """``send`` then ``recv``."""
        self.send(actions, env_ids)
        return self.recv()

    def close(self) -> None:
        """Ends the streams and closes the pools (idempotent)."""
        for s in self._streams:
            s.close()
        self._streams = []
        for c, p in self._pools:
            try:
                c.release(p)
            except DeskgymError:
                pass
        self._pools = []
        for c in self.clients:
            c.close()
