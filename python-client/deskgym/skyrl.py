"""deskgym tasks as SkyRL-gym text environments (``skyrl-gym`` 0.4): importing this
module registers ``deskgym/<task>`` for every bundled task (``skyrl_gym.register``).

    import skyrl_gym, deskgym.skyrl
    env = skyrl_gym.make("deskgym/click-target", env_config={"address": "127.0.0.1:50051"},
                         extras={"seed": 0})
    prompt, meta = env.init([{"role": "system", "content": "..."}])   # + the task's screen
    out = env.step('<click x="100" y="200"/>')   # out["observations"], reward, done, metadata

The model's text is parsed by :mod:`deskgym.dialect`; a reply it cannot read steps
nothing and its message returns as the next user turn. When the desktop fails (a crash,
a timeout) the episode ends with ``metadata["invalid"] = True`` and the error: SkyRL's
step output must carry a float reward, so the 0 it carries is flagged, never a plain 0
(decision 183).
"""

from __future__ import annotations

from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from .client import Client
from .errors import DeskgymError
from .env import DeskgymEnv
from .tasks import BUNDLED
from .turns import Turn, image_part, play

#: SkyRL ids registered on import: one per bundled task.
SKYRL_IDS = {f"deskgym/{task}": task for task in BUNDLED}


def _config(env_config: Any) -> dict[str, Any]:
    # SkyRL hands its env_config as an OmegaConf DictConfig, a dict or None.
    if env_config is None:
        return {}
    items = getattr(env_config, "items", None)
    return dict(items()) if items is not None else dict(env_config)


class DeskgymTextEnv(BaseTextEnv):  # type: ignore[misc]  # skyrl-gym ships no type information
    """One desktop as a SkyRL ``BaseTextEnv``: ``init`` resets it, ``step`` plays the
    model's reply. SkyRL's constructor shape: ``env_config`` (shared by all episodes:
    ``address``, ``token``, ``screen``, ``max_turns``, ``format``, ``coords``,
    ``a11y``) and ``extras`` (one dataset row's: ``task``, ``seed``).

    Observations are chat messages: the instruction and the screenshot (an
    ``image_url`` part), plus the accessibility tree as text when ``a11y`` is set."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None, *,
                 task: str = "click-target") -> None:
        super().__init__()
        cfg, extras = _config(env_config), dict(extras or {})
        self.task = str(extras.get("task", task))
        self.seed = extras.get("seed")
        self.format = str(cfg.get("format", "auto"))
        self.coords = cfg.get("coords")
        self.a11y = bool(cfg.get("a11y", False))
        screen = cfg.get("screen", (640, 480))
        self.client = Client(cfg.get("address"), cfg.get("token"))
        # env_errors="raise": a failed desktop reaches step's handler (flagged invalid).
        self.env = DeskgymEnv(self.task, client=self.client, screen=(int(screen[0]), int(screen[1])), obs_type="png",
                              env_errors="raise")
        #: The turn bound: ``max_turns`` of the config, else the task's step bound.
        self.max_turns = int(cfg.get("max_turns") or self.env.max_steps or 1)
        self.info: dict[str, Any] = {}
        self.total_reward = 0.0

    def _message(self, png: bytes, text: str) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"type": "text", "text": text}, image_part(png)]
        if self.a11y:
            parts.append({"type": "text", "text": "Accessibility tree:\n" + self.env.observe(structured=True).text})
        return {"role": "user", "content": parts}

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Resets the desktop (``extras["seed"]``): ``prompt`` plus a user message with
        the instruction and the first screenshot, and the episode's facts."""
        png, self.info = self.env.reset(seed=self.seed)
        self.turns, self.total_reward = 0, 0.0
        first = self._message(bytes(png), f"Task: {self.info['instruction']}")
        return [*prompt, first], {"task": self.task, "seed": self.info["seed"], "frame_hash": self.info["frame_hash"]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Plays the model's reply; the episode ends when the task does or after
        ``max_turns`` replies."""
        self.turns += 1
        try:
            t: Turn = play(self.env, action, format=self.format, coords=self.coords, info=self.info)
        except DeskgymError as e:
            # The desktop failed: an invalid run, flagged (SkyRL needs a float reward here).
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True,
                                         metadata={"invalid": True, "error": f"{e.code}: {e.message}"})
        self.info = t.info
        self.total_reward += t.reward
        done = t.done or self.turns >= self.max_turns
        meta = {"invalid": False, "actions": t.actions, "ended": t.info.get("ended", ""),
                "step_index": t.info.get("step_index", 0), "feedback": t.feedback}
        if done:
            return BaseTextEnvStepOutput(observations=[], reward=t.reward, done=True, metadata=meta)
        text = (f"Your reply could not be read as actions: {t.feedback}" if t.feedback
                else f"Reward {t.reward:g}. Task: {t.info.get('instruction', '')}")
        return BaseTextEnvStepOutput(observations=[self._message(bytes(t.obs), text)], reward=t.reward, done=False,
                                     metadata=meta)

    def get_metrics(self) -> dict[str, Any]:
        return {"total_reward": self.total_reward, "turns": self.turns}

    def close(self) -> None:
        """Releases the desktop and the connection."""
        self.env.close()
        self.client.close()


for _id, _task in SKYRL_IDS.items():
    if _id not in skyrl_gym.registry:
        skyrl_gym.register(id=_id, entry_point="deskgym.skyrl:DeskgymTextEnv", kwargs={"task": _task})
