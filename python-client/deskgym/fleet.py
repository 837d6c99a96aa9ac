"""One vector env over many deskgym servers.

    env = deskgym.make_vec("click-target", 64, address=["h1:50051", "h2:50051"], seed=0)

Envs are placed in contiguous runs by each server's free capacity (``GetCapabilities``
reports it); env ``i`` behaves exactly as env ``i`` of a one-server vector env with the
same seed (each shard's pool is seeded at its first env's index). Every ``step`` sends
one ``StepBatch`` per server, all at once, and returns results in env order.

A server that fails (unreachable, or its call fails as a whole) turns its envs
``truncated`` with ``infos["error"]`` (``code``, ``message``, ``server``); at their next
reset (the next step, under the default ``next_step`` autoreset) they are placed on the
servers that are left. The training loop never sees an exception for a lost server;
when no server has room, those envs stay truncated with the error until one has.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, iterate

from deskgym.client import Client
from deskgym.batching import autoreset_mode as mode_of
from deskgym.batching import reset_args
from deskgym.errors import SERVER_FAULTS, DeskgymError
from deskgym.options import PoolOptions
from deskgym.vector import DeskgymVectorEnv

logger = logging.getLogger("deskgym.fleet")

@dataclass
class Shard:
    """A contiguous run of envs on one server."""

    server: int
    start: int
    env: DeskgymVectorEnv

    @property
    def stop(self) -> int:
        return self.start + self.env.num_envs


def place(n: int, start: int, free: Sequence[int]) -> list[tuple[int, int, int]]:
    """Splits envs ``start .. start+n`` into contiguous runs ``(server, start, count)``:
    each env goes to the server with the most room left (ties: the lower index), so the
    load follows free capacity; runs are laid out in server order."""
    room = [max(0, int(f)) for f in free]
    if n > sum(room):
        raise DeskgymError("RESOURCE_EXHAUSTED", f"{n} envs do not fit: the servers have {list(free)} desktops free")
    counts = [0] * len(room)
    for _ in range(n):
        best = max(range(len(room)), key=lambda s: (room[s] - counts[s], -s))
        counts[best] += 1
    runs, at = [], start
    for server, k in enumerate(counts):
        if k:
            runs.append((server, at, k))
            at += k
    return runs


def _env_info(infos: Mapping[str, Any], i: int) -> dict[str, Any]:
    """Env ``i``'s own info out of a vector info dict (Gymnasium's ``_key`` masks)."""
    out: dict[str, Any] = {}
    for k, v in infos.items():
        if k.startswith("_"):
            continue
        mask = infos.get("_" + k)
        if mask is None or not mask[i]:
            continue
        out[k] = _env_info(v, i) if isinstance(v, Mapping) else v[i]
    return out


class ShardedVectorEnv(gym.vector.VectorEnv[Any, Any, Any]):
    """``num_envs`` desktops of one task over the servers at ``addresses``; other keyword
    arguments are :class:`deskgym.DeskgymVectorEnv`'s (``screen``, ``obs_type``...)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": []}

    def __init__(
        self,
        task: str,
        num_envs: int,
        *,
        addresses: Sequence[str],
        token: str | None = None,
        seed: int | None = None,
        autoreset_mode: str | AutoresetMode = "next_step",
        options: PoolOptions | None = None,
        **kwargs: Any,
    ) -> None:
        #: What every shard's pool is made with (``record`` names each shard's own run).
        self.pool_options, self._kwargs = PoolOptions.split(options, kwargs)
        if not addresses:
            raise DeskgymError("INVALID_ARGUMENT", "address: give at least one server")
        mode = mode_of(autoreset_mode)
        if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.DISABLED):
            raise DeskgymError("INVALID_ARGUMENT", f"autoreset_mode {autoreset_mode!r}: a sharded vector env supports "
                               "next_step and disabled (a lost server's envs restart at their next reset)")
        self.task, self.num_envs, self.autoreset_mode = task, num_envs, mode
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self.addresses = list(addresses)
        self.clients = [Client(a, token) for a in self.addresses]
        self._token = token
        #: Every shard run recorded so far, as (server address, run name), re-placed
        #: shards' runs included.
        self.recorded_runs: list[tuple[str, str]] = []
        self._seed = seed if seed is not None else int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> 1)
        self._pool = concurrent.futures.ThreadPoolExecutor(len(self.addresses), thread_name_prefix="deskgym-shard")
        self.dead: set[int] = set()
        #: Re-placements so far (names re-placed shards' recordings).
        self._generation = 0
        #: Errors of servers found gone, by address.
        self.server_errors: dict[str, str] = {}
        self.shards: list[Shard] = []
        try:
            for server, start, k in place(num_envs, 0, self._free()):
                self.shards.append(self._open(server, start, k))
        except BaseException:
            self.close()
            raise
        first = self.shards[0].env
        self.single_observation_space = first.single_observation_space
        self.single_action_space = first.single_action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs) \
            if first.obs_type == "rgb" else gym.spaces.Tuple([self.single_observation_space] * num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.obs_type = first.obs_type
        self._obs: list[Any] = [None] * num_envs
        #: Envs whose server was lost: they come back at their next reset.
        self._lost: dict[int, dict[str, Any]] = {}

    # -- placement ---------------------------------------------------------------------

    def _free(self) -> list[int]:
        """Each server's free desktops, asked of every server: one found gone counts 0,
        and one that answers again (restarted, say by its Ray actor) is used again."""
        def ask(i: int) -> int:
            try:
                free = int(self.clients[i].capabilities().capacity.envs_free)
            except DeskgymError as e:
                self._lose_server(i, e)
                return 0
            self.dead.discard(i)
            return free
        return list(self._pool.map(ask, range(len(self.clients))))

    def _open(self, server: int, start: int, k: int, generation: int = 0) -> Shard:
        opts = self.pool_options
        if opts.record:
            # One recording per shard (run names are per server, a re-placed run may land
            # beside another shard or on a restarted server that kept the old one):
            # "<run>-<first env>", then "-r<n>" for the n-th re-placement.
            opts = dataclasses.replace(opts, record=f"{opts.record}-{start}" + (f"-r{generation}" if generation else ""))
            self.recorded_runs.append((self.addresses[server], opts.record or ""))
        env = DeskgymVectorEnv(self.task, k, client=self.clients[server], seed=self._seed + start,
                               autoreset_mode=self.autoreset_mode, options=opts, **self._kwargs)
        return Shard(server, start, env)

    @property
    def recording_paths(self) -> list[str]:
        """Where each shard records (``record=`` runs), in env order."""
        return [s.env.recording_path for s in self.shards if s.env.recording_path]

    def gather_recordings(self, dest: str | os.PathLike[str]) -> list[str]:
        """Fetches every shard's run from its server into ``dest`` (resumable; works after
        :meth:`close`, each run finished) and returns the local bundle paths, which
        :func:`deskgym.datasets.open` reads. A run whose server is gone is left out with
        a warning (its envs were re-placed under another run name)."""
        paths = []
        for address, run in self.recorded_runs:
            client = Client(address, self._token, lease_ttl_s=None)
            try:
                paths.append(client.download_recording(run, dest))
            except DeskgymError as e:
                logger.warning("recording %s on %s not gathered: %s", run, address, e)
            finally:
                client.close()
        return paths

    def _lose_server(self, server: int, e: DeskgymError) -> None:
        if server not in self.dead:
            logger.warning("deskgym server %s lost: %s", self.addresses[server], e)
            self.dead.add(server)
            self.server_errors[self.addresses[server]] = str(e)

    def _drop(self, shard: Shard, e: DeskgymError) -> None:
        """A shard whose server failed: its envs end truncated and wait for a reset."""
        self._lose_server(shard.server, e)
        self.shards.remove(shard)
        err = {"code": e.code, "message": e.message, "server": self.addresses[shard.server]}
        for g in range(shard.start, shard.stop):
            self._lost[g] = err
        try:
            shard.env.close()
        except DeskgymError:
            pass

    def _replace(self) -> list[Shard]:
        """Places lost envs on the servers left, in contiguous runs; returns the new
        shards (empty when no server has room: they stay lost)."""
        runs: list[tuple[int, int]] = []
        for g in sorted(self._lost):
            if runs and runs[-1][0] + runs[-1][1] == g:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((g, 1))
        new: list[Shard] = []
        self._generation += 1
        free = self._free()
        for start, n in runs:
            try:
                parts = place(n, start, free)
            except DeskgymError:
                continue
            for server, s, k in parts:
                try:
                    shard = self._open(server, s, k, self._generation)
                except DeskgymError as e:
                    if e.code in SERVER_FAULTS:
                        self._lose_server(server, e)
                        free[server] = 0
                        continue
                    raise
                free[server] -= k
                new.append(shard)
                for g in range(s, s + k):
                    self._lost.pop(g, None)
        self.shards.extend(new)
        self.shards.sort(key=lambda s: s.start)
        return new

    def _each(self, fn: Any) -> Iterator[tuple[Shard, Any]]:
        """Runs ``fn(shard)`` for every shard at once (a thread per server) and yields
        each shard's result in env order; a shard whose server failed is dropped."""
        for shard, fut in [(s, self._pool.submit(fn, s)) for s in list(self.shards)]:
            try:
                out = fut.result()
            except DeskgymError as e:
                if e.code not in SERVER_FAULTS:
                    raise
                self._drop(shard, e)
                continue
            yield shard, out

    # -- Gymnasium API -----------------------------------------------------------------

    def _batch(self) -> Any:
        return np.stack(self._obs) if self.obs_type == "rgb" else tuple(self._obs)

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """As :meth:`DeskgymVectorEnv.reset` (``seed + i`` for env ``i``); lost envs are
        placed on the servers left first."""
        seeds, mask = reset_args(self.num_envs, seed, options)
        if self._lost:
            self._replace()
        infos: dict[str, Any] = {}

        def run(shard: Shard) -> tuple[Any, dict[str, Any]] | None:
            m = mask[shard.start:shard.stop]
            if not m.any():
                return None
            return shard.env.reset(seed=seeds[shard.start:shard.stop], options={"reset_mask": m})

        for shard, out in self._each(run):
            if out is None:
                continue
            obs, shard_infos = out
            for local in range(shard.env.num_envs):
                g = shard.start + local
                if mask[g]:
                    self._obs[g] = obs[local]
                    infos = self._add_info(infos, _env_info(shard_infos, local), g)
        for g, err in self._lost.items():
            infos = self._add_info(infos, {"error": err}, g)
        if any(o is None for o in self._obs):
            raise DeskgymError("UNAVAILABLE", f"no server could start envs {sorted(self._lost)}: {self.server_errors}")
        return self._batch(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        acts = list(iterate(self.action_space, actions)) if isinstance(actions, dict) else list(actions)
        n = self.num_envs
        if len(acts) != n:
            raise DeskgymError("INVALID_ARGUMENT", f"actions: got {len(acts)} actions for {n} envs")
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        # Lost envs reset now (next-step autoreset): placed elsewhere, their first
        # observation is this step's.
        fresh: list[Shard] = self._replace() if self._lost and self.autoreset_mode == AutoresetMode.NEXT_STEP else []

        def run(shard: Shard) -> Any:
            if shard in fresh:
                return shard.env.reset()
            return shard.env.step(acts[shard.start:shard.stop])

        for shard, out in self._each(run):
            k = shard.env.num_envs
            if shard in fresh:  # a reset: reward 0, not ended
                obs, shard_infos = out
            else:
                obs, r, t, tr, shard_infos = out
                rewards[shard.start:shard.stop] = r
                terminated[shard.start:shard.stop] = t
                truncated[shard.start:shard.stop] = tr
            for local in range(k):
                g = shard.start + local
                self._obs[g] = obs[local]
                infos = self._add_info(infos, _env_info(shard_infos, local), g)
        for g, err in self._lost.items():
            truncated[g] = True
            infos = self._add_info(infos, {"error": err}, g)
        return self._batch(), rewards, terminated, truncated, infos

    @property
    def env_ids(self) -> list[str]:
        """Each env's id on its server, in env order ("" for a lost env)."""
        ids = [""] * self.num_envs
        for s in self.shards:
            ids[s.start:s.stop] = s.env.env_ids
        return ids

    def placement(self) -> list[str]:
        """Each env's server address, in env order ("" for a lost env)."""
        out = [""] * self.num_envs
        for s in self.shards:
            out[s.start:s.stop] = [self.addresses[s.server]] * s.env.num_envs
        return out

    def close_extras(self, **kwargs: Any) -> None:
        """Closes every shard's pools and the clients (idempotent)."""
        for s in getattr(self, "shards", []):
            try:
                s.env.close()
            except DeskgymError:
                pass
        self.shards = []
        for c in self.clients:
            c.close()
        self._pool.shutdown(wait=False)
