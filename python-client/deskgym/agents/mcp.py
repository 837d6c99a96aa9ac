"""deskgym desktops as MCP tools (extra ``deskgym[agents]``), on the official ``mcp`` SDK.

    python -m deskgym.mcp --address 127.0.0.1:50051 --task click-button              # stdio
    python -m deskgym.mcp --address 127.0.0.1:50051 --transport http --port 8765      # streamable HTTP at /mcp

Tools: ``screenshot`` (an image: the screen or the active window, optionally scaled
down with ``max_long_edge``), ``click`` / ``double_click`` / ``right_click`` /
``move`` / ``scroll`` / ``drag`` with a pixel target (``x``, ``y``) or an element (``ref``
from ``observe``, or ``role`` and/or ``name`` resolved against the live tree), ``type``,
``key``, ``wait``, ``observe`` (the element tree as text), ``list_windows``,
``launch_app``, ``reset``, ``open_desktop`` / ``close_desktop``; and ``exec``,
``read_file``, ``write_file``, ``list_directory`` only when the server was started with
those capabilities granted (``--capabilities exec,files``; the deskgym server's policy
must allow them too). Pixel coordinates (``x``, ``y``, ``to_x``, ``to_y``) are pixels of
the desktop's last ``screenshot`` (scaled or window-scoped as it was), mapped to the
screen through its geometry; before any screenshot, screen pixels. Every tool takes an optional ``desktop`` (an env id; default: the
only one open). A deskgym failure is a tool error whose text starts with the deskgym
code (``FAILED_PRECONDITION: element_not_found: ...``).

Each open desktop is a ``window://deskgym/<env id>`` resource (its instruction and element
tree as text), so an A2C-SMCP Computer shows it on its Desktop; opening or closing one
sends ``notifications/resources/list_changed``, and a tool call that changes a subscribed
desktop's screen or episode sends ``notifications/resources/updated`` for it (an SMCP
Computer turns both into ``server:update_desktop``). A cancelled call cancels its deskgym
RPC: a call still queued never runs; an input already sent cannot be taken back.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.fastmcp import Context, FastMCP, Image
from mcp.server.fastmcp.exceptions import ResourceError, ToolError
from mcp.server.lowlevel.helper_types import ReadResourceContents
from mcp import types
from mcp.types import Annotations, CallToolResult, TextContent
from mcp.types import Resource as MCPResource
from pydantic import AnyUrl
from typing_extensions import TypedDict

from deskgym.a11y import tree_request
from deskgym.actions import to_proto
from deskgym.client import Cancel, Client, Pool, cancellable
from deskgym.errors import DeskgymError
from deskgym.geometry import Display

#: The host part of this server's window URIs (A2C-SMCP: the MCP server's unique id).
WINDOW_HOST = "deskgym"
#: The longest ``wait`` one call may ask for, in milliseconds.
MAX_WAIT_MS = 60_000

_T = TypeVar("_T")


@dataclass
class Desktop:
    """One open desktop: its pool and env."""

    pool: Pool
    env_id: str
    task: str
    instruction: str = ""
    #: The screen, episode and end as tool calls last left them.
    state: str = ""
    #: The geometry of the last screenshot the agent was shown (pixel targets map
    #: through it); ``None``: screen pixels.
    display: Display | None = None

    @property
    def uri(self) -> str:
        return f"window://{WINDOW_HOST}/{self.env_id}"


class Desktops:
    """The desktops this MCP server opened on one deskgym server (thread-safe: tools run
    their deskgym calls on worker threads)."""

    def __init__(self, client: Client, capabilities: Sequence[str], screen: tuple[int, int] = (0, 0)) -> None:
        self.client = client
        self.capabilities = tuple(capabilities)
        self.screen = screen
        self._open: dict[str, Desktop] = {}
        self._lock = threading.Lock()
        #: URIs of desktops whose screen or episode a tool call changed, not yet notified.
        self._changed: set[str] = set()

    def changed(self, d: Desktop, state: str) -> None:
        """Notes the state (screen, episode, ended) a call left ``d`` in; a new one is a
        content change."""
        with self._lock:
            if state != d.state:
                d.state = state
                self._changed.add(d.uri)

    def take_changed(self) -> set[str]:
        with self._lock:
            out, self._changed = self._changed, set()
        return out

    def open(self, task: str, profile: str | None = None, seed: int | None = None,
             capabilities: Sequence[str] | None = None) -> Desktop:
        """Opens a desktop granted ``capabilities`` (default: all of this server's; never
        more: an agent cannot widen what the operator granted)."""
        caps = self.capabilities if capabilities is None else tuple(capabilities)
        extra = sorted(set(caps) - set(self.capabilities))
        if extra:
            raise DeskgymError("PERMISSION_DENIED", f"capabilities {extra} were not granted to this MCP server "
                               f"(it has {list(self.capabilities) or 'none'})")
        pool = self.client.create_pool(task, 1, screen=self.screen, profile=profile, capabilities=caps,
                                       encoding="png")
        d = Desktop(pool, pool.env_ids[0], task)
        try:
            r = self.client.reset(d.env_id, seed=seed, encoding="png")
        except DeskgymError:
            self.client.release(pool)
            raise
        d.instruction = r.info.instruction
        with self._lock:
            self._open[d.env_id] = d
        return d

    def close(self, env_id: str) -> None:
        with self._lock:
            d = self._open.pop(env_id, None)
        if d is None:
            raise DeskgymError("NOT_FOUND", f"no open desktop {env_id!r}; open ones: {sorted(self._open) or 'none'}")
        self.client.release(d.pool)

    def get(self, env_id: str | None) -> Desktop:
        with self._lock:
            if env_id:
                if env_id in self._open:
                    return self._open[env_id]
                raise DeskgymError("NOT_FOUND", f"no open desktop {env_id!r}; open ones: {sorted(self._open) or 'none'}")
            if len(self._open) == 1:
                return next(iter(self._open.values()))
        if not self._open:
            raise DeskgymError("FAILED_PRECONDITION", "no desktop is open: call open_desktop first")
        raise DeskgymError("INVALID_ARGUMENT", f"several desktops are open ({', '.join(sorted(self._open))}): name one in 'desktop'")

    def all(self) -> list[Desktop]:
        with self._lock:
            return list(self._open.values())

    def close_all(self) -> None:
        for d in self.all():
            self.close(d.env_id)


class DeskgymToolError(ToolError):
    """A tool failure with its deskgym code: the tool result's text is
    ``"<CODE>: <message>"`` and its ``_meta`` has ``{"deskgym/code": CODE}``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def _tool_error(e: DeskgymError) -> DeskgymToolError:
    return DeskgymToolError(e.code, e.message)


