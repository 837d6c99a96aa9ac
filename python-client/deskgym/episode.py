"""What an episode came to: ``scored`` (a reward), ``infeasible`` (a task that asks the
agent to say it cannot be done, scored too) or ``invalid`` (with its cause), so a run
that failed is never trained on or averaged as a reward of 0.

The words are the OSWorld suite runner's (:mod:`deskgym.osworld.outcomes`, decision
153), made one vocabulary for every harness: the runner's rows, a Gymnasium episode's
last ``info`` and an adapter's own ``try``/``except`` all end in one
:class:`EpisodeResult`, and :func:`result_of` reads it from either. A trainer asks
:meth:`EpisodeResult.reward_or_none`: ``None`` for an invalid run, which is each
framework's way of dropping a rollout (TRL: no reward; verifiers: an error in the
state; a mean over runs: left out), never a 0.

    result = deskgym.episode.result_of(info, reward=total)   # info: the episode's last
    reward = result.reward_or_none()                          # None: drop this rollout

Causes (:data:`CAUSES`): ``env_error`` (the desktop or the server failed under the
episode: a crashed desktop, an internal error), ``timeout`` (a deadline or the run's
time bound), ``crash`` (the harness or the agent's own code raised), ``setup_failure``
(the task's setup did not make its start state: a failed setup step, a reset that
raised), ``evaluator_error`` (the evaluator raised or gave no score).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from deskgym.errors import ENV_FAULTS, DeskgymError

__all__ = [
    "CAUSES", "CRASH", "ENV_ERROR", "EVALUATOR_ERROR", "INFEASIBLE", "INVALID", "SCORED", "SETUP_FAILURE",
    "STATUSES", "TIMEOUT", "EpisodeResult", "cause_of_code", "cause_of_text", "result_of",
]

SCORED, INVALID, INFEASIBLE = "scored", "invalid", "infeasible"
#: Every status an episode ends in.
STATUSES = (SCORED, INVALID, INFEASIBLE)

ENV_ERROR, TIMEOUT, CRASH, SETUP_FAILURE, EVALUATOR_ERROR = (
    "env_error", "timeout", "crash", "setup_failure", "evaluator_error")
#: Every cause an invalid episode names.
CAUSES = (ENV_ERROR, TIMEOUT, CRASH, SETUP_FAILURE, EVALUATOR_ERROR)

#: The stage a harness names at the head of an error ("evaluate: KeyError: ...", the
#: OSWorld runner's rows) -> the cause it stands for. A stage not listed is a crash.
STAGE_CAUSES = {
    "setup": SETUP_FAILURE,
    "postconfig": SETUP_FAILURE,
    "reset": SETUP_FAILURE,
    "timeout": TIMEOUT,
    "evaluate": EVALUATOR_ERROR,
    "no score": EVALUATOR_ERROR,
    "step": ENV_ERROR,
    "agent": CRASH,
    "solve": CRASH,
}


def cause_of_code(code: str) -> str:
    """The cause a failed call's gRPC code stands for: ``timeout`` for DEADLINE_EXCEEDED,
    ``env_error`` for the other codes that mean the desktop or the server broke
    (:data:`deskgym.errors.ENV_FAULTS`, CANCELLED), ``crash`` for a caller's error (a bad
    request is the harness's bug, not the episode's outcome)."""
    if code == "DEADLINE_EXCEEDED":
        return TIMEOUT
    if code in ENV_FAULTS or code == "CANCELLED":
        return ENV_ERROR
    return CRASH


def cause_of_text(text: str) -> str:
    """The cause of an error a harness wrote as ``"<stage>: <what>"`` (the OSWorld
    runner's ``error`` and ``cause`` fields: ``setup: step 2 (execute): exit 1``,
    ``timeout: ...``, ``evaluate: ...``); a text naming no known stage is a ``crash``."""
    head = text.split(":", 1)[0].strip().lower()
    return STAGE_CAUSES.get(head, CRASH)


@dataclass(frozen=True)
class EpisodeResult:
    """How one episode ended: ``status`` (:data:`STATUSES`), its ``reward`` (``None``
    exactly when invalid), the ``cause`` of an invalid one (:data:`CAUSES`, else ``""``)
    and ``detail`` (what happened, one line: the error, the failed step).

    Build one with :meth:`scored`, :meth:`infeasible`, :meth:`invalid`,
    :meth:`from_exception` or :func:`result_of`; anything else (an invalid result with
    a reward, a scored one without) is refused with ``INVALID_ARGUMENT``."""

    status: str
    reward: float | None = None
    cause: str = ""
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise DeskgymError("INVALID_ARGUMENT", f"status {self.status!r} is not one of {', '.join(STATUSES)}")
        if self.status == INVALID:
            if self.cause not in CAUSES:
                raise DeskgymError("INVALID_ARGUMENT",
                                   f"an invalid episode's cause {self.cause!r} is not one of {', '.join(CAUSES)}")
            if self.reward is not None:
                # The rule this type exists for: a failed run has no reward, not a 0.
                raise DeskgymError("INVALID_ARGUMENT", "an invalid episode has no reward (got "
                                   f"{self.reward!r}); keep a metric's raw value in detail")
        else:
            if self.reward is None:
                raise DeskgymError("INVALID_ARGUMENT", f"a {self.status} episode needs a reward")
            if self.cause:
                raise DeskgymError("INVALID_ARGUMENT", f"only an invalid episode has a cause (got {self.cause!r})")
            object.__setattr__(self, "reward", float(self.reward))

    @classmethod
    def scored(cls, reward: float) -> EpisodeResult:
        """An episode that ran and was scored ``reward`` (0 included: a real 0)."""
        return cls(SCORED, reward)

    @classmethod
    def infeasible(cls, reward: float) -> EpisodeResult:
        """A task meant to be declined (OSWorld's ``infeasible``), scored ``reward``."""
        return cls(INFEASIBLE, reward)

    @classmethod
    def invalid(cls, cause: str, detail: str = "") -> EpisodeResult:
        """An episode that says nothing of the agent: ``cause`` (:data:`CAUSES`) and what
        happened."""
        return cls(INVALID, None, cause, " ".join(detail.split())[:500])

    @classmethod
    def from_exception(cls, exc: BaseException, stage: str = "") -> EpisodeResult:
        """The invalid result of an episode that raised ``exc`` during ``stage``
        (``"setup"``/``"reset"``, ``"step"``, ``"evaluate"``, ``"agent"``...: see
        :data:`STAGE_CAUSES`): a timeout (``TimeoutError``, DEADLINE_EXCEEDED) is one
        whatever the stage; a :class:`~deskgym.DeskgymError` raised by a step names its
        code's cause; otherwise the stage's cause, a crash when it names none."""
        detail = f"{stage + ': ' if stage else ''}{type(exc).__name__}: {exc}"
        if isinstance(exc, TimeoutError) or getattr(exc, "code", None) == "DEADLINE_EXCEEDED":
            return cls.invalid(TIMEOUT, detail)
        by_stage = STAGE_CAUSES.get(stage.lower()) if stage else None
        if isinstance(exc, DeskgymError) and by_stage in (None, ENV_ERROR):
            return cls.invalid(cause_of_code(exc.code), detail)
        return cls.invalid(by_stage or CRASH, detail)

    @property
    def ok(self) -> bool:
        """Whether the episode counts: scored or infeasible, not invalid."""
        return self.status != INVALID

    def reward_or_none(self) -> float | None:
        """The reward to train on, or ``None`` for an invalid run (drop it; never a 0)."""
        return self.reward if self.ok else None

    def to_dict(self) -> dict[str, Any]:
        """``{"status", "reward", "cause", "detail"}`` (JSON-ready)."""
        return asdict(self)


def result_of(info: Mapping[str, Any] | EpisodeResult, reward: float | None = None) -> EpisodeResult:
    """The result an episode's record says, with ``reward`` (its return, for a
    Gymnasium episode) when it scored.

    ``info`` is one of: an :class:`EpisodeResult` (returned as it is); a row with a
    ``status`` (the OSWorld runner's ``outcome.json`` and ``check.jsonl`` rows, or
    :meth:`EpisodeResult.to_dict`: its ``score``/``reward`` and ``cause``, a cause
    written as the runner's text mapped by :func:`cause_of_text`); or the last ``info``
    of a :class:`deskgym.DeskgymEnv` episode, invalid when it carries ``error`` (a
    desktop that failed under the step: ``error["cause"]``, else its code's), else
    scored ``reward`` (which must then be given)."""
    if isinstance(info, EpisodeResult):
        return info
    if "status" in info:
        status = str(info["status"])
        if status == INVALID:
            text = str(info.get("cause") or info.get("error") or info.get("detail") or "")
            cause = text if text in CAUSES else cause_of_text(text)
            return EpisodeResult.invalid(cause, str(info.get("detail") or text))
        score = info.get("reward", info.get("score"))
        if score is None:
            score = reward
        if score is None:
            return EpisodeResult.invalid(EVALUATOR_ERROR, "no score")
        return EpisodeResult(status, float(score))
    err = info.get("error")
    if err:
        if isinstance(err, Mapping):
            cause = str(err.get("cause") or cause_of_code(str(err.get("code", ""))))
            return EpisodeResult.invalid(cause, f"{err.get('code', '')}: {err.get('message', '')}")
        return EpisodeResult.invalid(cause_of_text(str(err)), str(err))
    if reward is None:
        raise DeskgymError("INVALID_ARGUMENT", "result_of: a scored episode needs its reward (reward=)")
    return EpisodeResult.scored(reward)
