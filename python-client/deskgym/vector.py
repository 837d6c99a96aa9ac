"""A Gymnasium ``VectorEnv`` whose ``step`` is one ``StepBatch`` call."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space, iterate

from deskgym.actions import to_proto
from deskgym.batching import autoreset_mode as mode_of
from deskgym.batching import reset_args
from deskgym.client import Checkpoint, Client, ExecResult, Pool, encoding_of
from deskgym.desktop import Desktop
from deskgym.env import check_render_mode, fidelity_name
from deskgym.episode import cause_of_code
from deskgym.errors import ENV_FAULTS, DeskgymError, code_name
from deskgym.modes import convert_obs
from deskgym.observation import info, stats
from deskgym.options import OBS_TYPES, PoolOptions
from deskgym.v1 import deskgym_pb2 as pb

class DeskgymVectorEnv(gym.vector.VectorEnv[Any, Any, Any]):
    """``num_envs`` desktops of one task, stepped together.

    Every ``step`` and ``reset`` is a single ``StepBatch`` RPC: with ``"next_step"``
    autoreset the envs that ended last step are reset in the same call; with
    ``"same_step"`` the server resets an env right after the step that ended it.
    A desktop that crashes (UNAVAILABLE) does not fail the batch: that env comes back
    truncated with ``info["error"]`` (``code``, ``message`` and the ``cause`` of
    :mod:`deskgym.episode`: that episode is invalid, not a 0) and is restarted by its
    autoreset.

    With ``autoreset_mode="disabled"``, an env whose episode ended is not stepped again
    until reset (``reset(options={"reset_mask": ...})``): it repeats its last
    observation with reward 0 and its ended flags, so one ended env never fails the
    batch. The pool options (``screen``, ``obs_type``, ``action_mode``...: the fields of
    :class:`deskgym.options.PoolOptions`) are as for :class:`deskgym.DeskgymEnv`;
    :attr:`last_stats` holds each env's measured timings.
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        task: str = "click-target",
        num_envs: int = 1,
        *,
        address: str | None = None,
        token: str | None = None,
        seed: int | None = None,
        autoreset_mode: str | AutoresetMode = "next_step",
        client: Client | None = None,
        render_mode: str | None = None,
        options: PoolOptions | None = None,
        _pool: Pool | None = None,
        **kwargs: Any,
    ) -> None:
        #: What this vector env's pool was made with (as :attr:`deskgym.DeskgymEnv.pool_options`).
        self.pool_options = opts = PoolOptions.of(options, kwargs, "DeskgymVectorEnv")
        obs_type = opts.obs_type
        check_render_mode(render_mode)
        #: Gymnasium's render mode: ``"rgb_array"`` or None.
        self.render_mode = render_mode
        pixel_types = [t for t in OBS_TYPES if "a11y" not in t]
        if obs_type not in pixel_types:
            why = " (tree observations are for single envs: deskgym.make)" if obs_type in OBS_TYPES else ""
            raise DeskgymError("INVALID_ARGUMENT", f"obs_type {obs_type!r} is not one of {', '.join(pixel_types)}{why}")
        mode = mode_of(autoreset_mode)
        if mode is None:
            raise DeskgymError("INVALID_ARGUMENT", f"autoreset_mode {autoreset_mode!r} is not one of next_step, same_step, disabled")
        self.autoreset_mode = mode
        self.metadata = {**self.metadata, "autoreset_mode": mode}
        self.num_envs = num_envs
        self.task = task
        self.obs_type = obs_type
        self._own_client = client is None
        self.client = client or Client(address, token)
        # Unseeded pools still get distinct, reproducible-per-run episode seeds.
        base_seed = seed if seed is not None else int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> 1)
        self._pool: Pool | None = _pool or opts.create_pool(self.client, task, num_envs, seed=base_seed, encoding=obs_type)
        #: Where the server writes this vector env's recording (when ``record`` names a run).
        self.recording_path = self._pool.recording_path
        self.env_ids = list(self._pool.env_ids)
        w, h = self._pool.width, self._pool.height
        self.obs_format = opts.obs_format
        self.info_timing = opts.info_timing
        self.single_observation_space = opts.frame_space(obs_type, w, h)
        self._mode = opts.action_mode_for(w, h)
        self.single_action_space = self._mode.space
        if obs_type == "rgb":
            self.observation_space = batch_space(self.single_observation_space, num_envs)
        else:
            self.observation_space = gym.spaces.Tuple([self.single_observation_space] * num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        # Sent with every request: a forked pool inherits its source's default encoding.
        self._encoding = encoding_of(obs_type)
        self._needs_reset = np.zeros(num_envs, dtype=bool)
        #: (terminated, truncated) of envs whose episode ended (disabled autoreset).
        self._ended: dict[int, tuple[bool, bool]] = {}
        #: Measured facts of each env's last reset/step (settle_ms, latency_ms, frame_cached).
        self.last_stats: list[dict[str, Any]] = [{} for _ in range(num_envs)]
        self._obs: list[Any] = [None] * num_envs
        self._hashes: list[str | None] = [None] * num_envs
        #: Per-replica fidelity when this vector env came from :func:`fork`.
        self.fork_info: dict[str, Any] | None = None

    # -- helpers ---------------------------------------------------------------------

    def _own(self, i: int) -> list[str]:
        h = self._hashes[i]
        return [h] if h else []

    def _shared(self) -> list[str]:
        return self.client.recent_hashes(self.obs_type)

    def _hold_all(self, resp: pb.StepBatchResponse) -> None:
        """First pass over a response: remember every frame it carries, so entries that
        came back ``not_modified`` (another entry of the same response has the pixels)
        resolve in any order."""
        for it in resp.results:
            if it.code == 0:
                self.client.hold(it.result.observation)
                if it.result.HasField("reset"):
                    self.client.hold(it.result.reset.observation)
        for rit in resp.reset_results:
            if rit.code == 0:
                self.client.hold(rit.result.observation)

    def _frame(self, i: int, obs: pb.Observation, step_info: pb.StepInfo) -> tuple[Any, dict[str, Any]]:
        frame, cached = self.client.resolve(obs)
        self._hashes[i] = obs.frame_hash
        self.last_stats[i] = stats(obs, step_info, cached)
        if isinstance(frame, np.ndarray):
            frame = convert_obs(self.obs_format, frame)
        return frame, info(obs, step_info, self.info_timing, cached)

    def _batch_obs(self) -> Any:
        if self.obs_type == "rgb":
            return np.stack(self._obs)
        return tuple(self._obs)

    def _actions(self, actions: Any) -> list[Any]:
        if isinstance(actions, dict):
            acts = list(iterate(self.action_space, actions))
        else:
            acts = list(actions)
        if len(acts) != self.num_envs:
            raise DeskgymError("INVALID_ARGUMENT", f"actions: got {len(acts)} actions for {self.num_envs} envs")
        return acts

    @staticmethod
    def _raise_unless_fault(env_id: str, code: int, message: str) -> str:
        name = code_name(code)
        if name not in ENV_FAULTS:
            raise DeskgymError(name, f"env {env_id}: {message}")
        return name

    # -- Gymnasium API -----------------------------------------------------------------

    def render(self) -> tuple[np.ndarray, ...] | None:
        """Each env's current screen as an (H, W, 3) uint8 array, as Gymnasium's vector
        envs render (a tuple, one frame per env; ``RecordVideo`` tiles them). The last
        observations serve when they are RGB frames; else the screens are read."""
        if self.render_mode != "rgb_array":
            return None
        frames = []
        for i, env_id in enumerate(self.env_ids):
            obs = self._obs[i]
            if self.obs_type == "rgb" and self.obs_format == "uint8_hwc" and obs is not None:
                frames.append(obs)
                continue
            frame, _ = self.client.resolve(self.client.observe(env_id, encoding="rgb"))
            assert isinstance(frame, np.ndarray)
            frames.append(frame)
        return tuple(frames)

    def reset(
        self, *, seed: int | Sequence[int | None] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """Resets all envs, or those in ``options["reset_mask"]``, in one call.

        ``seed``: an int seeds env i with ``seed + i``; a list gives one seed per env;
        ``None`` continues each env's own seed sequence.
        """
        seeds, mask = reset_args(self.num_envs, seed, options)
        idx = [i for i in range(self.num_envs) if mask[i]]
        if not idx:
            # An all-False mask (no env ended) resets nothing, as Gymnasium's own do.
            return self._batch_obs(), {}
        reqs = []
        for i in idx:
            req = pb.ResetRequest(env_id=self.env_ids[i], if_none_match=self._own(i), encoding=self._encoding)
            s = seeds[i]
            if s is not None:
                req.seed = s
            reqs.append(req)
        resp = self.client.step_batch([], reqs, if_none_match=self._shared())
        self._hold_all(resp)
        infos: dict[str, Any] = {}
        for i, item in zip(idx, resp.reset_results):
            if item.code != 0:
                raise DeskgymError(code_name(item.code), f"env {item.env_id}: {item.message}")
            self._obs[i], env_info = self._frame(i, item.result.observation, item.result.info)
            self._needs_reset[i] = False
            self._ended.pop(i, None)
            infos = self._add_info(infos, env_info, i)
        return self._batch_obs(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        acts = self._actions(actions)
        n = self.num_envs
        rewards = np.zeros(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        infos: dict[str, Any] = {}
        same_step = self.autoreset_mode == AutoresetMode.SAME_STEP
        next_step = self.autoreset_mode == AutoresetMode.NEXT_STEP
        step_idx, reset_idx, items, resets = [], [], [], []
        for i in range(n):
            if i in self._ended:
                # Disabled autoreset: an ended env waits for its reset.
                terminated[i], truncated[i] = self._ended[i]
                infos = self._add_info(infos, {"episode_ended": True}, i)
                continue
            if next_step and self._needs_reset[i]:
                reset_idx.append(i)
                resets.append(pb.ResetRequest(env_id=self.env_ids[i], if_none_match=self._own(i), encoding=self._encoding))
            else:
                step_idx.append(i)
                items.append(
                    pb.StepRequest(
                        env_id=self.env_ids[i],
                        action=to_proto(self._mode.to_action(acts[i])),
                        autoreset=same_step,
                        if_none_match=self._own(i),
                        encoding=self._encoding,
                    )
                )
        if not items and not resets:
            # Every env waits for its reset (disabled autoreset): nothing to send.
            return self._batch_obs(), rewards, terminated, truncated, infos
        resp = self.client.step_batch(items, resets, if_none_match=self._shared())
        self._hold_all(resp)

        env_info: dict[str, Any]
        for i, ritem in zip(reset_idx, resp.reset_results):
            if ritem.code != 0:
                err = self._raise_unless_fault(ritem.env_id, ritem.code, ritem.message)
                truncated[i] = True
                error = {"code": err, "message": ritem.message, "cause": cause_of_code(err)}
                infos = self._add_info(infos, {"error": error}, i)
                continue
            self._obs[i], env_info = self._frame(i, ritem.result.observation, ritem.result.info)
            self._needs_reset[i] = False
            infos = self._add_info(infos, env_info, i)

        for i, item in zip(step_idx, resp.results):
            if item.code != 0:
                err = self._raise_unless_fault(item.env_id, item.code, item.message)
                truncated[i] = True
                self._needs_reset[i] = True
                if self.autoreset_mode == AutoresetMode.DISABLED:
                    self._ended[i] = (False, True)
                env_info = {"error": {"code": err, "message": item.message, "cause": cause_of_code(err)}}
                if same_step:
                    env_info = self._same_step_recover(i, env_info)
                infos = self._add_info(infos, env_info, i)
                continue
            r = item.result
            rewards[i], terminated[i], truncated[i] = r.reward, r.terminated, r.truncated
            obs, env_info = self._frame(i, r.observation, r.info)
            ended = r.terminated or r.truncated
            if same_step and ended:
                if r.HasField("reset"):
                    final_obs, final_info = obs, env_info
                    obs, env_info = self._frame(i, r.reset.observation, r.reset.info)
                    env_info = {**env_info, "final_obs": final_obs, "final_info": final_info}
                else:
                    self._obs[i] = obs
                    env_info = self._same_step_recover(i, env_info)
                    obs = self._obs[i]
            elif ended:
                self._needs_reset[i] = True
                if self.autoreset_mode == AutoresetMode.DISABLED:
                    self._ended[i] = (bool(r.terminated), bool(r.truncated))
            self._obs[i] = obs
            infos = self._add_info(infos, env_info, i)
        return self._batch_obs(), rewards, terminated, truncated, infos

    def _same_step_recover(self, i: int, env_info: dict[str, Any]) -> dict[str, Any]:
        """Same-step mode promised a fresh episode; a failed server-side autoreset is
        retried here once (this restarts a crashed desktop)."""
        try:
            r = self.client.reset(self.env_ids[i], encoding=self.obs_type, if_none_match=self._own(i))
        except DeskgymError as e:
            self._needs_reset[i] = True
            return {**env_info, "autoreset_error": str(e)}
        final_obs = self._obs[i]
        self._obs[i], new_info = self._frame(i, r.observation, r.info)
        self._needs_reset[i] = False
        return {**new_info, "final_obs": final_obs, "final_info": env_info}

    def desktop(self, index: int) -> Desktop:
        """Env ``index``'s boundary verbs (``vec.desktop(0).exec("ls")``), each needing the
        capability it names."""
        return Desktop(self.client, self.env_ids[index])

    # The boundary verbs by env index, as earlier releases spelled them; the
    # signatures are :class:`deskgym.desktop.Desktop`'s.
    def exec(self, index: int, *args: Any, **kwargs: Any) -> ExecResult:
        """``desktop(index).exec(...)``."""
        return self.desktop(index).exec(*args, **kwargs)

    def put_file(self, index: int, *args: Any, **kwargs: Any) -> int:
        """``desktop(index).put_file(...)``."""
        return self.desktop(index).put_file(*args, **kwargs)

    def get_file(self, index: int, *args: Any, **kwargs: Any) -> bytes:
        """``desktop(index).get_file(...)``."""
        return self.desktop(index).get_file(*args, **kwargs)

    def list_directory(self, index: int, *args: Any, **kwargs: Any) -> pb.ListDirectoryResponse:
        """``desktop(index).list_directory(...)``."""
        return self.desktop(index).list_directory(*args, **kwargs)

    def windows(self, index: int) -> list[pb.WindowInfo]:
        """``desktop(index).windows()``."""
        return self.desktop(index).windows()

    def clipboard(self, index: int) -> str:
        """``desktop(index).clipboard()``."""
        return self.desktop(index).clipboard()

    def set_clipboard(self, index: int, text: str) -> None:
        """``desktop(index).set_clipboard(text)``."""
        self.desktop(index).set_clipboard(text)

    def screenshot(self, index: int, **options: Any) -> pb.Observation:
        """``desktop(index).screenshot(...)``."""
        return self.desktop(index).screenshot(**options)

    def close_extras(self, **kwargs: Any) -> None:
        """Releases every desktop on the server (idempotent)."""
        pool, self._pool = self._pool, None
        self.client.release(pool)
        if self._own_client:
            self.client.close()


def fork(
    checkpoint: Checkpoint,
    n: int,
    *,
    obs_type: str = "rgb",
    autoreset_mode: str | AutoresetMode = "next_step",
) -> DeskgymVectorEnv:
    """``n`` new desktops rebuilt at ``checkpoint``'s state, as a vector env that can be
    stepped right away (its current observations are the replicas' screens).

    Uses the checkpoint's client, so the replicas share its frame cache: replicas that
    show the same pixels download them once. ``env.fork_info["fidelity"]`` holds each
    replica's ``"exact"`` / ``"diverged"``, ``["left_at_step"]`` where a diverged one left
    the original's path.
    """
    client = checkpoint.client
    r = client.fork(checkpoint, n, encoding=obs_type)
    pool = Pool(r.pool_id, [x.env_id for x in r.replicas], checkpoint.width, checkpoint.height, 0)
    env = DeskgymVectorEnv(
        checkpoint.task, n, client=client, obs_type=obs_type, autoreset_mode=autoreset_mode,
        screen=(checkpoint.width, checkpoint.height), _pool=pool,
    )
    env._own_client = False
    for x in r.replicas:
        client.hold(x.observation)
    for i, x in enumerate(r.replicas):
        env._obs[i], _ = env._frame(i, x.observation, x.info)
    env.fork_info = {
        "fidelity": [fidelity_name(x.fidelity) for x in r.replicas],
        "expected_hash": r.expected_hash,
        "frame_hash": [x.observation.frame_hash for x in r.replicas],
        # Where each diverged replica left the original's path (1-based step; 0: it did not).
        "left_at_step": [x.path.left_at_step for x in r.replicas],
        "from_spares": r.from_spares,
        # Replicas that came from parked ones, and where each replica's replay began.
        "from_parked": r.from_parked,
        "replayed_from_step": [x.path.replayed_from_step for x in r.replicas],
        # How long each replay waited for the apps to go idle where the agent had paused.
        "idle_ms": [x.path.idle_ms for x in r.replicas],
    }
    return env
