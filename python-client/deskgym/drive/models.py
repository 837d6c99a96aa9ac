"""The models :meth:`deskgym.Session.drive` runs (Claude, OpenAI's computer-use model,
any chat model writing actions as text), one small class each over :mod:`deskgym.drive`'s loop.

- :class:`AnthropicAgent`: Claude with the computer-use tool (Messages API,
  ``client.beta.messages.create``): each ``tool_use`` block runs through
  :class:`deskgym.agents.anthropic.ComputerTool`, answered with its ``tool_result``.
- :class:`OpenAIAgent`: OpenAI's computer-use model (Responses API,
  ``computer_use_preview``): each ``computer_call`` runs through
  :class:`deskgym.agents.openai.ComputerTool`, answered with its
  ``computer_call_output``; the conversation lives on the server
  (``previous_response_id``).
- :class:`ChatAgent`: any model behind an OpenAI-compatible chat completions endpoint
  (vLLM, SGLang, Ollama, OpenAI's) that writes its actions as text, read by
  :func:`deskgym.dialect.parse_actions`; the screen goes with each message.
- :func:`agent`: one of them by model name (ACI §2's ``agent("claude-...")``).

Each takes the vendor SDK's client (``client=``: ``anthropic.Anthropic(base_url=...)``,
``openai.OpenAI(base_url=...)``), or makes the default one on first use (the SDK reads
its API key from the environment). The SDKs are the ``agents`` extra; nothing imports
them before a drive needs one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from deskgym.agents import anthropic as claude_tool
from deskgym.agents import openai as openai_tool
from deskgym.agents._screen import Screen
from deskgym.drive import DriveAgent, DriveRun, jsonable, read_text, run_text_call
from deskgym.dialect import FORMATS, write_action
from deskgym.errors import DeskgymError
from deskgym.geometry import Display

__all__ = ["AnthropicAgent", "ChatAgent", "OpenAIAgent", "agent"]


def _check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise DeskgymError("INVALID_ARGUMENT", f"format {fmt!r} is not one of {', '.join(FORMATS)}", "format")
    return fmt


class AnthropicAgent(DriveAgent):
    """Claude driving through the ``computer_20250124`` tool. ``model``: the model id;
    ``client``: an ``anthropic.Anthropic`` (default: one from the environment);
    ``size``: the box screenshots fit in (:class:`~deskgym.agents.anthropic.ComputerTool`);
    ``betas``: the beta header the tool version needs; other keywords go to every
    ``messages.create`` (``system``, ``thinking``, ``temperature``...)."""

    #: Claude's text form of a tool call (``<invoke name=...><parameter ...>``).
    text_format = "invoke"

    def __init__(self, model: str, *, client: Any = None, max_tokens: int = 4096,
                 size: tuple[int, int] | None = claude_tool.DEFAULT_BOX,
                 betas: Sequence[str] = ("computer-use-2025-01-24",), **create: Any) -> None:
        self.model, self.client, self.max_tokens = model, client, max_tokens
        self.size, self.betas, self.create = size, list(betas), create
        self.messages: list[dict[str, Any]] = []

    def start(self, run: DriveRun) -> None:
        if self.client is None:
            import anthropic

            self.client = anthropic.Anthropic()
        self.tool = claude_tool.ComputerTool(run, size=self.size)
        # The instruction alone, as Anthropic's reference loop starts: the model asks for
        # the screenshot it wants.
        self.messages = [{"role": "user", "content": run.instruction}]

    def ask(self, run: DriveRun) -> Any:
        return self.client.beta.messages.create(model=self.model, max_tokens=self.max_tokens, messages=self.messages,
                                                tools=[self.tool.definition()], betas=self.betas, **self.create)

    def calls(self, reply: Any, run: DriveRun) -> Sequence[Any]:
        content = [jsonable(b) for b in reply.content]
        self.messages.append({"role": "assistant", "content": content})
        run.said("\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text"))
        return [b for b in content if b.get("type") == "tool_use"]

    def run_call(self, call: Any, run: DriveRun) -> dict[str, Any]:
        if call.get("name") != self.tool.name:
            return {"type": "tool_result", "tool_use_id": call.get("id", ""), "is_error": True,
                    "content": [{"type": "text", "text": f"no tool {call.get('name')!r}: use {self.tool.name!r}"}]}
        result: dict[str, Any] = self.tool.run(dict(call.get("input") or {}), str(call.get("id", "")))
        return result

    def answer(self, answers: list[Any], run: DriveRun) -> None:
        self.messages.append({"role": "user", "content": answers})


class OpenAIAgent(DriveAgent):
    """OpenAI's computer-use model through the Responses API. ``model``
    (``"computer-use-preview"``); ``client``: an ``openai.OpenAI``; ``size``: the box
    screenshots fit in (default: the screen as it is); ``acknowledge``: given a call's
    pending safety checks, those to acknowledge (default none: deciding is the
    harness's); other keywords go to every ``responses.create`` (``instructions``,
    ``reasoning``...). ``truncation="auto"``, as the API requires for this tool."""

    def __init__(self, model: str = "computer-use-preview", *, client: Any = None,
                 size: tuple[int, int] | None = None, environment: str = "linux",
                 acknowledge: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None,
                 **create: Any) -> None:
        self.model, self.client, self.size, self.environment = model, client, size, environment
        self.acknowledge = acknowledge
        self.create = {"truncation": "auto", **create}
        self.input: list[dict[str, Any]] = []
        self.previous: str | None = None

    def start(self, run: DriveRun) -> None:
        if self.client is None:
            import openai

            self.client = openai.OpenAI()
        self.tool = openai_tool.ComputerTool(run, size=self.size, environment=self.environment,
                                             acknowledge=self.acknowledge)
        self.input, self.previous = [{"role": "user", "content": run.instruction}], None

    def ask(self, run: DriveRun) -> Any:
        extra = {"previous_response_id": self.previous} if self.previous else {}
        return self.client.responses.create(model=self.model, tools=[self.tool.definition()], input=self.input,
                                            **extra, **self.create)

    def calls(self, reply: Any, run: DriveRun) -> Sequence[Any]:
        self.previous = reply.id
        items = [jsonable(i) for i in reply.output]
        run.said("\n".join(str(c.get("text", "")) for i in items if i.get("type") == "message"
                           for c in i.get("content") or [] if isinstance(c, dict)))
        return [i for i in items if i.get("type") == "computer_call"]

    def run_call(self, call: Any, run: DriveRun) -> list[dict[str, Any]]:
        try:
            return [self.tool.run(call)]
        except DeskgymError as e:
            # The output must be a screenshot; why nothing ran goes beside it, as a user
            # message the model reads with it.
            out = {"type": "computer_call_output", "call_id": call.get("call_id", ""),
                   "output": {"type": "input_image",
                              "image_url": "data:image/png;base64," + self.tool.screen.png_base64()}}
            return [out, {"role": "user", "content": f"That action was refused: {e.message}"}]

    def answer(self, answers: list[Any], run: DriveRun) -> None:
        self.input = [item for items in answers for item in items]


#: What :class:`ChatAgent` tells a model by default: the grammar it is read in, the
#: verbs, and how to end. The examples are :func:`deskgym.dialect.write_action`'s, so
#: what it is shown reads back.
DEFAULT_PROMPT = """You operate a computer through its screen. Each message shows the screen \
as a {w}x{h} image; coordinates are pixels of that image. Reply with your reasoning, then \
one or more actions, each as a tool call:
{click}
{type}
{key}
Verbs: click, double_click, right_click, move, drag (x, y, to_x, to_y), scroll (x, y, dy), \
type_text (text), key (keys: "ctrl+s", "Return"), wait (ms). When the task is done call \
"done"; when it cannot be done call "fail"."""


class ChatAgent(DriveAgent):
    """A model that writes its actions as text, behind an OpenAI-compatible chat
    completions endpoint. ``model``: the served model's name; ``client``: an
    ``openai.OpenAI(base_url=...)``; ``format`` and ``coords``: how its text is read
    (:func:`deskgym.dialect.parse_actions`; ``"auto"`` finds the grammar); ``system``:
    the system prompt (default :data:`DEFAULT_PROMPT`, teaching the ``tool_call``
    grammar); ``size``: the box screenshots fit in; ``keep_images``: screenshots kept in
    the conversation (older ones become a line of text, so long runs fit a context);
    other keywords go to every ``chat.completions.create``. Unreadable text and refused
    actions go back to the model with the next screenshot, as text."""

    def __init__(self, model: str, *, client: Any = None, format: str = "auto", coords: str | None = None,
                 system: str | None = None, size: tuple[int, int] | None = (1280, 800), keep_images: int = 3,
                 **create: Any) -> None:
        if isinstance(keep_images, bool) or not isinstance(keep_images, int) or keep_images < 1:
            raise DeskgymError("INVALID_ARGUMENT", f"keep_images: expected at least 1, got {keep_images!r}",
                               "keep_images")
        self.model, self.client, self.format, self.coords = model, client, _check_format(format), coords
        self.text_format = self.format
        self.system, self.size, self.keep_images, self.create = system, size, keep_images, create
        self.messages: list[dict[str, Any]] = []

    def from_text(self, text: str, display: Display | None = None, *, coords: str | None = None) -> list[Any]:
        """As :meth:`DriveAgent.from_text`, in this agent's ``format`` and ``coords``."""
        return super().from_text(text, display, coords=coords if coords is not None else self.coords)

    def start(self, run: DriveRun) -> None:
        if self.client is None:
            import openai

            self.client = openai.OpenAI()
        self.screen = Screen.fit(run, self.size)
        self.messages = []
        system = self.system or DEFAULT_PROMPT.format(
            w=self.screen.width, h=self.screen.height,
            click=write_action({"verb": "click", "x": 100, "y": 200}),
            type=write_action({"verb": "type_text", "text": "hello"}),
            key=write_action({"verb": "key", "keys": "Return"}))
        self.messages = [{"role": "system", "content": system}, self._shown(f"Task: {run.instruction}")]

    def _shown(self, text: str) -> dict[str, Any]:
        """A user message: ``text`` and the screen now."""
        older = [m for m in self.messages if m["role"] == "user" and isinstance(m["content"], list)]
        for m in older[: max(0, len(older) - self.keep_images + 1)]:
            m["content"] = [c if c["type"] == "text" else {"type": "text", "text": "(an earlier screenshot)"}
                            for c in m["content"]]
        url = "data:image/png;base64," + self.screen.png_base64()
        return {"role": "user", "content": [{"type": "text", "text": text},
                                            {"type": "image_url", "image_url": {"url": url}}]}

    def ask(self, run: DriveRun) -> Any:
        return self.client.chat.completions.create(model=self.model, messages=self.messages, **self.create)

    def calls(self, reply: Any, run: DriveRun) -> Sequence[Any]:
        text = reply.choices[0].message.content or ""
        self.messages.append({"role": "assistant", "content": text})
        run.said(text)
        return read_text(text, self.format, self.screen.display, self.coords)

    def run_call(self, call: Any, run: DriveRun) -> str:
        return run_text_call(call, run)

    def answer(self, answers: list[Any], run: DriveRun) -> None:
        notes = [a for a in answers if a]
        self.messages.append(self._shown("\n".join(notes) if notes else "Done. The screen now:"))


def agent(model: str, **kwargs: Any) -> DriveAgent:
    """The agent for ``model`` (ACI §2's ``agent("claude-...")``): a ``claude-*`` model
    drives through Anthropic's computer-use tool (:class:`AnthropicAgent`), a
    ``computer-use-*`` one through OpenAI's (:class:`OpenAIAgent`), any other writes
    text read by :mod:`deskgym.dialect` (:class:`ChatAgent`, an OpenAI-compatible
    endpoint: ``client=openai.OpenAI(base_url=...)``). Keywords go to the class."""
    if not isinstance(model, str) or not model:
        raise DeskgymError("INVALID_ARGUMENT", f"model: expected a model name, got {model!r}", "model")
    if model.startswith("claude"):
        return AnthropicAgent(model, **kwargs)
    if model.startswith("computer-use"):
        return OpenAIAgent(model, **kwargs)
    return ChatAgent(model, **kwargs)
