"""A Gymnasium ``Env`` over one deskgym desktop."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, SupportsFloat

import gymnasium as gym
import numpy as np

from gymnasium import spaces

from deskgym.a11y import A11yText, Tree, tree_request
from deskgym.actions import to_proto
from deskgym.client import Checkpoint, Client, Pool
from deskgym.desktop import Desktop
from deskgym.episode import cause_of_code
from deskgym.errors import ENV_FAULTS, DeskgymError
from deskgym.modes import convert_obs
from deskgym.observation import info, stats
from deskgym.options import OBS_TYPES, PoolOptions
from deskgym.v1 import deskgym_pb2 as pb

#: The frame encoding each observation type asks for (the tree-only type still gets a
#: cheap JPEG frame: ``render()`` and recordings use it).
_ENCODING = {"a11y": "jpeg", "rgb+a11y": "rgb"}



def obs_setup(obs_type: str) -> tuple[str, pb.TreeRequest | None]:
    """The frame encoding an observation type asks for, and the tree request it sends
    with each reset and step (``None``: no tree); an unknown type is an error."""
    if obs_type not in OBS_TYPES:
        raise DeskgymError("INVALID_ARGUMENT", f"obs_type {obs_type!r} is not one of {', '.join(OBS_TYPES)}")
    return _ENCODING.get(obs_type, obs_type), tree_request() if "a11y" in obs_type else None


def env_observation_space(opts: PoolOptions, encoding: str, width: int, height: int) -> spaces.Space[Any]:
    """The observation space of one env made with ``opts`` on a ``width`` x ``height``
    desktop whose frames come in ``encoding``."""
    pixels = opts.frame_space(encoding, width, height)
    if opts.obs_type == "a11y":
        return A11yText()
    if opts.obs_type == "rgb+a11y":
        return spaces.Dict({"pixels": pixels, "a11y": A11yText()})
    return pixels


def known_hashes(last_hash: str | None, recent: list[str]) -> list[str]:
    """Hashes sent as ``if_none_match``: the env's last frame first (an action that
    changes nothing costs no pixels), then what the client recently received."""
    if last_hash is None:
        return recent
    return [last_hash] + [h for h in recent if h != last_hash]


class Shaped(NamedTuple):
    """One reply as an env hands it out."""

    #: The observation, in the env's ``obs_type`` and ``obs_format``.
    value: Any
    info: dict[str, Any]
    #: What was measured (``last_stats``).
    stats: dict[str, Any]
    #: The tree read with it (obs types with ``a11y``), else ``None``.
    tree: Tree | None
    #: The frame as an (H, W, 3) array, when it is one (what ``render()`` returns).
    rgb: np.ndarray | None


def shape(
    frame: Any, cached: bool, obs: pb.Observation, step_info: pb.StepInfo, *, obs_type: str, obs_format: str,
    timing: bool, with_tree: bool,
) -> Shaped:
    """A reply's observation (its frame already resolved, ``cached`` when it came from
    the client's cache) in ``obs_type`` and ``obs_format``, with its info (``timing``:
    with the measured stats too) and, ``with_tree``, the tree read with it."""
    if cached and isinstance(frame, np.ndarray):
        # Gymnasium's contract: each call returns its own data, never a buffer an
        # earlier observation (still held by the user) shares.
        frame = frame.copy()
    rgb = None
    if isinstance(frame, np.ndarray):
        rgb = frame
        frame = convert_obs(obs_format, frame)
    tree = None
    if with_tree:
        tree = Tree.from_proto(obs.tree)
        frame = tree.text if obs_type == "a11y" else {"pixels": frame, "a11y": tree.text}
    return Shaped(frame, info(obs, step_info, timing, cached), stats(obs, step_info, cached), tree, rgb)


def check_render_mode(render_mode: str | None) -> None:
    """Gymnasium's ``render_mode``: ``None`` or ``"rgb_array"``, else an error saying why."""
    if render_mode not in (None, "rgb_array"):
        raise DeskgymError(
            "INVALID_ARGUMENT",
            f"render_mode {render_mode!r} is not supported: use 'rgb_array' (render() returns the "
            "screen, one per env for a vector env, as Gymnasium's RecordVideo wrappers take it; a "
            "desktop runs on the server, which opens no window on this machine)",
        )