def blocking(fn: Callable[[], _T]) -> Awaitable[_T]:
    """Runs a blocking deskgym call on a worker thread; a cancelled tool call returns at
    once and cancels the deskgym RPC in flight (a call the server has not started never
    runs; an input already sent stays sent)."""

    async def run() -> _T:
        token = Cancel()

        def call() -> _T:
            with cancellable(token):
                return fn()

        try:
            return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
        except DeskgymError as e:
            raise _tool_error(e) from None
        except anyio.get_cancelled_exc_class():
            token.cancel()
            raise

    return run()


def _target(prefix: str, x: int | None, y: int | None, ref: str | None, role: str | None, name: str | None) -> dict[str, Any]:
    """A deskgym action's position keys from a tool's target arguments."""
    if ref:
        return {f"{prefix}ref": ref}
    if role or name:
        return {f"{prefix}element": {"role": role or "", "name": name or ""}}
    if x is None or y is None:
        raise DeskgymToolError("INVALID_ARGUMENT", "give x and y (pixels), ref (from observe), or role and/or name")
    return {f"{prefix}x": x, f"{prefix}y": y}


class DeskgymMCP(FastMCP):
    """A FastMCP server whose resources are the open desktops' windows."""

    def __init__(self, desktops: Desktops, **settings: Any) -> None:
        super().__init__("deskgym", instructions=__doc__.split("\n\n")[2], **settings)
        self.desktops = desktops
        #: window:// URIs the client subscribed to (resources/subscribe).
        self.subscribed: set[str] = set()
        low = self._mcp_server

        async def subscribe(uri: AnyUrl) -> None:
            self.subscribed.add(str(uri))

        async def unsubscribe(uri: AnyUrl) -> None:
            self.subscribed.discard(str(uri))

        # The SDK's registration decorators are untyped.
        low.subscribe_resource()(subscribe)  # type: ignore[no-untyped-call]
        low.unsubscribe_resource()(unsubscribe)  # type: ignore[no-untyped-call]

        # The SDK's capabilities say subscribe=False whatever handlers exist; this server
        # serves subscriptions, so it says so (an SMCP Computer subscribes then).
        capabilities = low.get_capabilities

        def with_subscribe(*args: Any, **kwargs: Any) -> types.ServerCapabilities:
            caps = capabilities(*args, **kwargs)
            if caps.resources is not None:
                caps.resources.subscribe = True
            return caps

        low.get_capabilities = with_subscribe  # type: ignore[method-assign]

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> Any:
        """As FastMCP's, but a deskgym failure is a tool error that starts with its code
        (FastMCP would prefix "Error executing tool ..."); afterwards, subscribers hear of
        the desktops the call changed."""
        try:
            return await super().call_tool(name, arguments)
        except ToolError as e:
            cause = e if isinstance(e, DeskgymToolError) else e.__cause__
            if not isinstance(cause, DeskgymToolError):
                raise
            return CallToolResult(content=[TextContent(type="text", text=str(cause))], isError=True,
                                  _meta={"deskgym/code": cause.code})
        finally:
            changed = self.desktops.take_changed() & self.subscribed
            if changed:
                session = self.get_context().session
                for uri in sorted(changed):
                    await session.send_resource_updated(AnyUrl(uri))

    async def list_resources(self) -> list[MCPResource]:
        return [
            MCPResource(
                uri=AnyUrl(d.uri), name=d.env_id, title=f"deskgym desktop {d.env_id} ({d.task})",
                mimeType="text/plain", annotations=Annotations(audience=["assistant"], priority=0.5),
            )
            for d in self.desktops.all()
        ]

    async def read_resource(self, uri: AnyUrl | str) -> Iterable[ReadResourceContents]:
        prefix = f"window://{WINDOW_HOST}/"
        env_id = str(uri)[len(prefix):] if str(uri).startswith(prefix) else ""
        try:
            d = self.desktops.get(env_id) if env_id else None
        except DeskgymError:
            d = None
        if d is None:
            raise ResourceError(f"unknown resource {uri}")
        text = await blocking(functools.partial(_window_text, self.desktops.client, d))
        return [ReadResourceContents(content=text, mime_type="text/plain")]


