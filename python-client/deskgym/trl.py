"""TRL: deskgym desktops as the environments of ``GRPOTrainer(environment_factory=...)``.

    from trl import GRPOConfig, GRPOTrainer
    from deskgym.trl import DesktopEnvironment

    trainer = GRPOTrainer(
        model=model, train_dataset=dataset, args=GRPOConfig(...),
        environment_factory=DesktopEnvironment.factory("click-target", screen=(320, 240)),
    )

TRL (>= 1.16, extra ``[train]``) calls the factory with no arguments, once per concurrent
rollout, and reuses each instance: the desktop is taken at the first ``reset`` and kept.
The model's tools are this class's public functions, the action verbs of
:func:`deskgym.to_proto` (``click``, ``double_click``, ``right_click``, ``move``,
``drag``, ``scroll``, ``type_text``, ``key``, ``wait``), each described to the model by
its type hints and docstring. Each tool steps the desktop and returns the new screen:
a ``{"type": "image", "image": PIL.Image}`` block (the images a VLM sees) and, with
``a11y=True``, the accessibility tree as text (for text-only models: ``images=False,
a11y=True``). ``reset(**row)`` receives the dataset row and returns the task's
instruction and the first screen the same way.

Tasks: a bundled task (``click-target``), a MiniWoB++ page (``miniwob/click-button``), a
declarative task the server lists (``desktop/terminal-copy``), or an OSWorld task (its
config dict, or ``"osworld/<task id>"`` with ``examples=`` the folder of OSWorld's
``evaluation_examples/examples``), scored by OSWorld's own evaluator. A row's ``task``
column overrides the factory's task; its ``seed`` column seeds the episode, else the
prompt does, so the rollouts of one GRPO group start from the same screen.

Rewards: :meth:`DesktopEnvironment.get_reward` is the episode's return (the sum of the
task's step rewards; OSWorld: the evaluator's score), or ``None`` when the run is
invalid: the desktop could not be started or reset, a step failed on the server's side
(crash, timeout, an unavailable desktop), an OSWorld setup or evaluation step failed.
TRL reads ``None`` as "no reward" and leaves the rollout out of its group's baseline: an
invalid run is never trained on as a 0. A tool call the desktop refuses as bad input (a
point off the screen) is the model's mistake, not the run's: TRL hands the error back to
the model as the tool's answer and the run stays valid. Each finished rollout is logged
in :attr:`DesktopEnvironment.episodes`.
"""

from __future__ import annotations

import io
import json
import pathlib
import weakref
import zlib
from collections.abc import Mapping
from typing import Any, ClassVar

from deskgym.env import DeskgymEnv
from deskgym.errors import DeskgymError

__all__ = ["DesktopEnvironment", "EpisodeEnded", "TOOLS", "Episode"]

#: The tools a model gets: deskgym's pointer and keyboard verbs.
TOOLS = ("click", "double_click", "right_click", "move", "drag", "scroll", "type_text", "key", "wait")
#: Codes that say the model's call was wrong, not the desktop: the tool answers the error
#: and the run stays valid. Everything else invalidates the run.
_MODEL_ERRORS = ("INVALID_ARGUMENT", "OUT_OF_RANGE")
#: Where a task id names an OSWorld task.
OSWORLD_PREFIX = "osworld/"

#: One finished rollout: ``task``, ``seed``, ``reward`` (``None`` when invalid),
#: ``status`` (``"scored"`` or ``"invalid"``), ``cause`` (why it is invalid), ``steps``
#: (actions the desktop ran: the server's step index), ``ended`` (``success`` / ``failure`` / ``max_steps`` or ``""``).
Episode = dict[str, Any]


class EpisodeEnded(RuntimeError):
    """A tool called after the episode ended (TRL shows its message to the model)."""


def _seed_of(row: Mapping[str, Any]) -> int:
    """The row's ``seed``, else a stable hash of its prompt: every rollout of a GRPO group
    gets the same row, so they start from the same screen."""
    if row.get("seed") is not None:
        return int(row["seed"])
    return zlib.crc32(json.dumps(row.get("prompt"), sort_keys=True, default=str).encode())


def _image(frame: Any) -> Any:
    """A PIL image of an observation's frame (an RGB array, or PNG/JPEG bytes)."""
    from PIL import Image

    if isinstance(frame, (bytes, bytearray)):
        return Image.open(io.BytesIO(frame)).convert("RGB")
    return Image.fromarray(frame)


def osworld_task(task_id: str, examples: str | pathlib.Path) -> dict[str, Any]:
    """OSWorld's task config ``<examples>/<domain>/<task_id>.json``."""
    root = pathlib.Path(examples)
    found = sorted(root.glob(f"*/{task_id}.json"))
    if not found:
        raise DeskgymError("NOT_FOUND", f"OSWorld task {task_id!r} is not in {root} (<domain>/<id>.json)", "task")
    config: dict[str, Any] = json.loads(found[0].read_text())
    return config


