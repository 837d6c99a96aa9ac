"""ACI's ``drive`` (spec §2, §6): the agent loop in one call, on a session's desktop,
over any agent, every action recorded.

    s = deskgym.connect(task="type-word", profile=None, record="runs")
    out = s.drive(deskgym.agent("claude-sonnet-4-5"), max_steps=20)
    out.success, out.reward, out.steps, out.recording      # recording: s.replay

One loop (:func:`drive_session`) runs every agent. An agent (:class:`DriveAgent`) says
only what differs between models: how it asks (:meth:`DriveAgent.ask`: one request),
which calls a reply makes (:meth:`DriveAgent.calls`; none: the model is done), how a
call runs on the desktop (:meth:`DriveAgent.run_call`) and how the answers go back
(:meth:`DriveAgent.answer`). The vendor agents are in :mod:`deskgym.drive.models`
(Anthropic's and OpenAI's computer-use tools, and any chat model writing actions as text
through :mod:`deskgym.dialect`); a plain callable ``agent(observation) -> actions`` is
wrapped in :class:`CallableAgent`.

Every action goes through :meth:`deskgym.Session.act`, so the server records it as it
records any (the session's events and, with ``connect(record=...)``, its ``.skn``
bundle): nothing is written twice. What only the client sees, the model's replies and
the answers it got (screenshots left out: they are the recording's frames), is uploaded
as an artifact the recording references (``DriveResult.transcript``).

The loop ends (:data:`STOPS`) when the desktop ends the episode (``terminated``,
``truncated``), the model makes no call or ends with ``done``/``fail`` (``agent_done``),
``max_steps`` actions ran (``max_steps``), ``max_turns`` requests were made
(``max_turns``), or something failed: the model's request (``model_error``, the
exception named in ``error``), the desktop (``env_error``), the agent's own handling of a
reply (``agent_error``). A failure is a result, never an exception: the session stays
usable. Only bad arguments raise (``INVALID_ARGUMENT``), before anything runs.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.json_format import MessageToDict

from deskgym.artifacts import ArtifactRef
from deskgym.dialect import DialectError, parse_actions
from deskgym.episode import EpisodeResult
from deskgym.errors import ENV_FAULTS, DeskgymError
from deskgym.geometry import Display
from deskgym.v1 import deskgym_pb2 as pb

__all__ = [
    "AGENT_DONE", "AGENT_ERROR", "ENV_ERROR", "MAX_STEPS", "MAX_TURNS", "MODEL_ERROR", "STOPS", "TERMINATED",
    "TRUNCATED", "CallableAgent", "DriveAgent", "DriveObservation", "DriveResult", "DriveRun", "DriveStep",
    "as_agent", "drive_session",
]

TERMINATED, TRUNCATED, AGENT_DONE, MAX_STEPS, MAX_TURNS = (
    "terminated", "truncated", "agent_done", "max_steps", "max_turns")
MODEL_ERROR, ENV_ERROR, AGENT_ERROR = "model_error", "env_error", "agent_error"
#: Every reason a drive stops.
STOPS = (TERMINATED, TRUNCATED, AGENT_DONE, MAX_STEPS, MAX_TURNS, MODEL_ERROR, ENV_ERROR, AGENT_ERROR)
#: Codes that mean the desktop or the server failed under a call (not the agent's
#: action): the drive stops with ``env_error``.
_FAULTS = frozenset(ENV_FAULTS) | {"DEADLINE_EXCEEDED", "CANCELLED"}
#: Verbs that let go of what an earlier action holds: run even once ``max_steps``
#: actions ran, so a drive never leaves a key or a button down on the desktop.
_RELEASES = ("key_up", "mouse_up")


class _Stopped(Exception):
    """Raised through an agent's code when the run must not act again (the episode
    ended, ``max_steps``, the desktop failed): not a :class:`DeskgymError`, so the
    vendor tools, which answer those to the model, let it through to the loop."""


@dataclass(frozen=True)
class DriveStep:
    """One action a drive sent: the request (``turn``, from 1) that asked for it, the
    action (the dict form :func:`deskgym.to_proto` takes), and what the desktop said:
    its reward, whether the episode ended, the screen's hash after it and the action's
    number in the episode (the recording's ``steps.step_index``). A refused action has
    ``error`` (its code and message) and no number: it is not a step (decision 5)."""

    turn: int
    action: dict[str, Any]
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    frame_hash: str = ""
    step_index: int = 0
    error: str = ""


@dataclass(frozen=True)
class DriveObservation:
    """What a callable agent is given each turn: the ``instruction``, the screen as PNG
    (``png``, its ``display`` geometry: pixels of it map to the screen through
    ``display.to_screen``; :func:`deskgym.dialect.parse_actions` takes it), the steps so
    far, why the previous turn's actions were refused (``error``, else ``""``) and the
    ``session`` itself (for trees, files, ``exec``)."""

    instruction: str
    png: bytes
    display: Display
    steps: tuple[DriveStep, ...]
    error: str
    session: Any
    turn: int


@dataclass(frozen=True)
class DriveResult:
    """What a drive came to.

    ``success``: the desktop's verdict, the episode ended (terminated, not truncated)
    with a positive return; a task without a checker (``blank``) never gives one, and
    the agent's own claim is ``claim``. ``reward``: the sum of the rewards of the drive's
    steps. ``steps``: actions the desktop ran (refused ones not counted). ``recording``:
    the session's :class:`deskgym.session.Replay` (``.save(path)`` writes the ``.skn``
    bundle, ``.run`` its name), ``None`` when the session does not record. ``stop``: why
    it ended (:data:`STOPS`); ``error``: the failure named (``"model_error"``:
    the exception's type and message), else ``""``."""

    success: bool
    reward: float
    steps: int
    recording: Any
    stop: str
    error: str
    #: The instruction the agent was given, and the episode it ran in (the recording's
    #: ``episodes`` row; 0 if no action ran).
    instruction: str
    episode: int
    #: Model requests made.
    turns: int
    #: Every action sent, refused ones included, in order.
    history: tuple[DriveStep, ...]
    #: The model's last words (its last reply's text), and what it said of the task when
    #: it ended with ``done`` (``"success"``) or ``fail`` (``"failure"``), else ``""``.
    answer: str = ""
    claim: str = ""
    #: The model's replies and the answers it got, uploaded as an artifact the recording
    #: references (an ``artifact`` event); ``None`` when the session does not record.
    transcript: ArtifactRef | None = None
    #: Why the transcript could not be uploaded (else ``""``); the drive itself stands.
    transcript_error: str = ""
    #: The drive as an episode's outcome (:mod:`deskgym.episode`): scored with
    #: ``reward``, or invalid (no reward) when the model, the desktop or the agent's own
    #: code failed: such a run says nothing of the agent and is never a 0.
    result: EpisodeResult = field(default_factory=lambda: EpisodeResult.scored(0.0))


class DriveRun:
    """One drive's state, and the env face the agents act through: ``client``,
    ``env_id``, ``screen`` and ``step(action)`` as :class:`deskgym.agents._screen.Screen`
    takes them, so the vendor tools run on a session as on a
    :class:`deskgym.DeskgymEnv`. Every action goes through :meth:`deskgym.Session.act`."""

    def __init__(self, session: Any, instruction: str, screen: tuple[int, int], max_steps: int,
                 episode: int) -> None:
        self.session = session
        self.client, self.env_id = session.client, session.env_id
        #: The desktop's screen, (width, height) in pixels.
        self.screen = screen
        self.instruction = instruction
        self.max_steps = max_steps
        self.episode = episode
        self.turn = 0
        self.history: list[DriveStep] = []
        self.reward = 0.0
        self.stop = ""
        self.error = ""
        self.outcome: EpisodeResult | None = None
        self.answer = ""
        self.claim = ""
        #: Each turn's reply and answers, JSON-ready (the transcript).
        self.transcript: list[dict[str, Any]] = []

    @property
    def steps(self) -> int:
        """Actions the desktop ran so far."""
        return sum(1 for s in self.history if not s.error)

    def fail(self, stop: str, exc: BaseException, stage: str) -> None:
        """Ends the run on a failure: ``stop`` (:data:`STOPS`), the exception named in
        ``error``, and the invalid outcome ``stage`` gives it (:mod:`deskgym.episode`)."""
        self.stop = stop
        self.error = f"{type(exc).__name__}: {exc}"
        self.outcome = EpisodeResult.from_exception(exc, stage)

    def said(self, text: str) -> None:
        """Keeps the model's latest words (``DriveResult.answer``)."""
        if text.strip():
            self.answer = text.strip()

    def step(self, action: Mapping[str, Any] | pb.Action) -> tuple[Any, ...]:
        """Runs one action on the desktop; Gymnasium's shape as the tools keep it
        (``None`` for the observation: a tool takes its own screenshot). Raises
        :class:`DeskgymError` for an action the server refused (the agent's to answer)
        and ``_Stopped`` once the run may not act."""
        if isinstance(action, pb.Action):
            a = MessageToDict(action, preserving_proto_field_name=True)
        elif isinstance(action, Mapping):
            a = dict(action)
        else:
            raise DeskgymError("INVALID_ARGUMENT", f"an action is a dict (deskgym.to_proto's form) or a pb.Action, got "
                               f"{type(action).__name__}: {action!r:.80}")
        releasing = str(a.get("verb", "")) in _RELEASES and self.stop == MAX_STEPS
        if self.stop and not releasing:
            raise _Stopped(self.stop)
        if self.steps >= self.max_steps and not releasing:
            self.stop = MAX_STEPS
            raise _Stopped(self.stop)
        try:
            acted = self.session.act(action)
        except DeskgymError as e:
            if e.code in _FAULTS:
                self.fail(ENV_ERROR, e, "step")
                raise _Stopped(self.stop) from e
            self.history.append(DriveStep(self.turn, a, error=f"{e.code}: {e.message}"))
            raise
        self.history.append(DriveStep(self.turn, a, acted.reward, acted.terminated, acted.truncated,
                                      acted.frame_hash, acted.step_index))
        self.reward += acted.reward
        self.episode = self.episode or acted.episode
        if acted.terminated or acted.truncated:
            self.stop = TERMINATED if acted.terminated else TRUNCATED
        elif a.get("end"):
            # The dialect's `done` / `fail`: a noop that ends the agent's turn for good.
            self.stop, self.claim = AGENT_DONE, str(a["end"])
        elif self.steps >= self.max_steps and not self.stop:
            self.stop = MAX_STEPS
        return None, acted.reward, acted.terminated, acted.truncated, {"frame_hash": acted.frame_hash}

    def try_step(self, action: Mapping[str, Any] | pb.Action) -> str:
        """:meth:`step`, with a refusal returned as text for the model (``""``: it ran)."""
        try:
            self.step(action)
        except DeskgymError as e:
            return f"refused: {e.message}"
        return ""


class DriveAgent(ABC):
    """An agent :func:`drive_session` runs: what differs between models. The loop calls
    :meth:`start` once, then per turn :meth:`ask`, :meth:`calls`, :meth:`run_call` for
    each call and :meth:`answer` with what they returned, until the run stops."""

    #: The grammar this model writes actions in when it writes them as text (a
    #: :data:`deskgym.dialect.FORMATS` name): what :meth:`from_text` reads.
    text_format = "auto"

    def from_text(self, text: str, display: Display | None = None, *, coords: str | None = None) -> list[Any]:
        """ACI §3.1's dialect layer on the adapter: the actions ``text`` (a reply of
        this model written as text, not as its API's structured calls) means, as
        :func:`deskgym.to_proto` dicts, read by :func:`deskgym.dialect.parse_actions` in
        this model's grammar (:attr:`text_format`). ``display``: the geometry of the
        screenshot the model saw. Raises :class:`deskgym.dialect.DialectError` for text
        that is not actions."""
        return parse_actions(text, self.text_format, display, coords=coords)

    def start(self, run: DriveRun) -> None:  # noqa: B027 - optional hook
        """Sets up for a run (the tool, the first message); the agent may be reused."""

    @abstractmethod
    def ask(self, run: DriveRun) -> Any:
        """Makes one request of the model; its reply. What it raises ends the run with
        ``model_error``."""

    @abstractmethod
    def calls(self, reply: Any, run: DriveRun) -> Sequence[Any]:
        """The calls ``reply`` makes, in order (keeping the reply for the next request);
        none: the model is done."""

    @abstractmethod
    def run_call(self, call: Any, run: DriveRun) -> Any:
        """Runs one call on the desktop through ``run`` (:meth:`DriveRun.step`); what goes
        back to the model for it."""

    @abstractmethod
    def answer(self, answers: list[Any], run: DriveRun) -> None:
        """Takes the turn's answers, in order, for the next request."""


class CallableAgent(DriveAgent):
    """A plain function as an agent: ``fn(observation)`` (a :class:`DriveObservation`)
    returns the turn's actions: a list of actions (dicts as :func:`deskgym.to_proto`
    takes them, or ``pb.Action``), one action, a model's text (read by
    :func:`deskgym.dialect.parse_actions` against the screenshot's geometry), or
    ``None`` / ``[]`` when it is done. Refused actions and unreadable text come back in
    the next observation's ``error``."""

    def __init__(self, fn: Callable[[DriveObservation], Any]) -> None:
        self.fn = fn
        self._error = ""
        self._display: Display | None = None

    def ask(self, run: DriveRun) -> Any:
        obs = run.client.screenshot(run.env_id, encoding="png")
        self._display = Display.of(obs)
        seen = DriveObservation(run.instruction, bytes(obs.frame), self._display, tuple(run.history), self._error,
                                run.session, run.turn)
        self._error = ""
        return self.fn(seen)

    def calls(self, reply: Any, run: DriveRun) -> Sequence[Any]:
        if reply is None:
            return []
        if isinstance(reply, str):
            run.said(reply)
            return read_text(reply, display=self._display)
        if isinstance(reply, (Mapping, pb.Action)):
            return [reply]
        if isinstance(reply, Sequence):
            return list(reply)
        raise DeskgymError("INVALID_ARGUMENT", "a callable agent returns a list of actions, one action, text or None; "
                           f"got {type(reply).__name__}")

    def run_call(self, call: Any, run: DriveRun) -> str:
        return run_text_call(call, run)

    def answer(self, answers: list[Any], run: DriveRun) -> None:
        self._error = "\n".join(a for a in answers if a)


def read_text(text: str, fmt: str = "auto", display: Display | None = None, coords: str | None = None) -> list[Any]:
    """The actions of a model's text (:func:`deskgym.dialect.parse_actions`), or one
    refusal (``{"refused": message}``) the model gets back when it cannot be read: the
    whole reply is refused, never half of it."""
    try:
        return list(parse_actions(text, fmt, display, coords=coords))
    except DialectError as e:
        return [{"refused": e.message}]


def run_text_call(call: Any, run: DriveRun) -> str:
    """Runs one action read from text (:func:`read_text`); the text the model gets
    back for it (``""``: it ran)."""
    if isinstance(call, Mapping) and "refused" in call:
        return f"Your reply could not be run: {call['refused']}"
    return run.try_step(call)


def as_agent(agent: Any) -> DriveAgent:
    """``agent`` as a :class:`DriveAgent`: one already, or a callable wrapped in
    :class:`CallableAgent`; anything else is ``INVALID_ARGUMENT``."""
    if isinstance(agent, DriveAgent):
        return agent
    if callable(agent) and not isinstance(agent, type):
        return CallableAgent(agent)
    raise DeskgymError(
        "INVALID_ARGUMENT",
        f"agent: {type(agent).__name__} is not an agent drive() runs: give deskgym.agent(model), an AnthropicAgent, "
        "OpenAIAgent or ChatAgent (deskgym.drive.models), or a callable agent(observation) -> actions",
    )


def _positive(name: str, v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise DeskgymError("INVALID_ARGUMENT", f"{name}: expected a positive number of {what}, got {v!r}", name)
    return v


def _begin(session: Any, task: str | None, seed: int | None) -> tuple[str, int, tuple[int, int]]:
    """The instruction and episode a drive runs in (resetting for a task), and the screen."""
    info = session.client.get_env(session.env_id)
    screen = (int(info.screen.width), int(info.screen.height))
    if task is not None and not isinstance(task, str):
        raise DeskgymError("INVALID_ARGUMENT", f"task: expected an instruction or a task id (str), got "
                           f"{type(task).__name__}", "task")
    if task is not None and not task.strip():
        raise DeskgymError("INVALID_ARGUMENT", "task: an empty instruction", "task")
    if task is None or task == info.task:
        if info.task == "blank":
            raise DeskgymError("INVALID_ARGUMENT", "task: this desktop's task 'blank' has no instruction: "
                               "drive(agent, task='what to do')", "task")
        started = session.reset(seed)
        if not started.instruction:
            raise DeskgymError("INVALID_ARGUMENT", f"task: task {info.task!r} gives no instruction: "
                               "drive(agent, task='what to do')", "task")
        return started.instruction, int(started.episode), screen
    if seed is not None:
        raise DeskgymError("INVALID_ARGUMENT", "seed: an instruction runs on the desktop as it is; a seed needs "
                           "task=None (a new episode of the desktop's task)", "seed")
    if task in {t.id for t in session.client.capabilities().tasks}:
        raise DeskgymError(
            "INVALID_ARGUMENT",
            f"task: this desktop runs {info.task!r}, not {task!r} (a desktop's task is set when it is made): "
            f"deskgym.connect(task={task!r}) for one, or give an instruction", "task")
    return task, 0, screen


def drive_session(session: Any, agent: Any, task: str | None = None, *, max_steps: int = 50,
                  max_turns: int | None = None, seed: int | None = None) -> DriveResult:
    """Runs ``agent`` on ``session``'s desktop (:meth:`deskgym.Session.drive`): the one
    agent loop. ``max_turns`` (default ``2 * max_steps``) bounds the model's requests,
    so a model that only looks, or whose every action is refused, still ends."""
    max_steps = _positive("max_steps", max_steps, "actions")
    turns = _positive("max_turns", 2 * max_steps if max_turns is None else max_turns, "model requests")
    the_agent = as_agent(agent)
    instruction, episode, screen = _begin(session, task, seed)
    run = DriveRun(session, instruction, screen, max_steps, episode)
    _loop(the_agent, run, turns)
    return _finish(run)


def _loop(agent: DriveAgent, run: DriveRun, max_turns: int) -> None:
    try:
        agent.start(run)
        while not run.stop:
            if run.turn >= max_turns:
                run.stop = MAX_TURNS
                break
            run.turn += 1
            try:
                reply = agent.ask(run)
            except DeskgymError as e:
                # The screenshot a request carries failed: the desktop's fault, not the model's.
                run.fail(ENV_ERROR if e.code in _FAULTS else MODEL_ERROR, e, "step" if e.code in _FAULTS else "agent")
                break
            except Exception as e:  # noqa: BLE001 - whatever the model's client raised is the result's
                run.fail(MODEL_ERROR, e, "agent")
                break
            calls = agent.calls(reply, run)
            record: dict[str, Any] = {"turn": run.turn, "reply": jsonable(reply)}
            run.transcript.append(record)
            if not calls:
                run.stop = AGENT_DONE
                break
            answers = []
            for call in calls:
                answers.append(agent.run_call(call, run))
                if run.stop:
                    break
            record["answers"] = jsonable(answers)
            if not run.stop:
                agent.answer(answers, run)
    except _Stopped:
        pass
    except DeskgymError as e:
        if e.code in _FAULTS:
            run.fail(ENV_ERROR, e, "step")
        else:
            run.fail(AGENT_ERROR, e, "agent")
    except Exception as e:  # noqa: BLE001 - the agent's own code failed: the run's result says how
        run.fail(AGENT_ERROR, e, "agent")


def _finish(run: DriveRun) -> DriveResult:
    recording = run.session.replay if getattr(run.session, "record", None) else None
    transcript, transcript_error = None, ""
    if recording is not None and run.session.client_open():
        lines = [{"instruction": run.instruction, "episode": run.episode}, *run.transcript,
                 {"stop": run.stop, "error": run.error, "steps": run.steps, "reward": run.reward}]
        data = "".join(json.dumps(x, default=str) + "\n" for x in lines).encode()
        try:
            transcript = run.session.artifacts.upload(data, name=f"drive-{run.episode}-transcript.jsonl")
        except DeskgymError as e:
            transcript_error = f"{e.code}: {e.message}"
    ended = run.stop == TERMINATED
    return DriveResult(
        success=ended and run.reward > 0, reward=run.reward, steps=run.steps, recording=recording, stop=run.stop,
        error=run.error, instruction=run.instruction, episode=run.episode, turns=run.turn,
        history=tuple(run.history), answer=run.answer, claim=run.claim, transcript=transcript,
        transcript_error=transcript_error, result=run.outcome or EpisodeResult.scored(run.reward),
    )


#: Base64 images in a transcript: a data URL or a long run of base64 (a vendor's
#: ``source.data``); written as their size only, the frames being in the recording.
_DATA_URL = re.compile(r"^data:image/[\w.+-]+;base64,")
_LONG_B64 = re.compile(r"^[A-Za-z0-9+/]{512,}={0,2}$")


def jsonable(x: Any) -> Any:
    """``x`` (a vendor SDK's reply, dicts, lists, actions) as JSON values, images left
    out (their size kept)."""
    if hasattr(x, "model_dump"):
        x = x.model_dump(mode="json", exclude_none=True)
    if isinstance(x, pb.Action):
        return MessageToDict(x, preserving_proto_field_name=True)
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, bytes):
        return f"<{len(x)} bytes>"
    if isinstance(x, str) and (_DATA_URL.match(x) or _LONG_B64.match(x)):
        return f"<image, {len(x.split(',', 1)[-1]) * 3 // 4} bytes>"
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    return repr(x)