class StepOutcome(TypedDict):
    """What an action tool did: the episode's step, the reward, whether it ended."""

    verb: str
    step: int
    reward: float
    terminated: bool
    truncated: bool


class EpisodeStart(TypedDict):
    """A new episode: its number, seed and instruction."""

    episode: int
    seed: int
    instruction: str


class OpenedDesktop(TypedDict):
    """A desktop opened by ``open_desktop``."""

    desktop: str
    width: int
    height: int
    profile: str
    instruction: str


class CommandOutput(TypedDict):
    """An ``exec`` command's end and output (``exit_code`` is None when a signal ended it)."""

    exit_code: int | None
    timed_out: bool
    stdout: str
    stderr: str


class Window(TypedDict):
    """A top-level window."""

    id: int
    title: str
    wm_class: str
    x: int
    y: int
    width: int
    height: int
    focused: bool


class Windows(TypedDict):
    """The desktop's top-level windows."""

    windows: list[Window]


class Entry(TypedDict):
    """A directory entry."""

    path: str
    kind: str
    size: int


class Listing(TypedDict):
    """A directory's entries."""

    entries: list[Entry]


#: Tool results: the text a model reads, and the same facts typed (``structuredContent``,
#: with the tool's output schema) for a program.
Stepped = Annotated[CallToolResult, StepOutcome]
Started = Annotated[CallToolResult, EpisodeStart]
Opened = Annotated[CallToolResult, OpenedDesktop]
Ran = Annotated[CallToolResult, CommandOutput]
Listed = Annotated[CallToolResult, Windows]
Entries = Annotated[CallToolResult, Listing]


def _typed(text: str, data: Any) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structuredContent=dict(data))


def _window_text(client: Client, d: Desktop) -> str:
    obs = client.observe(d.env_id, encoding="jpeg", tree=tree_request(line_budget=200))
    head = f"deskgym desktop {d.env_id}: task {d.task}, {obs.width}x{obs.height}\ninstruction: {d.instruction}\n"
    return head + obs.tree.text


def build(
    client: Client,
    *,
    task: str | None = None,
    profile: str | None = None,
    seed: int | None = None,
    capabilities: Sequence[str] = (),
    screen: tuple[int, int] = (0, 0),
    **settings: Any,
) -> DeskgymMCP:
    """The MCP server over ``client``; opens a desktop of ``task`` first when given.
    ``settings`` go to FastMCP (``host``, ``port``...)."""
    desktops = Desktops(client, capabilities, screen)
    server = DeskgymMCP(desktops, **settings)
    if task:
        desktops.open(task, profile, seed)
    # In this order: it is the order tools/list gives them in.
    _input_tools(server, desktops)
    _desktop_tools(server, desktops)
    _sandbox_tools(server, desktops, capabilities)
    return server