def read_tree(
    client: Client, env_id: str, *, osworld_xml: bool = False, line_budget: int = 0,
    diff_from: Tree | int | None = None, timeout_ms: int = 0,
) -> Tree:
    """The accessibility tree of ``env_id`` now (``DeskgymEnv.observe(structured=True)``
    and ``Session.observe(structured=True)`` both read it here)."""
    req = tree_request(osworld_xml=osworld_xml, line_budget=line_budget, diff_from=diff_from, timeout_ms=timeout_ms)
    # The frame rides along as JPEG (the cheapest encoding); only the tree is used.
    return Tree.from_proto(client.observe(env_id, encoding="jpeg", tree=req).tree)


class DeskgymEnv(gym.Env[Any, Any], Desktop):
    """One real desktop running a bundled task, as a ``gymnasium.Env``.

    Infos hold only what the same seed and actions reproduce, so Gymnasium's and SB3's
    ``check_env`` pass on a default env; the measured ``settle_ms``, ``latency_ms`` and
    ``frame_cached`` of the last call are in :attr:`last_stats` (and in infos too with
    ``info_timing=True``).

    ``obs_type``: ``"rgb"`` (an (H, W, 3) array), ``"png"``/``"jpeg"`` (bytes), ``"a11y"``
    (the accessibility tree's text rendering, a ``str``) or ``"rgb+a11y"`` (a ``Dict``
    observation ``{"pixels": array, "a11y": str}``); the last reading's typed tree is in
    :attr:`last_tree`, and :meth:`observe` with ``structured=True`` reads it on demand.

    ``action_mode`` (``"dict"``, ``"click_grid"``, ``"pointer"``, ``"multi_discrete"``)
    and ``obs_format`` (``"uint8_hwc"``, ``"float32_chw"``) pick spaces RL libraries
    accept; see :mod:`deskgym.modes`.

    Seeding: ``reset(seed=s)`` lays the episode out from ``s`` (same seed, same pixels)
    and makes ``s`` the base of the env's later unseeded episodes, whose seeds the
    server derives with :func:`deskgym.seeding.episode_seed`; an env whose first reset
    has no seed draws a random base. A vector env of single envs seeded ``s + i``
    therefore plays exactly the episodes ``make_vec(seed=s)`` plays.

    ``screen`` (width, height) defaults to the task's own: 1280x720, or a MiniWoB++
    page's 160x210 task area. ``task_options`` go to the task family (``miniwob/...``:
    ``reward``, ``clock``, ``step_ms``, ``ready_ms``, ``data_mode``, ``reload``).

    ``env_errors``: what a step does when the desktop fails under it (a code of
    :data:`deskgym.errors.ENV_FAULTS`: crashed, timed out, internal error).
    ``"truncate"`` (default, as :class:`deskgym.DeskgymVectorEnv` does, decision 8): the
    episode ends ``truncated`` with the last observation, reward 0 and
    ``info["error"] = {"code", "message", "cause"}``: an invalid episode
    (:func:`deskgym.episode.result_of` says so, never a score of 0); the next ``reset``
    restarts the desktop. ``"raise"``: the step raises :class:`deskgym.DeskgymError`.
    A caller's error (a bad action, a step before reset) always raises.

    Those and the other pool options (``max_steps``, ``settle_ms``, ``record``,
    ``profile``, ``capabilities``, ``grid``, ``info_timing``) are the fields of
    :class:`deskgym.options.PoolOptions`: give them as keywords, as ``options=``, or both
    (the keywords win).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        task: str = "click-target",
        *,
        address: str | None = None,
        token: str | None = None,
        seed: int | None = None,
        render_mode: str | None = None,
        client: Client | None = None,
        options: PoolOptions | None = None,
        env_errors: str = "truncate",
        _share: PoolShare | None = None,
        _env_index: int = 0,
        **kwargs: Any,
    ) -> None:
        if env_errors not in ENV_ERROR_POLICIES:
            raise DeskgymError("INVALID_ARGUMENT",
                               f"env_errors {env_errors!r} is not one of {', '.join(ENV_ERROR_POLICIES)}")
        #: ``"truncate"`` or ``"raise"``: what a step does when the desktop fails under it.
        self.env_errors = env_errors
        #: What this env's pool was made with: ``options``, with the pool options among
        #: ``kwargs`` (``screen=``, ``obs_type=``...) laid over it.
        self.pool_options = opts = PoolOptions.of(options, kwargs, "DeskgymEnv")
        obs_type = opts.obs_type
        self._encoding, self._tree = obs_setup(obs_type)
        check_render_mode(render_mode)
        self.task = task
        self.obs_type = obs_type
        #: The tree read with the last reset/step (obs types with ``a11y``) or observe.
        self.last_tree: Tree | None = None
        self.render_mode = render_mode
        self.info_timing = opts.info_timing
        self._own_client = client is None and _share is None
        self.client = _share.client if _share is not None else client or Client(address, token)
        self._seed = seed
        self._pool: Pool | None = None
        # A session over a pool it shares with others (a group's, a fork's) releases the
        # pool only when the last of them closes.
        self._share = _share
        self._pool = _share.pool if _share is not None else opts.create_pool(
            self.client, task, 1, seed=seed or 0, encoding=self._encoding)
        #: The desktop profile this env runs, and the capabilities its pool was granted.
        self.profile = self._pool.profile
        self.capabilities = self._pool.capabilities
        #: Where the server writes this env's recording (when ``record`` names a run).
        self.recording_path = self._pool.recording_path
        self.env_id = self._pool.env_ids[_env_index]
        #: The server's pool of this env's desktop (as :class:`deskgym.aio.AsyncDeskgymEnv` has it).
        self.pool_id = self._pool.pool_id
        self.max_steps = self._pool.max_steps
        w, h = self._pool.width, self._pool.height
        #: The desktop's screen, (width, height) in pixels.
        self.screen = (w, h)
        self.obs_format = opts.obs_format
        self.observation_space: spaces.Space[Any] = env_observation_space(opts, self._encoding, w, h)
        self._mode = opts.action_mode_for(w, h)
        self.action_space = self._mode.space
        self._last_rgb: np.ndarray | None = None
        self._last_obs: Any = None
        self._last_hash: str | None = None
        self._based = False
        #: Measured facts of the last reset/step (settle_ms, latency_ms, frame_cached).
        self.last_stats: dict[str, Any] = {}

    def _known(self) -> list[str]:
        """Hashes sent as ``if_none_match``: this env's last frame first (an action that
        changes nothing costs no pixels), then what the client recently received."""
        return known_hashes(self._last_hash, self.client.recent_hashes(self._encoding, 8))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None
        super().reset(seed=seed)
        if seed is None and not self._based:
            # The first episode of an unseeded env: a random base, not the pool's 0.
            seed = int(self.np_random.integers(0, 2**63 - 1))
        # An explicit seed is the new base; otherwise the server derives the next one.
        r = self.client.reset(
            self.env_id, seed=seed, encoding=self._encoding, if_none_match=self._known(), tree=self._tree
        )
        self._based = True
        return self._result(r.observation, r.info)

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        act = to_proto(self._mode.to_action(action))
        try:
            r = self.client.step(self.env_id, act, encoding=self._encoding, if_none_match=self._known(),
                                 tree=self._tree)
        except DeskgymError as e:
            if self.env_errors == "raise" or e.code not in ENV_FAULTS:
                raise
            # The desktop failed under the episode: it ends here, and says it is invalid.
            err = {"code": e.code, "message": e.message, "cause": cause_of_code(e.code)}
            return self._last_obs, 0.0, False, True, {"error": err}
        obs, inf = self._result(r.observation, r.info)
        return obs, r.reward, r.terminated, r.truncated, inf

    def _result(self, obs: Any, step_info: Any) -> tuple[Any, dict[str, Any]]:
        frame, cached = self.client.resolve(obs)
        s = shape(frame, cached, obs, step_info, obs_type=self.obs_type, obs_format=self.obs_format,
                  timing=self.info_timing, with_tree=self._tree is not None)
        self._last_hash = obs.frame_hash
        self._last_obs = s.value
        if s.rgb is not None:
            self._last_rgb = s.rgb
        self.last_stats = s.stats
        if s.tree is not None:
            self.last_tree = s.tree
        return s.value, s.info

    def observe(
        self,
        structured: bool = False,
        *,
        osworld_xml: bool = False,
        line_budget: int = 0,
        diff_from: Tree | int | None = None,
        timeout_ms: int = 0,
    ) -> Any:
        """The screen now, without acting; with ``structured=True`` the accessibility
        tree instead (a :class:`deskgym.a11y.Tree`): ``osworld_xml`` adds OSWorld's XML,
        ``line_budget`` bounds its text, ``diff_from`` (an earlier tree or its revision)
        adds the server's diff, ``timeout_ms`` bounds the walk (past it the tree is
        ``partial``)."""
        if not structured:
            frame, _ = self.client.resolve(self.client.observe(self.env_id, encoding=self._encoding))
            return frame
        self.last_tree = read_tree(self.client, self.env_id, osworld_xml=osworld_xml, line_budget=line_budget,
                                   diff_from=diff_from, timeout_ms=timeout_ms)
        return self.last_tree

    def save(self, park: int = 0) -> Checkpoint:
        """Saves this env's state; restore it with :meth:`restore` or fork it with
        :func:`deskgym.fork` (``park`` as :meth:`deskgym.Client.save`)."""
        return self.client.save(self.env_id, park)

    def restore(self, checkpoint: Checkpoint) -> tuple[Any, dict[str, Any]]:
        """Rewinds to ``checkpoint`` (by deterministic replay on a fresh desktop).
        ``info["fidelity"]`` is ``"exact"`` or ``"diverged"`` (with ``info["expected_hash"]``,
        ``left_at_step``, ``replayed_from_step``: :func:`rebuilt_info`)."""
        r = self.client.restore(self.env_id, checkpoint, encoding=self._encoding)
        if self._tree is not None:
            # Restore carries no tree: read the restored desktop's.
            r.observation.tree.CopyFrom(self.client.observe(self.env_id, encoding="jpeg", tree=self._tree).tree)
        obs, inf = self._result(r.observation, r.info)
        return obs, rebuilt_info(inf, r.fidelity, r.expected_hash, r.path)

    def render(self) -> np.ndarray | None:
        """The current screen as an (H, W, 3) array."""
        if self.render_mode != "rgb_array":
            return None
        if self._encoding == "rgb" and self._last_rgb is not None:
            return self._last_rgb
        frame, _ = self.client.resolve(self.client.observe(self.env_id, encoding="rgb"))
        assert isinstance(frame, np.ndarray)
        return frame

    def launch_app(self, name: str, args: Sequence[str] = ()) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Starts one of the profile's apps (``terminal``, ``chromium``...) as a step, which
        waits for its window (needs the ``launch_app`` capability)."""
        return self.step({"verb": "launch_app", "app": name, "args": list(args)})

    def close(self) -> None:
        """Releases the desktop on the server (idempotent)."""
        pool, self._pool = self._pool, None
        if self._share is not None:
            if pool is not None:
                self._share.leave()
        else:
            self.client.release(pool)
        if self._own_client:
            self.client.close()
        super().close()


