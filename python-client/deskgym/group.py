"""Group starts: ``n`` sessions at the identical start state, as GRPO scores ``n``
rollouts that begin from one state. Each replica's frame hash and task state are
compared with the group's and reported (:class:`GroupReport`), never assumed.

    with deskgym.make_group("click-target", seed=7, n=8) as group:
        assert group.report.identical, group.report
        for env, obs in zip(group, group.observations):
            ...                                  # each env is a DeskgymEnv, already reset

Routes (``route=``), the cheapest exact one first:

- ``"seed"``: one pool of ``n`` desktops, each reset with ``seed`` in one ``StepBatch``
  call. Exact where the task lays its episode out from the seed alone (the bundled
  tasks, MiniWoB++ pages, which seed ``Math.random``).
- ``"fork"``: one desktop reset with ``seed``, saved, and ``n - 1`` replicas forked from
  the checkpoint; the server rebuilds each and judges it by the frame hash (decision 20).
- ``"auto"`` (default): ``"seed"``, then every replica whose frame or state differs from
  the group's is replaced by a fork of one that agrees (reported as ``"seed+fork"``).

An OSWorld task (its config, a ``dict``, or the path of its ``.json``) is started by
running its setup on each of ``n`` shim desktops (:class:`deskgym.osworld.DesktopEnv`),
the route ``"seed"``: its setup runs commands and moves files, which a fork's replay
does not carry (Exec and files are not in the replay log), so ``"fork"`` is refused
for it rather than handing out desktops whose pixels agree and whose files do not.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from deskgym.calls import reset_request
from deskgym.client import Client, Pool
from deskgym.env import REPLAY_KEYS, DeskgymEnv, PoolShare, fidelity_name, obs_setup
from deskgym.errors import DeskgymError, code_name
from deskgym.options import PoolOptions
from deskgym.v1 import deskgym_pb2 as pb

__all__ = ["ROUTES", "Group", "GroupReport", "ReplicaReport", "judge", "make_group", "task_state"]

#: The routes a group may be asked to start by.
ROUTES = ("auto", "seed", "fork")

#: Info keys that describe how a frame was taken, not the task's state (a forked
#: replica's :data:`deskgym.env.REPLAY_KEYS` say how its replay went).
_NOT_STATE = ("frame_hash", "settle_quiesced", "settle_policy", *REPLAY_KEYS)

#: How long a still screen an OSWorld replica's frame is taken on (ms): apps draw on
#: their own time after their setup (the server's checkpoints wait 400 ms, decision 135).
OSWORLD_SETTLE_MS = 400


def task_state(info: Mapping[str, Any]) -> dict[str, Any]:
    """The task state an env's reset info says (task, instruction, seed, step, pointer
    and the task's own extras), for comparing replicas: everything but how the frame
    was taken (its hash is compared on its own)."""
    return {k: v for k, v in info.items() if k not in _NOT_STATE}


@dataclass(frozen=True)
class ReplicaReport:
    """One replica of a group: how it was started (``route``: ``"seed"`` or ``"fork"``),
    its frame hash and whether its frame and task state equal the group's. ``fidelity``
    is the server's verdict on a forked replica (``"exact"``/``"diverged"``), ``""`` for
    a seeded one."""

    index: int
    route: str
    frame_hash: str
    same_frame: bool
    same_state: bool
    fidelity: str = ""

    @property
    def identical(self) -> bool:
        """Same frame and same task state as the group's reference."""
        return self.same_frame and self.same_state


@dataclass(frozen=True)
class GroupReport:
    """What a group start did and found: the route asked for (``requested``) and the
    one taken (``route``: ``"seed"``, ``"fork"`` or ``"seed+fork"``, seeded replicas
    that differed replaced by forks), why (``note``), the reference frame hash and task
    state, and one :class:`ReplicaReport` per replica, in the group's order."""

    requested: str
    route: str
    reference_hash: str
    state: dict[str, Any]
    replicas: tuple[ReplicaReport, ...]
    note: str = ""
    #: Wall time of the whole start (pools, resets, forks, checks), in seconds.
    seconds: float = 0.0

    @property
    def identical(self) -> bool:
        """Every replica has the reference frame and task state."""
        return all(r.identical for r in self.replicas)

    @property
    def diverged(self) -> list[int]:
        """Indexes of the replicas that differ from the reference."""
        return [r.index for r in self.replicas if not r.identical]

    def __str__(self) -> str:
        head = (f"group of {len(self.replicas)} by {self.route} (asked: {self.requested}): "
                f"{'identical' if self.identical else f'replicas {self.diverged} differ'}, "
                f"frame {self.reference_hash}, {self.seconds:.2f} s")
        rows = [f"  {r.index}: {r.route:4} {r.frame_hash} frame {'=' if r.same_frame else '!='} "
                f"state {'=' if r.same_state else '!='}{' ' + r.fidelity if r.fidelity else ''}" for r in self.replicas]
        return "\n".join([head + (f" ({self.note})" if self.note else ""), *rows])