def _step(desktops: Desktops, desktop: str | None, action: dict[str, Any]) -> CallToolResult:
    """Runs one action on a desktop (pixel targets mapped through its last screenshot)."""
    d = desktops.get(desktop)
    if d.display is not None and not d.display.whole:
        action = d.display.map_action(action)
    r = desktops.client.step(d.env_id, to_proto(action), encoding="png")
    d.instruction = r.info.instruction
    desktops.changed(d, f"{r.observation.frame_hash} {r.info.episode} {r.terminated or r.truncated}")
    out = f"{action['verb']} done: step {r.info.step_index}, reward {r.reward:g}"
    if r.terminated or r.truncated:
        out += ", the episode ended (" + ("terminated" if r.terminated else "truncated") + "): call reset"
    return _typed(out, StepOutcome(verb=action["verb"], step=r.info.step_index, reward=r.reward,
                                   terminated=r.terminated, truncated=r.truncated))


async def _act(desktops: Desktops, desktop: str | None, action: dict[str, Any]) -> CallToolResult:
    return await blocking(functools.partial(_step, desktops, desktop, action))


def _input_tools(server: DeskgymMCP, desktops: Desktops) -> None:
    """The screenshot and the input tools: what an agent sees and does."""
    tool = server.tool

    @tool()
    async def screenshot(scope: str = "screen", max_long_edge: int = 0, desktop: str | None = None) -> Image:
        """The desktop's screen (scope "screen") or focused window ("active_window") as a
        PNG image, scaled down so its long edge is at most max_long_edge (0: full size).
        Later x, y arguments are pixels of this image."""
        if scope not in ("screen", "active_window"):
            raise DeskgymToolError("INVALID_ARGUMENT", f"scope {scope!r} is not screen or active_window")

        def shot() -> bytes:
            d = desktops.get(desktop)
            obs = desktops.client.screenshot(d.env_id, scope=scope, max_long_edge=max_long_edge, encoding="png")
            d.display = Display.of(obs)
            return bytes(obs.frame)
        return Image(data=await blocking(shot), format="png")

    @tool()
    async def click(x: int | None = None, y: int | None = None, ref: str | None = None, role: str | None = None,
                    name: str | None = None, button: str = "left", desktop: str | None = None) -> Stepped:
        """Click at pixel (x, y), or on an element: ref (e.g. "e12" from observe) or role and/or name
        (e.g. role "push button", name "OK"), resolved against the live screen."""
        return await _act(desktops, desktop, {"verb": "click", "button": button, **_target("", x, y, ref, role, name)})

    @tool()
    async def double_click(x: int | None = None, y: int | None = None, ref: str | None = None, role: str | None = None,
                           name: str | None = None, desktop: str | None = None) -> Stepped:
        """Double-click at a pixel or an element (as click)."""
        return await _act(desktops, desktop, {"verb": "double_click", **_target("", x, y, ref, role, name)})

    @tool()
    async def right_click(x: int | None = None, y: int | None = None, ref: str | None = None, role: str | None = None,
                          name: str | None = None, desktop: str | None = None) -> Stepped:
        """Right-click at a pixel or an element (as click)."""
        return await _act(desktops, desktop, {"verb": "right_click", **_target("", x, y, ref, role, name)})

    @tool()
    async def move(x: int | None = None, y: int | None = None, ref: str | None = None, role: str | None = None,
                   name: str | None = None, desktop: str | None = None) -> Stepped:
        """Move the pointer to a pixel or an element (as click)."""
        return await _act(desktops, desktop, {"verb": "move", **_target("", x, y, ref, role, name)})

    @tool()
    async def scroll(dy: int = 3, dx: int = 0, x: int | None = None, y: int | None = None, ref: str | None = None,
                     role: str | None = None, name: str | None = None, desktop: str | None = None) -> Stepped:
        """Scroll the wheel (dy > 0: down, dx > 0: right; -50..50 clicks) at a pixel or an element."""
        return await _act(desktops, desktop, {"verb": "scroll", "dx": dx, "dy": dy, **_target("", x, y, ref, role, name)})

    @tool()
    async def drag(x: int | None = None, y: int | None = None, to_x: int | None = None, to_y: int | None = None,
                   ref: str | None = None, to_ref: str | None = None, duration_ms: int = 0,
                   desktop: str | None = None) -> Stepped:
        """Press at (x, y) or element ref, move to (to_x, to_y) or element to_ref, release."""
        return await _act(desktops, desktop, {"verb": "drag", "duration_ms": duration_ms,
                                   **_target("", x, y, ref, None, None), **_target("to_", to_x, to_y, to_ref, None, None)})

    @tool(name="type")
    async def type_text(text: str, desktop: str | None = None) -> Stepped:
        """Type text (Unicode) into the focused element."""
        return await _act(desktops, desktop, {"verb": "type_text", "text": text})

    @tool()
    async def key(keys: str, desktop: str | None = None) -> Stepped:
        """Press a key chord: X keysym names joined by '+', e.g. "ctrl+s", "Return", "shift+Tab"."""
        return await _act(desktops, desktop, {"verb": "key", "keys": keys})

    @tool()
    async def wait(ms: int, desktop: str | None = None) -> Stepped:
        """Let ms milliseconds pass (at most 60000), then let the screen settle."""
        if not 0 <= ms <= MAX_WAIT_MS:
            raise DeskgymToolError("INVALID_ARGUMENT", f"ms={ms} is outside 0..{MAX_WAIT_MS}")
        try:
            desktops.get(desktop)  # a bad desktop fails before the wait, not after
        except DeskgymError as e:
            raise _tool_error(e) from None
        # The wait itself is here, so a cancelled call ends at once; then a no-op settles.
        await anyio.sleep(ms / 1000)
        return await _act(desktops, desktop, {"verb": "noop"})