#: ``env_errors=``: what a step does when the desktop fails under it.
ENV_ERROR_POLICIES = ("truncate", "raise")


class PoolShare:
    """A pool several sessions run on (a group's, a fork's): each :class:`DeskgymEnv`
    over it calls :meth:`leave` once when it closes, and the last one releases the pool.
    The sessions use ``client``; the share never closes it (its maker does)."""

    def __init__(self, client: Client, pool: Pool, sessions: int) -> None:
        self.client, self.pool, self.sessions = client, pool, sessions

    def leave(self) -> None:
        """One session is done with the pool; the last one releases it."""
        self.sessions -= 1
        if self.sessions == 0:
            self.client.release(self.pool)


def fidelity_name(f: int) -> str:
    """Wire ``Fidelity`` -> ``"exact"`` / ``"diverged"``."""
    names: dict[int, str] = {pb.FIDELITY_EXACT: "exact", pb.FIDELITY_DIVERGED: "diverged"}
    return names.get(f, "unknown")


#: The keys :func:`rebuilt_info` adds beside ``fidelity``: how a replay went, not the
#: task's state (a group comparing replicas' states leaves them out).
REPLAY_KEYS = ("expected_hash", "left_at_step", "replayed_from_step", "idle_ms")


def rebuilt_info(info: dict[str, Any], fidelity: int, expected_hash: str, path: pb.ReplayPath) -> dict[str, Any]:
    """``info`` of a restored env or a fork's replica, with how its rebuild went:
    ``fidelity`` (``"exact"`` / ``"diverged"``), the checkpoint's ``expected_hash``,
    ``left_at_step`` (the 1-based step where a diverged rebuild left the original's
    path; 0: it did not), ``replayed_from_step`` (where its replay began: 0 from a
    reset, else the step of the parked replica it started from) and ``idle_ms`` (how
    long the replay waited for the apps to go idle where the original's agent had
    paused, decision 203)."""
    info["fidelity"] = fidelity_name(fidelity)
    info["expected_hash"] = expected_hash
    info["left_at_step"] = path.left_at_step
    info["replayed_from_step"] = path.replayed_from_step
    info["idle_ms"] = path.idle_ms
    return info


def make(task: str, **kwargs: Any) -> DeskgymEnv:
    """``deskgym.make("click-target", address=..., seed=0, screen=(640, 480), obs_type="rgb")``."""
    return DeskgymEnv(task, **kwargs)