def judge(hashes: Sequence[str], states: Sequence[Mapping[str, Any]], routes: Sequence[str],
          fidelities: Sequence[str], *, requested: str, route: str, note: str = "",
          seconds: float = 0.0) -> GroupReport:
    """The report on replicas with these frame hashes and task states: the reference is
    the frame most replicas show (the earliest on a tie) with the state of the first
    replica showing it, so the fewest replicas are reported (and, for ``"auto"``,
    replaced)."""
    if not hashes:
        raise DeskgymError("INVALID_ARGUMENT", "a group has at least one replica")
    counts = Counter(hashes)
    ref_hash = max(hashes, key=lambda h: (counts[h], -hashes.index(h)))
    ref_state = dict(states[hashes.index(ref_hash)])
    reps = tuple(ReplicaReport(i, routes[i], h, h == ref_hash, dict(states[i]) == ref_state, fidelities[i])
                 for i, h in enumerate(hashes))
    return GroupReport(requested, route, ref_hash, ref_state, reps, note, round(seconds, 3))


def check_route(route: str, n: int) -> None:
    """``route`` and ``n`` are a group's, or a typed error says why not."""
    if route not in ROUTES:
        raise DeskgymError("INVALID_ARGUMENT", f"route {route!r} is not one of {', '.join(ROUTES)}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise DeskgymError("INVALID_ARGUMENT", f"n must be a positive int (got {n!r})")


def osworld_task(task: Any) -> dict[str, Any] | None:
    """An OSWorld task's config when ``task`` is one (a mapping with ``config`` or
    ``evaluator``, or the path of such a ``.json`` file), else ``None``."""
    if isinstance(task, (str, os.PathLike)) and str(task).endswith(".json"):
        path = Path(task)
        if not path.is_file():
            raise DeskgymError("NOT_FOUND", f"OSWorld task file {str(path)!r} does not exist")
        task = json.loads(path.read_text())
    if isinstance(task, Mapping):
        if "config" not in task and "evaluator" not in task:
            raise DeskgymError("INVALID_ARGUMENT", "a task given as a mapping must be an OSWorld task config "
                                                   "(with config and evaluator)")
        return dict(task)
    return None


@dataclass
class Group:
    """``n`` sessions started at one state (:func:`make_group`): iterate it or index it
    for the sessions (already reset: step them), with :attr:`observations` and
    :attr:`infos` of their start and the :attr:`report`. Closing it closes every session
    still open (a session may also be closed alone)."""

    envs: list[Any]
    observations: list[Any]
    infos: list[dict[str, Any]]
    report: GroupReport
    #: The client the sessions share (``None`` for OSWorld's shim desktops, which have their own).
    client: Client | None = None
    _own_client: bool = field(default=False, repr=False)

    def __len__(self) -> int:
        return len(self.envs)

    def __getitem__(self, i: int) -> Any:
        return self.envs[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.envs)

    def __enter__(self) -> Group:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes every session (idempotent), then the client the group made."""
        for e in self.envs:
            e.close()
        if self._own_client and self.client is not None:
            self.client.close()


#: ``make_group`` keywords that are the sessions' (``DeskgymEnv``'s), not the pool's.
_ENV_KWARGS = ("env_errors", "render_mode")


def make_group(
    task: Any,
    seed: int,
    n: int,
    *,
    route: str = "auto",
    address: str | None = None,
    token: str | None = None,
    client: Client | None = None,
    options: PoolOptions | None = None,
    **make_kwargs: Any,
) -> Group:
    """``n`` sessions of ``task`` at the identical start state of episode ``seed``.

    ``task``: a task name as :func:`deskgym.make` takes it (bundled, ``miniwob/...``,
    declarative), the sessions :class:`deskgym.DeskgymEnv` s made with ``make_kwargs``
    (``screen``, ``obs_type``, ``action_mode``...); or an OSWorld task (its config or
    ``.json`` path), the sessions :class:`deskgym.osworld.DesktopEnv` s made with
    ``make_kwargs`` (``cache_dir``, ``screen_size``, ``offline``...). ``route``: see the
    module's doc. The sessions share ``client`` (else one the group makes and closes),
    so a frame the replicas share crosses the wire once.

    Raises :class:`deskgym.DeskgymError`: a bad ``route``/``n`` or task
    (INVALID_ARGUMENT), ``route="fork"`` for an OSWorld task (INVALID_ARGUMENT), a
    replica that failed to start (its code; nothing is left open)."""
    check_route(route, n)
    config = osworld_task(task)
    if config is not None:
        kw = dict(make_kwargs)
        if address is not None:
            kw["address"] = address
        if token is not None:
            kw["token"] = token
        return _osworld_group(config, seed, n, route, kw)
    own = client is None
    client = client or Client(address, token)
    try:
        return _desktop_group(client, own, task, seed, n, route, options, make_kwargs)
    except BaseException:
        if own:
            client.close()
        raise


def _desktop_group(client: Client, own: bool, task: str, seed: int, n: int, route: str,
                   options: PoolOptions | None, make_kwargs: dict[str, Any]) -> Group:
    t0 = time.monotonic()
    env_kw = {k: make_kwargs.pop(k) for k in _ENV_KWARGS if k in make_kwargs}
    opts = PoolOptions.of(options, make_kwargs, "make_group")
    envs: list[DeskgymEnv] = []
    try:
        if route == "fork":
            envs, obs, infos, fid = _forked(client, task, seed, n, opts, env_kw)
            routes, note, taken = ["seed"] + ["fork"] * (n - 1), "", "fork"
        else:
            envs, obs, infos = _seeded(client, task, seed, n, opts, env_kw)
            routes, fid, taken = ["seed"] * n, [""] * n, "seed"
            note = ""
        report = judge([i["frame_hash"] for i in infos], [task_state(i) for i in infos], routes, fid,
                       requested=route, route=taken, note=note, seconds=time.monotonic() - t0)
        if route == "auto" and not report.identical:
            ref = next(r.index for r in report.replicas if r.identical)
            bad = report.diverged
            cp = envs[ref].save()
            r = client.fork(cp, len(bad), encoding=envs[ref]._encoding)
            client.delete_checkpoint(cp)
            forked = _sessions_of_fork(client, task, r, envs[ref], opts, env_kw)
            for i, (env, o, inf, f) in zip(bad, forked):
                envs[i].close()
                envs[i], obs[i], infos[i], routes[i], fid[i] = env, o, inf, "fork", f
            note = f"seeded replicas {bad} differed from replica {ref}: replaced by its forks"
            report = judge([i["frame_hash"] for i in infos], [task_state(i) for i in infos], routes, fid,
                           requested=route, route="seed+fork", note=note, seconds=time.monotonic() - t0)
    except BaseException:
        for e in envs:
            e.close()
        raise
    return Group(list(envs), obs, infos, report, client, own)


def _seeded(client: Client, task: str, seed: int, n: int, opts: PoolOptions,
            env_kw: dict[str, Any]) -> tuple[list[DeskgymEnv], list[Any], list[dict[str, Any]]]:
    """One pool of ``n`` desktops, each reset with ``seed`` (one StepBatch call when the
    observation has no tree; a tree is read by each session's own reset)."""
    encoding, tree = obs_setup(opts.obs_type)
    pool = opts.create_pool(client, task, n, seed=seed, encoding=encoding)
    share = PoolShare(client, pool, n)
    envs = [DeskgymEnv(task, options=opts, _share=share, _env_index=i, **env_kw) for i in range(n)]
    try:
        if tree is not None:
            with ThreadPoolExecutor(min(n, 16)) as ex:
                started = list(ex.map(lambda e: e.reset(seed=seed), envs))
            return envs, [o for o, _ in started], [i for _, i in started]
        reqs = [reset_request(e, seed, encoding, (), None) for e in pool.env_ids]
        resp = client.step_batch([], reqs, if_none_match=client.recent_hashes(encoding))
        for it in resp.reset_results:
            if it.code == 0:
                client.hold(it.result.observation)  # entries not_modified by an earlier one resolve
        obs, infos = [], []
        for env, it in zip(envs, resp.reset_results):
            if it.code != 0:
                raise DeskgymError(code_name(it.code), f"env {it.env_id}: {it.message}")
            o, inf = _started(env, seed, it.result.observation, it.result.info)
            obs.append(o)
            infos.append(inf)
        return envs, obs, infos
    except BaseException:
        for e in envs:
            e.close()
        raise


def _started(env: DeskgymEnv, seed: int | None, o: pb.Observation, i: pb.StepInfo) -> tuple[Any, dict[str, Any]]:
    """Makes ``env`` what its own ``reset(seed=seed)`` answered by ``o``, ``i`` would
    have made it: Gymnasium's generator seeded, the episode based (its later unseeded
    resets continue from the server's seed sequence), and its last frame held."""
    if seed is not None:
        gym.Env.reset(env, seed=seed)
    env._based, env._seed = True, None
    return env._result(o, i)


def _forked(client: Client, task: str, seed: int, n: int, opts: PoolOptions, env_kw: dict[str, Any]
            ) -> tuple[list[DeskgymEnv], list[Any], list[dict[str, Any]], list[str]]:
    """One desktop reset with ``seed`` and ``n - 1`` replicas forked from it."""
    first = DeskgymEnv(task, client=client, options=opts, seed=seed, **env_kw)
    envs = [first]
    try:
        o, inf = first.reset(seed=seed)
        obs, infos, fid = [o], [inf], [""]
        if n > 1:
            cp = first.save()
            r = client.fork(cp, n - 1, encoding=first._encoding)
            client.delete_checkpoint(cp)
            for env, o, inf, f in _sessions_of_fork(client, task, r, first, opts, env_kw):
                envs.append(env)
                obs.append(o)
                infos.append(inf)
                fid.append(f)
        return envs, obs, infos, fid
    except BaseException:
        for e in envs:
            e.close()
        raise


def _sessions_of_fork(client: Client, task: str, r: pb.ForkResponse, source: DeskgymEnv, opts: PoolOptions,
                      env_kw: dict[str, Any]) -> list[tuple[DeskgymEnv, Any, dict[str, Any], str]]:
    """A session per replica of a Fork's reply (one pool, released by the last of them):
    (session, observation, info, the server's fidelity)."""
    src = source._pool
    assert src is not None
    pool = Pool(r.pool_id, [x.env_id for x in r.replicas], src.width, src.height, src.max_steps, "", src.profile,
                src.capabilities)
    share = PoolShare(client, pool, len(r.replicas))
    for x in r.replicas:
        client.hold(x.observation)
    out = []
    for i, x in enumerate(r.replicas):
        env = DeskgymEnv(task, options=opts, _share=share, _env_index=i, **env_kw)
        o, inf = _started(env, None, x.observation, x.info)
        out.append((env, o, inf, fidelity_name(x.fidelity)))
    return out


def _osworld_group(config: dict[str, Any], seed: int, n: int, route: str, kwargs: dict[str, Any]) -> Group:
    """``n`` OSWorld shim desktops, each reset with the task (its setup run on each, in
    parallel); each frame is taken once its screen has been still for
    :data:`OSWORLD_SETTLE_MS`; the task state is the instruction and each setup step's
    outcome."""
    if route == "fork":
        raise DeskgymError(
            "INVALID_ARGUMENT",
            f"task {config.get('id', '?')}: an OSWorld task cannot start a group by fork: its setup runs "
            "commands and moves files, which a fork's replay does not carry (Exec and files are not in the "
            "replay log); use route='seed' (or 'auto'), which runs the setup on every replica",
        )
    from deskgym import osworld

    t0 = time.monotonic()
    envs: list[Any] = []
    try:
        with ThreadPoolExecutor(min(n, 16)) as ex:
            made = [ex.submit(osworld.DesktopEnv, **kwargs) for _ in range(n)]
            failed: BaseException | None = None
            for f in made:  # every desktop that started is kept, to be closed on a failure
                try:
                    envs.append(f.result())
                except BaseException as exc:  # noqa: BLE001 - the first failure is raised below
                    failed = failed or exc
            if failed is not None:
                raise failed
            obs = list(ex.map(lambda e: e.reset(task_config=config, seed=seed), envs))
            shots = list(ex.map(
                lambda e: e.deskgym.client.observe(e.deskgym.env_id, encoding="jpeg", settle_ms=OSWORLD_SETTLE_MS),
                envs))
    except BaseException:
        for e in envs:
            e.close()
        raise
    infos = []
    for e, shot in zip(envs, shots):
        setup = [(o.phase, o.step, o.type, o.ok) for o in e.setup_outcomes]
        infos.append({"frame_hash": shot.frame_hash, "task": config.get("id", ""),
                      "instruction": config.get("instruction", ""), "seed": seed, "setup": setup})
    report = judge([i["frame_hash"] for i in infos], [task_state(i) for i in infos], ["seed"] * n, [""] * n,
                   requested=route, route="seed", note="OSWorld: the task's setup ran on each replica",
                   seconds=time.monotonic() - t0)
    return Group(envs, obs, infos, report)