def _desktop_tools(server: DeskgymMCP, desktops: Desktops) -> None:
    """Reading a desktop's elements and windows, apps, episodes, and opening and closing
    desktops."""
    tool = server.tool

    @tool()
    async def observe(desktop: str | None = None) -> str:
        """The desktop's elements as indented text, one per line with its ref ("e12"), role, name
        and position; use a ref as a target of click and the other pointer tools."""
        def read() -> str:
            d = desktops.get(desktop)
            o = desktops.client.observe(d.env_id, encoding="jpeg", tree=tree_request())
            return f"instruction: {d.instruction}\n" + o.tree.text
        return await blocking(read)

    @tool()
    async def list_windows(desktop: str | None = None) -> Listed:
        """The desktop's top-level windows as JSON: id, title, class, geometry, focus."""
        def ls() -> CallToolResult:
            ws = desktops.client.windows(desktops.get(desktop).env_id)
            text = json.dumps([{"id": w.id, "title": w.title, "class": w.wm_class, "x": w.x, "y": w.y,
                                "width": w.width, "height": w.height, "focused": w.focused} for w in ws])
            return _typed(text, Windows(windows=[
                Window(id=w.id, title=w.title, wm_class=w.wm_class, x=w.x, y=w.y, width=w.width, height=w.height,
                       focused=w.focused) for w in ws]))
        return await blocking(ls)

    @tool()
    async def launch_app(app: str, args: list[str] | None = None, desktop: str | None = None) -> Stepped:
        """Start an application of the desktop's profile by name (e.g. "terminal", "chromium")."""
        return await _act(desktops, desktop, {"verb": "launch_app", "app": app, "args": args or []})

    @tool()
    async def reset(seed: int | None = None, desktop: str | None = None) -> Started:
        """Start a new episode of the desktop's task; returns its instruction."""
        def go() -> CallToolResult:
            d = desktops.get(desktop)
            r = desktops.client.reset(d.env_id, seed=seed, encoding="png")
            d.instruction = r.info.instruction
            desktops.changed(d, f"{r.observation.frame_hash} {r.info.episode} False")
            return _typed(f"episode {r.info.episode} (seed {r.info.seed}): {d.instruction}",
                          EpisodeStart(episode=r.info.episode, seed=r.info.seed, instruction=d.instruction))
        return await blocking(go)

    @tool()
    async def open_desktop(task: str, ctx: Context, profile: str | None = None, seed: int | None = None,  # type: ignore[type-arg]
                           capabilities: list[str] | None = None) -> Opened:
        """Open a new desktop running a deskgym task (e.g. "blank", "click-button",
        "miniwob/click-test") on a profile (default: the task's; "desktop" for apps),
        granted capabilities (default: all this server has; the bundled tasks' profile
        takes none); returns its id for the other tools' desktop argument."""
        d = await blocking(functools.partial(desktops.open, task, profile, seed, capabilities))
        await ctx.session.send_resource_list_changed()
        return _typed(f"desktop {d.env_id} ({d.pool.width}x{d.pool.height}, profile {d.pool.profile}): {d.instruction}",
                      OpenedDesktop(desktop=d.env_id, width=d.pool.width, height=d.pool.height, profile=d.pool.profile,
                                    instruction=d.instruction))

    @tool()
    async def close_desktop(desktop: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Close a desktop this server opened."""
        await blocking(functools.partial(desktops.close, desktop))
        await ctx.session.send_resource_list_changed()
        return f"desktop {desktop} closed"


def _sandbox_tools(server: DeskgymMCP, desktops: Desktops, capabilities: Sequence[str]) -> None:
    """``exec`` and the file tools, each only when its capability was granted."""
    tool = server.tool
    if "exec" in capabilities:
        @tool(name="exec")
        async def run_command(command: str, timeout_s: float = 30.0, desktop: str | None = None) -> Ran:
            """Run a shell command in the desktop's sandbox; returns exit code, stdout and stderr."""
            def go() -> CallToolResult:
                r = desktops.client.exec(desktops.get(desktop).env_id, command, shell=True, timeout=timeout_s)
                out = CommandOutput(exit_code=r.exit_code, timed_out=r.timed_out, stdout=r.stdout, stderr=r.stderr)
                return _typed(json.dumps(out), out)
            return await blocking(go)

    if "files" in capabilities:
        @tool()
        async def read_file(path: str, desktop: str | None = None) -> str:
            """A file of the desktop's sandbox as text (relative paths: from the sandbox's home)."""
            def go() -> str:
                return desktops.client.get_file(desktops.get(desktop).env_id, path).decode("utf-8", errors="replace")
            return await blocking(go)

        @tool()
        async def write_file(path: str, content: str, desktop: str | None = None) -> str:
            """Write a text file into the desktop's sandbox."""
            def go() -> str:
                n = desktops.client.put_file(desktops.get(desktop).env_id, path, content)
                return f"wrote {n} bytes to {path}"
            return await blocking(go)

        @tool()
        async def list_directory(path: str = ".", desktop: str | None = None) -> Entries:
            """A directory of the desktop's sandbox as JSON entries."""
            def go() -> CallToolResult:
                r = desktops.client.list_directory(desktops.get(desktop).env_id, path)
                entries = [Entry(path=e.path, kind=e.kind, size=e.size) for e in r.entries]
                return _typed(json.dumps(entries), Listing(entries=entries))
            return await blocking(go)


def _screen(s: str) -> tuple[int, int]:
    w, _, h = s.partition("x")
    return int(w), int(h)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m deskgym.mcp", description="deskgym desktops as MCP tools.")
    p.add_argument("--address", default=os.environ.get("DESKGYM_ADDRESS", "127.0.0.1:50051"),
                   help="the deskgym server (default $DESKGYM_ADDRESS, else 127.0.0.1:50051)")
    p.add_argument("--token-file", help="a file holding the deskgym token (else $DESKGYM_TOKEN)")
    p.add_argument("--task", help="open a desktop of this task at start")
    p.add_argument("--profile", help="its profile (default: the task's)")
    p.add_argument("--seed", type=int, help="its first episode's seed")
    p.add_argument("--screen", type=_screen, default=(0, 0), help="WxH (default: the task's)")
    p.add_argument("--capabilities", default="", help="grants for the desktops, e.g. exec,files,launch_app")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    p.add_argument("--host", default="127.0.0.1", help="HTTP: listen address")
    p.add_argument("--port", type=int, default=8765, help="HTTP: port (the endpoint is /mcp)")
    a = p.parse_args(argv)
    token = os.environ.get("DESKGYM_TOKEN")
    if a.token_file:
        with open(a.token_file) as f:
            token = f.read().strip()
    caps = [c for c in a.capabilities.split(",") if c]
    client = Client(a.address, token)
    try:
        try:
            server = build(client, task=a.task, profile=a.profile, seed=a.seed, capabilities=caps, screen=a.screen,
                           host=a.host, port=a.port, log_level="WARNING")
        except DeskgymError as e:
            raise SystemExit(f"deskgym.mcp: cannot open the {a.task!r} desktop: {e}") from None
        server.run("stdio" if a.transport == "stdio" else "streamable-http")
    finally:
        client.close()


if __name__ == "__main__":
    main()
