"""MiniWoB++'s own interface on deskgym: ``gymnasium.make("deskgym/miniwob-click-test-2-v0")``
stands in for ``gymnasium.make("miniwob/click-test-2-v1")``.

The same observation space and keys (``utterance``, ``dom_elements``, ``screenshot``,
``fields``, built by MiniWoB++'s own code from the page's ``core.getDOMInfo()``), the
same action space (``create_action``, ``ActionTypes``, the presets of
``ActionSpaceConfig``), MiniWoB++'s ``info`` (``done``, ``env_reward``, ``raw_reward``,
``reason``, ``root_dom``, ``elapsed``, numbers as numbers) and reward processors; the
page runs on a deskgym server (a sandboxed Chromium per env) instead of a local
Selenium browser. Needs the ``miniwob`` package (``deskgym[miniwob]``).

Where it differs, and why (docs/decisions.md):

- the episode clock is deskgym's (``task_options={"clock": "steps"}`` by default: each
  step costs 100 ms of the episode's 10 s, so the time-discounted ``env_reward`` is the
  same for the same actions; ``{"clock": "real"}`` is MiniWoB++'s wall clock);
- a ``FOCUS_ELEMENT_AND_TYPE_*`` action is two server steps (the element's click, then
  the typing), so the steps clock charges it twice;
- coordinates land on whole pixels (a float ``coords`` is truncated, as a pixel spans
  ``[i, i + 1)``); a scroll turns whole wheel clicks (53 px each, at least one);
- ``base_url`` is the server's (its ``--miniwob-dir``); ``visualize_attention`` is not
  drawn; ``render_mode="human"`` opens no window (the page runs on the server: it warns
  and goes on), ``"rgb_array"`` returns the task area;
- the browser window is MiniWoB++'s 500x320 (its headless Selenium browser is 800 wide),
  so the page's ``body`` element is 500 wide where MiniWoB++'s own reports 780; every
  other element, the screenshot and the refs are the same.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from miniwob.action import (
    COORDS_ACTIONS,
    ELEMENT_ACTIONS,
    FIELD_ACTIONS,
    TEXT_ACTIONS,
    Action,
    ActionSpaceConfig,
    ActionTypes,
)
from miniwob.dom import DOMElement
from miniwob.fields import FieldExtractor, get_field_extractor
from miniwob.observation import (
    Observation,
    create_empty_observation,
    create_empty_screenshot,
    create_observation,
    get_observation_space,
)
from miniwob.reward import RewardProcessor, get_original_reward

from deskgym.a11y import Tree, tree_request
from deskgym.actions import to_proto
from deskgym.client import Client, Pool
from deskgym.env import check_render_mode
from deskgym.errors import DeskgymError
from deskgym.v1 import deskgym_pb2 as pb

__all__ = ["MiniWoBEnv", "key_chord"]

log = logging.getLogger(__name__)

#: Pixels one wheel click scrolls in the page (Chromium's step).
WHEEL_PX = 53

_COORD_VERBS = {
    ActionTypes.MOVE_COORDS: "move",
    ActionTypes.CLICK_COORDS: "click",
    ActionTypes.DBLCLICK_COORDS: "double_click",
    ActionTypes.MOUSEDOWN_COORDS: "mouse_down",
    ActionTypes.MOUSEUP_COORDS: "mouse_up",
}

#: MiniWoB++'s modifier prefixes (``C-c``) as deskgym chord names.
_MODIFIERS = {"A-": "alt", "C-": "ctrl", "M-": "super", "S-": "shift"}

#: MiniWoB++'s ``<Special>`` keys (WebDriver's names) as X keysym names.
_SPECIAL = {
    "<Backspace>": "BackSpace", "<Tab>": "Tab", "<Enter>": "Return", "<NumpadEnter>": "KP_Enter",
    "<Escape>": "Escape", "<Space>": "space", "<PageUp>": "Prior", "<PageDown>": "Next",
    "<End>": "End", "<Home>": "Home", "<ArrowLeft>": "Left", "<ArrowUp>": "Up",
    "<ArrowRight>": "Right", "<ArrowDown>": "Down", "<Insert>": "Insert", "<Delete>": "Delete",
    "<Semicolon>": "semicolon", "<Equal>": "equal", "<Shift>": "Shift_L", "<Control>": "Control_L",
    "<Alt>": "Alt_L", "<Meta>": "Super_L", "<RightShift>": "Shift_R", "<RightControl>": "Control_R",
    "<RightAlt>": "Alt_R", "<RightMeta>": "Super_R",
    "<NumpadMultiply>": "KP_Multiply", "<NumpadAdd>": "KP_Add", "<NumpadComma>": "KP_Separator",
    "<NumpadSubtract>": "KP_Subtract", "<NumpadDecimal>": "KP_Decimal", "<NumpadDivide>": "KP_Divide",
    **{f"<Numpad{d}>": f"KP_{d}" for d in range(10)},
    **{f"<F{n}>": f"F{n}" for n in range(1, 13)},
}

#: Printable characters whose X names a chord must use (``+`` separates a chord's keys).
_PUNCTUATION = {
    " ": "space", "!": "exclam", '"': "quotedbl", "#": "numbersign", "$": "dollar", "%": "percent",
    "&": "ampersand", "'": "apostrophe", "(": "parenleft", ")": "parenright", "*": "asterisk",
    "+": "plus", ",": "comma", "-": "minus", ".": "period", "/": "slash", ":": "colon",
    ";": "semicolon", "<": "less", "=": "equal", ">": "greater", "?": "question", "@": "at",
    "[": "bracketleft", "\\": "backslash", "]": "bracketright", "^": "asciicircum",
    "_": "underscore", "`": "grave", "{": "braceleft", "|": "bar", "}": "braceright", "~": "asciitilde",
}


def key_chord(key: str) -> str:
    """A MiniWoB++ ``PRESS_KEY`` key (``"C-c"``, ``"<Enter>"``, ``"S-<Tab>"``, ``"a"``) as
    a deskgym ``key`` chord (``"ctrl+c"``, ``"Return"``, ``"shift+Tab"``, ``"a"``)."""
    rest, mods = key, []
    while rest[:2] in _MODIFIERS and len(rest) > 2:
        mods.append(_MODIFIERS[rest[:2]])
        rest = rest[2:]
    if rest in _SPECIAL:
        name = _SPECIAL[rest]
    elif len(rest) == 1 and 32 <= ord(rest) < 127:
        name = _PUNCTUATION.get(rest, rest)
    else:
        raise DeskgymError(
            "INVALID_ARGUMENT",
            f"action.key: {key!r} is not a key deskgym can press in a web task; MiniWoB++'s "
            "DEFAULT_ALLOWED_KEYS all are (printable ASCII, <Enter>, <ArrowUp>, <Numpad0>, <F1>...)",
        )
    return "+".join([*mods, name])


def _raw_node(e: Any) -> dict[str, Any]:
    """One element as ``core.getDOMInfo()`` gave it (the ``wob`` attribute), without
    children; rebuilt from the element's fields when the page's text was too long to
    carry whole."""
    text = e.attributes.get("wob", "")
    if text:
        raw: dict[str, Any] = json.loads(text)
    else:
        x, y, w, h = e.bounds or (0, 0, 0, 0)
        raw = {
            "tag": e.attributes.get("tag", e.role).upper(), "ref": int(e.attributes.get("ref", "0")),
            "left": x, "top": y, "width": w, "height": h, "text": e.name, "value": e.text,
            "id": e.attributes.get("id", ""), "classes": e.attributes.get("classes", ""),
        }
    raw["children"] = []
    return raw


def page_dom(tree: Tree) -> tuple[DOMElement, dict[int, str]]:
    """The page's root ``DOMElement`` (MiniWoB++'s own class) from a web env's tree, and
    MiniWoB++ ref -> deskgym element ref."""
    nodes: dict[str, dict[str, Any]] = {}
    refs: dict[int, str] = {}
    root: dict[str, Any] | None = None
    for e in tree.elements:
        raw = nodes[e.ref] = _raw_node(e)
        if isinstance(raw.get("ref"), int) and raw["ref"] > 0:
            refs[raw["ref"]] = e.ref
        parent = nodes.get(e.parent)
        if parent is not None:
            parent["children"].append(raw)
        elif root is None:
            root = raw
    if root is None:
        raise DeskgymError("UNAVAILABLE", "the page showed no elements (is the browser still running?)")
    return DOMElement(root), refs


class MiniWoBEnv(gym.Env[Observation, Action]):
    """A MiniWoB++ task with MiniWoB++'s own Gymnasium interface (``MiniWoBEnvironment``'s
    constructor, spaces, ``create_action``, ``info`` and reward processors), played on a
    deskgym server. ``address``/``token``/``client`` name the server; ``task_options``
    go to deskgym's task family (``clock``, ``step_ms``...); ``record`` names a run."""

    metadata = {"render_modes": ["human", "rgb_array"], "render_fps": None}
    reward_range = (-1, 1)
    #: MiniWoB++ task name, which a subclass may set.
    subdomain: str | None = None
    #: The task area's size (160x210): the screenshot's and the coordinates'.
    task_width: int
    task_height: int
    #: MiniWoB++'s ``ActionSpaceConfig`` the action space was built from.
    action_space_config: Any
    _based: bool
    _start: float

    def __init__(
        self,
        subdomain: str | None = None,
        render_mode: str | None = None,
        base_url: str | None = None,
        action_space_config: str | ActionSpaceConfig = "all_supported",
        field_extractor: FieldExtractor | None = None,
        reward_processor: RewardProcessor | None = None,
        wait_ms: float = 0.0,
        block_on_reset: bool = True,
        refresh_freq: int = 0,
        data_mode: str = "train",
        *,
        address: str | None = None,
        token: str | None = None,
        client: Client | None = None,
        task_options: Mapping[str, Any] | None = None,
        record: str | None = None,
    ) -> None:
        if self.subdomain:
            if subdomain:
                raise ValueError("`subdomain` is already specified.")
        elif not subdomain:
            raise ValueError("`subdomain` is not specified.")
        else:
            self.subdomain = subdomain
        if base_url is not None:
            raise DeskgymError(
                "INVALID_ARGUMENT",
                "base_url: the pages are the server's (its --miniwob-dir); start the server with "
                "the MiniWoB++ pages to use instead",
            )
        if render_mode == "human":
            # MiniWoB++'s examples ask for a local Chrome window; the page runs on the
            # server, so say so and go on rather than break the example.
            log.warning(
                "render_mode='human': the page runs on the deskgym server and no window opens "
                "here; record the run (record=...) or use render_mode='rgb_array' to see it"
            )
        else:
            check_render_mode(render_mode)
        self.render_mode = render_mode
        # Kept for code that reads it; the server always waits for WOB_TASK_READY.
        self.block_on_reset = block_on_reset
        self.wait_ms = wait_ms
        self.refresh_freq = refresh_freq
        self.field_extractor = field_extractor or get_field_extractor(self.subdomain)
        self.reward_processor = reward_processor or get_original_reward
        self.record_screenshots = True
        self._options = dict(task_options or {})
        if refresh_freq:
            # deskgym's reload is per episode: a superset of refreshing every N.
            self._options.setdefault("reload", "always")
        self._data_mode = data_mode
        self._record = record
        self._own_client = client is None
        self.client = client or Client(address, token)
        self._pool: Pool | None = None
        self._open_pool(data_mode)
        assert self._pool is not None
        self.task_width, self.task_height = self._pool.width, self._pool.height
        if isinstance(action_space_config, str):
            action_space_config = ActionSpaceConfig.get_preset(action_space_config)
        self.action_space_config = action_space_config
        self.action_space_config.screen_width = self.task_width
        self.action_space_config.screen_height = self.task_height
        self.action_space = self.action_space_config.get_action_space()
        self.observation_space = get_observation_space(self.task_width, self.task_height)
        self._fields: list[tuple[str, str]] = []
        self._refs: dict[int, str] = {}
        self._metadata: dict[str, Any] = {"done": True, "env_reward": 0.0, "raw_reward": 0.0, "reason": None}
        self._last_hash: str | None = None
        self._screen: np.ndarray | None = None
        self._based = False
        self._start = float("inf")

    def _open_pool(self, data_mode: str) -> None:
        if self._pool is not None:
            self.client.release(self._pool)
            self._pool = None
        self._pool = self.client.create_pool(
            f"miniwob/{self.subdomain}", 1, encoding="rgb", record=self._record,
            task_options={"data_mode": data_mode, **self._options},
        )
        self._pool_mode = data_mode
        self.env_id = self._pool.env_ids[0]

    # MiniWoB++'s API.

    def reset(
        self, *, seed: int | None = None, options: Mapping[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """A new episode: MiniWoB++'s ``options`` (``data_mode``, ``record_screenshots``)."""
        super().reset(seed=seed)
        options = options or {}
        if "data_mode" in options:
            self.set_data_mode(options["data_mode"])
        if "record_screenshots" in options:
            self.set_record_screenshots(options["record_screenshots"])
        if self._data_mode != self._pool_mode:
            self._open_pool(self._data_mode)
        if seed is None and not self._based:
            # An unseeded first episode is a random one, as MiniWoB++'s own.
            seed = int(self.np_random.integers(0, 2**63 - 1))
        r = self.client.reset(self.env_id, seed=seed, encoding="rgb", if_none_match=self._known(), tree=tree_request())
        self._based = True
        self._start = time.time()
        utterance = r.info.instruction
        self._fields = list(self.field_extractor(utterance))
        obs, root = self._observation(r.observation, utterance)
        self._metadata = self._score(r.info, done=False)
        return obs, {**self._metadata, "root_dom": root}

    def step(self, action: Action) -> tuple[Observation, SupportsFloat, bool, bool, dict[str, Any]]:
        """Applies a MiniWoB++ action (a sample of :attr:`action_space`)."""
        if self._metadata["done"]:
            # As MiniWoB++'s own: nothing happens once the episode is over.
            log.warning("Cannot call %s on %s, which is already done", action, self.env_id)
            over = {**self._metadata, "elapsed": self._elapsed()}
            empty = create_empty_observation(self.task_width, self.task_height)
            return empty, self.reward_processor(over), True, False, over
        moves = self._moves(action)
        r: pb.StepResult | None = None
        for i, move in enumerate(moves):
            last = i == len(moves) - 1
            r = self.client.step(
                self.env_id, to_proto(move), encoding="rgb", if_none_match=self._known(),
                tree=tree_request() if last else None,
            )
            self._last_hash = r.observation.frame_hash
            if r.terminated or r.truncated:
                break
        assert r is not None
        if self.wait_ms:
            time.sleep(self.wait_ms / 1000.0)
        self._metadata = self._score(r.info, done=r.terminated)
        meta: dict[str, Any] = {**self._metadata, "elapsed": self._elapsed()}
        if r.terminated:
            obs = create_empty_observation(self.task_width, self.task_height)
        else:
            if not r.observation.HasField("tree"):
                # The episode went on after a step that read no tree (truncated).
                r.observation.tree.CopyFrom(self.client.observe(self.env_id, encoding="jpeg", tree=tree_request()).tree)
            obs, meta["root_dom"] = self._observation(r.observation, r.info.instruction)
        return obs, self.reward_processor(meta), bool(r.terminated), bool(r.truncated), meta

    def render(self) -> np.ndarray | None:
        """The task area as an (H, W, 3) array with ``render_mode="rgb_array"``."""
        if self.render_mode != "rgb_array":
            return None
        if self._screen is None:
            frame, _ = self.client.resolve(self.client.observe(self.env_id, encoding="rgb"))
            assert isinstance(frame, np.ndarray)
            return frame
        return self._screen

    def set_data_mode(self, mode: str) -> None:
        """MiniWoB++'s data mode (``"train"``, ``"test"``) from the next episode on (the
        env's desktop is replaced: a page's mode is set when it starts)."""
        self._data_mode = mode

    def set_record_screenshots(self, record_screenshots: bool) -> None:
        """Whether observations carry the screen (else all-black, as MiniWoB++'s own)."""
        self.record_screenshots = bool(record_screenshots)

    def visualize_attention(self, attentions: Any) -> None:
        """Not drawn on deskgym: ``None`` is accepted (as MiniWoB++ ignores it), anything
        else says so."""
        if attentions is None:
            return
        raise DeskgymError(
            "UNIMPLEMENTED",
            "visualize_attention: deskgym does not draw attention maps on the page; record the "
            "run (record=...) and overlay them on the recorded frames",
        )

    def create_action(self, action_type: int | np.ndarray | str | ActionTypes, **kwargs: Any) -> Action:
        """An action of ``action_type`` (an index into the config's ``action_types`` or an
        ``ActionTypes``), the other keys random unless given, as MiniWoB++'s own."""
        action = self.action_space.sample()
        if isinstance(action_type, (str, ActionTypes)):
            action["action_type"] = self.action_space_config.action_types.index(action_type)
        elif isinstance(action_type, int):
            action["action_type"] = action_type
        elif isinstance(action_type, np.ndarray):
            action["action_type"] = action_type.item()
        else:
            raise ValueError(f"Unknown action_type: {action_type!r}")
        for key, value in kwargs.items():
            if key not in action:
                raise KeyError(f"Key {key} not in valid action keys {list(action)}.")
            action[key] = value
        return action

    def close(self) -> None:
        """Releases the desktop on the server (idempotent)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            self.client.release(pool)
        if self._own_client:
            self.client.close()
        super().close()

    # The translation.

    def _known(self) -> list[str]:
        recent = self.client.recent_hashes("rgb", 8)
        return recent if self._last_hash is None else [self._last_hash, *recent]

    def _elapsed(self) -> float:
        return max(0.0, time.time() - float(self._start))

    def _score(self, info: pb.StepInfo, done: bool) -> dict[str, Any]:
        """MiniWoB++'s metadata from the step's task info (sent as text on the wire)."""
        extra = info.extra
        return {
            "done": done,
            "env_reward": float(extra.get("env_reward") or 0.0),
            "raw_reward": float(extra.get("raw_reward") or 0.0),
            "reason": extra.get("reason") or None,
        }

    def _observation(self, o: pb.Observation, utterance: str) -> tuple[Observation, DOMElement]:
        frame, cached = self.client.resolve(o)
        self._last_hash = o.frame_hash
        assert isinstance(frame, np.ndarray)
        # Each observation owns its array (the cache's may be shared).
        self._screen = frame.copy() if cached else frame
        root, self._refs = page_dom(Tree.from_proto(o.tree))
        shot = self._screen if self.record_screenshots else create_empty_screenshot(self.task_width, self.task_height)
        return create_observation(utterance, root, shot, self._fields), root

    def _moves(self, action: Action) -> list[dict[str, Any]]:
        """One MiniWoB++ action as deskgym actions (one, or two for focus-and-type)."""
        cfg = self.action_space_config
        kind = cfg.action_types[int(action["action_type"])]
        if kind == ActionTypes.NONE:
            return [{"verb": "noop"}]
        if kind in COORDS_ACTIONS:
            left, top = cfg.compute_raw_coords(action)
            # The Box's upper bound is the screen's size, one past its last pixel.
            x = min(max(int(left), 0), self.task_width - 1)
            y = min(max(int(top), 0), self.task_height - 1)
            if kind in (ActionTypes.SCROLL_UP_COORDS, ActionTypes.SCROLL_DOWN_COORDS):
                clicks = max(1, round(cfg.scroll_amount / WHEEL_PX))
                dy = -clicks if kind == ActionTypes.SCROLL_UP_COORDS else clicks
                return [{"verb": "scroll", "x": x, "y": y, "dx": 0, "dy": dy}]
            return [{"verb": _COORD_VERBS[kind], "x": x, "y": y}]
        if kind == ActionTypes.PRESS_KEY:
            return [{"verb": "key", "keys": key_chord(cfg.allowed_keys[int(action["key"])])}]
        moves: list[dict[str, Any]] = []
        if kind in ELEMENT_ACTIONS:
            wob = int(action["ref"])
            ref = self._refs.get(wob)
            if ref is None:
                # MiniWoB++'s own logs the failed click and goes on.
                log.warning("Clicking %s failed: no element with that ref on the page", wob)
            else:
                moves.append({"verb": "invoke_action", "ref": ref, "action": "click"})
        text = ""
        if kind in TEXT_ACTIONS:
            text = str(action["text"])
        elif kind in FIELD_ACTIONS:
            i = int(action["field"])
            text = self._fields[i][1] if i < len(self._fields) else ""
        if text:
            moves.append({"verb": "type_text", "text": text})
        return moves or [{"verb": "noop"}]