class DesktopEnvironment:
    """One rollout's desktop for TRL's ``GRPOTrainer``; see the module's doc.

    Build the class TRL calls with :meth:`factory`. ``options``: ``address``, ``token``
    (the server), ``images`` (screenshots as image blocks, default on), ``a11y`` (the
    accessibility tree as text, default off), ``examples`` (OSWorld's examples folder),
    ``cache_dir`` (OSWorld's download cache), and any pool option of
    :func:`deskgym.make` (``screen``, ``max_steps``, ``profile``, ``record``...).
    """

    #: The task of the factory's class (a task id, or an OSWorld config).
    default_task: ClassVar[str | dict[str, Any]] = "click-target"
    #: The options of the factory's class.
    default_options: ClassVar[dict[str, Any]] = {}
    # The instances of each class, for close_all (TRL keeps its own list privately).
    _live: ClassVar[weakref.WeakSet[DesktopEnvironment]]

    def __init__(self, task: str | dict[str, Any] | None = None, **options: Any) -> None:
        opts = {**type(self).default_options, **options}
        self._address: str | None = opts.pop("address", None)
        self._token: str | None = opts.pop("token", None)
        self._images = bool(opts.pop("images", True))
        self._a11y = bool(opts.pop("a11y", False))
        self._examples = opts.pop("examples", None)
        self._cache_dir = str(opts.pop("cache_dir", "cache"))
        if not (self._images or self._a11y):
            raise DeskgymError("INVALID_ARGUMENT", "images=False needs a11y=True: the model must see the screen somehow",
                               "images")
        if "obs_type" in opts:
            raise DeskgymError("INVALID_ARGUMENT", "obs_type is chosen from images= and a11y=", "obs_type")
        self._pool_options = opts
        self.task: str | dict[str, Any] = task if task is not None else type(self).default_task
        #: Every finished rollout of this instance, oldest first (:data:`Episode`).
        self.episodes: list[Episode] = []
        self._env: DeskgymEnv | None = None
        self._env_task: Any = None
        self._osworld: Any = None
        self._config: dict[str, Any] | None = None
        self._seed = 0
        self._return = 0.0
        self._steps = 0
        self._ended = ""
        self._invalid = ""
        self._rewarded = True
        if "_live" not in type(self).__dict__:
            type(self)._live = weakref.WeakSet()
        type(self)._live.add(self)

    @classmethod
    def factory(cls, task: str | dict[str, Any] = "click-target", **options: Any) -> type[DesktopEnvironment]:
        """A subclass bound to ``task`` and ``options``: what TRL's ``environment_factory``
        takes (it calls it with no arguments). TRL names the reward column after it."""
        if not isinstance(task, (str, dict)):
            raise DeskgymError("INVALID_ARGUMENT", f"task must be a task id or an OSWorld config, not {type(task).__name__}",
                               "task")
        attrs = {"default_task": task, "default_options": dict(options), "__module__": cls.__module__,
                 "__doc__": cls.__doc__}
        return type(cls.__name__, (cls,), attrs)

    @classmethod
    def close_all(cls) -> None:
        """Releases the desktops of every live instance of this class (the server frees a
        forgotten one within its lease anyway)."""
        for env in list(cls.__dict__.get("_live", ())):
            env._close()

    # -- TRL's interface --------------------------------------------------------------

    def reset(self, **row: Any) -> str | list[dict[str, Any]]:
        """Starts an episode for one dataset ``row`` (its ``task`` and ``seed`` columns,
        when present, pick the task and the layout) and returns the instruction and the
        first screen, appended to the prompt's last user message."""
        if not self._rewarded:
            self._finish(None)  # TRL reset without asking for the reward: keep the log whole
        task = row.get("task") or self.task
        self._seed, self._return, self._steps, self._ended, self._invalid = _seed_of(row), 0.0, 0, "", ""
        self._rewarded = False
        try:
            if isinstance(task, dict) or (isinstance(task, str) and task.startswith(OSWORLD_PREFIX)):
                return self._reset_osworld(task)
            return self._reset_task(task)
        except DeskgymError as e:
            self._invalid = f"reset: {e.code}: {e.message}"
            return f"The desktop could not be started ({self._invalid}); this episode does not count."

    def get_reward(self) -> float | None:
        """The episode's reward: the sum of its step rewards (OSWorld: the evaluator's
        score), or ``None`` when the run is invalid (see the module's doc)."""
        reward: float | None = None
        if not self._invalid:
            reward = self._evaluate_osworld() if self._osworld is not None and self._config is not None else self._return
        self._finish(reward)
        return reward

    # -- tools: the action verbs --------------------------------------------------------

    def click(self, x: int, y: int) -> str | list[dict[str, Any]]:
        """Clicks the left mouse button at a point of the screen.

        Args:
            x: Horizontal pixel coordinate in the screenshot, from the left edge.
            y: Vertical pixel coordinate in the screenshot, from the top edge.

        Returns:
            The screen after the click.
        """
        return self._act({"verb": "click", "x": x, "y": y})

    def double_click(self, x: int, y: int) -> str | list[dict[str, Any]]:
        """Double-clicks the left mouse button at a point of the screen.

        Args:
            x: Horizontal pixel coordinate in the screenshot, from the left edge.
            y: Vertical pixel coordinate in the screenshot, from the top edge.

        Returns:
            The screen after the double click.
        """
        return self._act({"verb": "double_click", "x": x, "y": y})

    def right_click(self, x: int, y: int) -> str | list[dict[str, Any]]:
        """Clicks the right mouse button at a point of the screen (opens context menus).

        Args:
            x: Horizontal pixel coordinate in the screenshot, from the left edge.
            y: Vertical pixel coordinate in the screenshot, from the top edge.

        Returns:
            The screen after the click.
        """
        return self._act({"verb": "right_click", "x": x, "y": y})

    def move(self, x: int, y: int) -> str | list[dict[str, Any]]:
        """Moves the mouse pointer to a point of the screen without clicking (hover).

        Args:
            x: Horizontal pixel coordinate in the screenshot, from the left edge.
            y: Vertical pixel coordinate in the screenshot, from the top edge.

        Returns:
            The screen after the move.
        """
        return self._act({"verb": "move", "x": x, "y": y})

    def drag(self, x: int, y: int, to_x: int, to_y: int) -> str | list[dict[str, Any]]:
        """Presses the left mouse button at one point, moves to another and releases it.

        Args:
            x: Horizontal pixel coordinate where the drag starts.
            y: Vertical pixel coordinate where the drag starts.
            to_x: Horizontal pixel coordinate where the drag ends.
            to_y: Vertical pixel coordinate where the drag ends.

        Returns:
            The screen after the drag.
        """
        return self._act({"verb": "drag", "x": x, "y": y, "to_x": to_x, "to_y": to_y})

    def scroll(self, x: int, y: int, dy: int, dx: int = 0) -> str | list[dict[str, Any]]:
        """Turns the mouse wheel with the pointer at a point of the screen.

        Args:
            x: Horizontal pixel coordinate of the pointer.
            y: Vertical pixel coordinate of the pointer.
            dy: Wheel clicks down (negative: up).
            dx: Wheel clicks right (negative: left).

        Returns:
            The screen after the scroll.
        """
        return self._act({"verb": "scroll", "x": x, "y": y, "dx": dx, "dy": dy})

    def type_text(self, text: str) -> str | list[dict[str, Any]]:
        """Types text with the keyboard into the focused element.

        Args:
            text: The text to type; a newline presses Enter.

        Returns:
            The screen after typing.
        """
        return self._act({"verb": "type_text", "text": text})

    def key(self, keys: str) -> str | list[dict[str, Any]]:
        """Presses a key or a key combination.

        Args:
            keys: X key names joined by '+', e.g. 'Return', 'ctrl+s', 'alt+Tab', 'BackSpace'.

        Returns:
            The screen after the key press.
        """
        return self._act({"verb": "key", "keys": keys})

    def wait(self, ms: int) -> str | list[dict[str, Any]]:
        """Waits without acting, for the screen to change.

        Args:
            ms: How long to wait, in milliseconds.

        Returns:
            The screen after waiting.
        """
        return self._act({"verb": "wait", "ms": ms})

    # -- the desktop ----------------------------------------------------------------------

    def _obs_type(self) -> str:
        return ("rgb+a11y" if self._images else "a11y") if self._a11y else "rgb"

    def _reset_task(self, task: str) -> str | list[dict[str, Any]]:
        self._config = None
        if self._osworld is not None or self._env_task != task:
            self._close()
        if self._env is None:
            # A desktop that fails under a tool call raises (env_errors="raise"), so the
            # run is invalid: the default would end it truncated, its return a 0.
            self._env = DeskgymEnv(task, address=self._address, token=self._token, obs_type=self._obs_type(),
                                   env_errors="raise", **self._pool_options)
            self._env_task = task
        obs, info = self._env.reset(seed=self._seed)
        w, h = self._env.screen
        # TRL appends a string to the prompt's text as it is: start on a new paragraph.
        intro = (f"\n\nTask: {info['instruction']}\nThe screen is {w}x{h} pixels; tools take pixel coordinates of "
                 "the screenshot, (0, 0) at its top left.")
        return self._blocks(intro, obs)

    def _reset_osworld(self, task: str | dict[str, Any]) -> str | list[dict[str, Any]]:
        from deskgym.osworld import DesktopEnv
        from deskgym.osworld.outcomes import invalidates

        if isinstance(task, str):
            if self._examples is None:
                raise DeskgymError("INVALID_ARGUMENT", f"{task!r}: give examples= (OSWorld's examples folder)", "examples")
            task = osworld_task(task[len(OSWORLD_PREFIX):], self._examples)
        if self._env is not None:
            self._close()
        if self._osworld is None:
            screen = self._pool_options.get("screen", (1920, 1080))
            self._osworld = DesktopEnv(address=self._address, token=self._token, screen_size=tuple(screen),
                                       cache_dir=self._cache_dir, require_a11y_tree=False)
        self._config = task
        try:
            self._osworld.reset(task_config=task)
        except Exception as e:  # OSWorld's setup raises anything: the run is invalid, not scored
            raise DeskgymError("FAILED_PRECONDITION", f"OSWorld setup: {type(e).__name__}: {e}") from None
        failed = [o for o in self._osworld.setup_outcomes if invalidates(o)]
        if failed:
            raise DeskgymError("FAILED_PRECONDITION", f"OSWorld setup: {failed[0].describe()}")
        env = self._osworld.deskgym
        frame = env.observe()
        intro = (f"\n\nTask: {task.get('instruction', '')}\nThe screen is {self._osworld.screen_width}x"
                 f"{self._osworld.screen_height} pixels; tools take pixel coordinates of the screenshot.")
        return self._blocks(intro, frame, tree=self._tree_text(env))

    def _tree_text(self, env: DeskgymEnv) -> str | None:
        return env.observe(structured=True).text if self._a11y else None

    def _evaluate_osworld(self) -> float | None:
        from deskgym.osworld.outcomes import invalidates

        try:
            score = float(self._osworld.evaluate())
        except Exception as e:  # the evaluator or its postconfig failed: invalid, never 0
            self._invalid = f"evaluate: {type(e).__name__}: {e}"
            return None
        failed = [o for o in self._osworld.setup_outcomes if invalidates(o)]
        if failed:
            self._invalid = f"evaluate: {failed[0].describe()}"
            return None
        return score

    def _act(self, action: dict[str, Any]) -> str | list[dict[str, Any]]:
        """Steps the desktop; the tool's answer is the new screen."""
        if self._invalid:
            raise EpisodeEnded(f"this episode is void ({self._invalid}); no action runs")
        if self._ended:
            raise EpisodeEnded(f"the episode has ended ({self._ended}); no action runs")
        env = self._env if self._osworld is None else self._osworld.deskgym
        if env is None:
            raise EpisodeEnded("no episode is running: reset first")
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except DeskgymError as e:
            if e.code in _MODEL_ERRORS:
                raise ValueError(e.message) from None  # the model's to fix; TRL answers it
            self._invalid = f"step: {e.code}: {e.message}"
            raise EpisodeEnded(f"the desktop failed ({e.code}); this episode does not count") from None
        # The server's own count of the actions this episode ran (its step index).
        self._steps = int(info.get("step_index", self._steps + 1))
        tree = None
        if self._osworld is not None:
            obs, tree = env.observe(), self._tree_text(env)  # the shim steps with cheap JPEGs
        else:
            self._return += float(reward)
            if terminated or truncated:
                self._ended = str(info.get("ended") or ("max_steps" if truncated else "ended"))
        note = f"The episode ended ({self._ended})." if self._ended else "Done."
        return self._blocks(note, obs, tree=tree)

    def _blocks(self, text: str, obs: Any, tree: str | None = None) -> str | list[dict[str, Any]]:
        """The tool's answer: text (with the tree when asked for) and the screenshot."""
        frame = obs
        if isinstance(obs, dict):  # rgb+a11y
            frame, tree = obs["pixels"], obs["a11y"]
        elif isinstance(obs, str):  # a11y only
            frame, tree = None, obs
        if self._a11y and tree is not None:
            text = f"{text}\nAccessibility tree:\n{tree}"
        if not self._images or frame is None:
            return text
        return [{"type": "text", "text": text}, {"type": "image", "image": _image(frame)}]

    def _finish(self, reward: float | None) -> None:
        self._rewarded = True
        self.episodes.append({
            "task": self._config.get("id", "") if self._config else (self._env_task or ""),
            "seed": self._seed, "reward": reward, "status": "invalid" if self._invalid else "scored",
            "cause": self._invalid, "steps": self._steps, "ended": self._ended,
        })

    def _close(self) -> None:
        env, self._env, self._env_task = self._env, None, None
        if env is not None:
            env.close()
        ose, self._osworld = self._osworld, None
        if ose is not None:
            ose.close()
