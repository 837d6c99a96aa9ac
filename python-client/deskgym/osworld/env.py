"""The shim's classes (:mod:`deskgym.osworld` is their face): OSWorld's ``DesktopEnv``
over a deskgym desktop, its controller, and a setup controller that records each step.

Importing this module imports ``desktop_env``, and with it OSWorld's metric and getter
packages: it puts the lazy stand-ins of :mod:`deskgym.osworld._lazy` in their place
first, so that import costs no torch or librosa.
"""

from __future__ import annotations

import http.client
import logging
import os
import time
import urllib.request
from typing import Any

import deskgym
from deskgym.errors import DeskgymError
from deskgym.osworld import _lazy
from deskgym.osworld.actions import Sleep, translate
from deskgym.osworld.bridge import Bridge
from deskgym.osworld.outcomes import SetupOutcome, judge
from deskgym.osworld.standins import download_name, marketplace_install

_lazy.install()

from desktop_env.controllers.python import PythonController  # type: ignore[import-untyped]  # noqa: E402
from desktop_env.controllers.setup import SetupController  # type: ignore[import-untyped]  # noqa: E402
from desktop_env.desktop_env import DesktopEnv as _OSWorldEnv  # type: ignore[import-untyped]  # noqa: E402

__all__ = ["CAPABILITIES", "DesktopEnv", "NativeController", "RecordingSetupController"]

logger = logging.getLogger("deskgym.osworld")

#: What the bridge needs of the env.
CAPABILITIES = ("exec", "files", "windows", "launch_app", "clipboard")

#: How long a ``chrome_open_tabs`` step waits for the browser's DevTools endpoint before
#: OSWorld's own tries (15, 5 s apart) begin.
CHROME_WAIT_S = 30.0


class NativeController(PythonController):  # type: ignore[misc]
    """OSWorld's controller, with pure pyautogui code run as deskgym actions
    (:mod:`deskgym.osworld.actions`) instead of ``python -c`` inside the desktop.
    ``native_actions`` counts the commands that went the fast way."""

    def __init__(self, env: deskgym.DeskgymEnv, vm_ip: str, server_port: int) -> None:
        super().__init__(vm_ip=vm_ip, server_port=server_port)
        self._deskgym = env
        self.native_actions = 0

    def execute_python_command(self, command: str) -> dict[str, Any] | None:
        plan = translate(command)
        if plan is None:
            result: dict[str, Any] | None = super().execute_python_command(command)
            return result
        self.native_actions += 1
        for a in plan:
            if isinstance(a, Sleep):
                time.sleep(a)
                continue
            try:
                self._deskgym.step(a)
            except DeskgymError as e:
                # OSWorld logs a failed command and goes on; so does this.
                logger.error("action %r of %r failed: %s", a, command, e)
                return {"status": "error", "output": "", "error": str(e), "returncode": 1}
        return {"status": "success", "output": "", "error": "", "returncode": 0}


class RecordingSetupController(SetupController):  # type: ignore[misc]
    """OSWorld's setup controller, unchanged in what it does, that also keeps each step's
    outcome (:class:`~deskgym.osworld.outcomes.SetupOutcome`) in ``outcomes``.

    OSWorld's ``setup()`` runs step *i* as ``getattr(self, "_<type>_setup")(**params)``;
    each such method is wrapped on the instance, and while one runs the bridge notes the
    requests it answers, so a step OSWorld logs as failed and goes on from is on record
    with the desktop's answer. A step that raises still raises, as in OSWorld."""

    def __init__(self, *args: Any, bridge: Bridge, outcomes: list[SetupOutcome], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bridge = bridge
        #: Shared with the env (a reset makes a new controller; the record stays).
        self.outcomes = outcomes
        #: ``config`` during a reset, ``postconfig`` during an evaluation (the env sets it).
        self.phase = "call"
        self._step = 0
        self._depth = 0
        for name in dir(type(self)):
            if name.startswith("_") and name.endswith("_setup") and name != "_setup" and callable(getattr(self, name)):
                setattr(self, name, self._recorded(name[1:-len("_setup")], getattr(self, name)))

    def setup(self, config: list[dict[str, Any]], use_proxy: bool = False) -> bool:
        if self.phase != "call":
            # A reset's retry, or a second evaluation: the latest run of the phase stands.
            self.outcomes[:] = [o for o in self.outcomes if o.phase != self.phase]
        self._step = 0
        ok: bool = super().setup(config, use_proxy)
        if not ok:
            # OSWorld's setup gives up without running a step when the desktop's server
            # does not answer; its reset retries and then goes on as if set up.
            self.outcomes.append(SetupOutcome(self.phase, 0, "connect", self.http_server, False,
                                              error="the desktop's HTTP interface did not answer"))
        return ok

    def _chrome_open_tabs_setup(self, urls_to_open: list[str]) -> Any:
        # OSWorld's step tries the browser's DevTools once and, when the browser a step
        # before it launched is not listening yet, sleeps 5 s before trying again: 5 of
        # the 6-10 s of every such reset here. Waiting for the endpoint first makes its
        # first try the one that connects; it does what it did, sooner.
        url = f"http://{self.vm_ip}:{self.chromium_port}/json/version"
        deadline = time.monotonic() + CHROME_WAIT_S
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=2):
                    break
            except (OSError, http.client.HTTPException):
                time.sleep(0.1)
        return super()._chrome_open_tabs_setup(urls_to_open)

    def _command_setup(self, command: Any, **kwargs: Any) -> Any:
        # ``code --install-extension publisher.name`` fetches from the marketplace, which an
        # offline desktop cannot reach: when the task's cache holds the extension (fetched
        # there by ``deskgym.osworld.cache``, or a stand-in), the step installs that file.
        found = marketplace_install(command)
        if found is not None:
            i, ext_id, url = found
            dest = f"/tmp/{ext_id}.vsix"
            if os.path.exists(os.path.join(self.cache_dir, download_name(url, dest))):
                self._download_setup([{"url": url, "path": dest}])
                command = [*command[:i], dest, *command[i + 1:]]
        return super()._command_setup(command, **kwargs)

    def _recorded(self, kind: str, method: Any) -> Any:
        def step(*args: Any, **params: Any) -> Any:
            if self._depth or args:  # a step calling another (command -> execute) is one step
                return method(*args, **params)
            self._depth += 1
            self._step += 1
            calls = self._bridge.trace = []
            t0 = time.monotonic()
            exc: BaseException | None = None
            try:
                return method(**params)
            except BaseException as e:
                exc = e
                raise
            finally:
                self._bridge.trace = None
                self._depth -= 1
                out = judge(self.phase, self._step, kind, params, calls, exc, time.monotonic() - t0)
                if not out.ok:
                    logger.warning("%s", out.describe())
                self.outcomes.append(out)

        return step


class DesktopEnv(_OSWorldEnv):  # type: ignore[misc]
    """OSWorld's environment over one deskgym desktop (profile ``osworld``: ``desktop``
    with the home folders OSWorld's task files expect).

    Takes OSWorld's arguments (``provider_name``, ``path_to_vm``, ``snapshot_name``,
    ``region``, ``headless`` and ``enable_proxy`` are accepted and have no effect) plus
    ``address``, ``token``, ``profile``, ``native_actions`` (default on: pure
    pyautogui code runs as deskgym actions; off: everything runs as ``python -c`` inside
    the desktop, as OSWorld does) and ``network`` (default off: the desktop is offline;
    on: it has a network stack of its own with outbound access, for tasks that open live
    pages; the server must allow the ``network`` capability) and ``offline`` (every file a
    task fetches must be in ``cache_dir`` already, see :mod:`deskgym.osworld.cache`; a
    reset missing one fails at once naming each URL and path, never trying the network).
    """

    def __init__(
        self,
        provider_name: str = "deskgym",
        region: str | None = None,
        path_to_vm: str | None = None,
        snapshot_name: str = "init_state",
        action_space: str = "pyautogui",
        cache_dir: str = "cache",
        screen_size: tuple[int, int] = (1920, 1080),
        headless: bool = True,
        require_a11y_tree: bool = True,
        require_terminal: bool = False,
        os_type: str = "Ubuntu",
        enable_proxy: bool = False,
        client_password: str = "",
        *,
        address: str | None = None,
        token: str | None = None,
        profile: str = "osworld",
        native_actions: bool = True,
        network: bool = False,
        offline: bool = False,
    ) -> None:
        # OSWorld's __init__ starts a VM provider; this one sets the same attributes.
        self.region = region
        self.provider_name = provider_name
        self.enable_proxy = enable_proxy
        self.client_password = client_password or "password"
        self.screen_width, self.screen_height = int(screen_size[0]), int(screen_size[1])
        self.vnc_port = 8006
        self.current_use_proxy = False
        self.manager = None
        self.provider = None
        self.os_type = os_type
        self.is_environment_used = False
        self.path_to_vm = path_to_vm or "deskgym"
        self.snapshot_name = snapshot_name
        self.cache_dir_base = cache_dir
        self.headless = headless
        self.require_a11y_tree = require_a11y_tree
        self.require_terminal = require_terminal
        self.instruction = None
        if action_space not in ("computer_13", "pyautogui", "claude_computer_use"):
            raise DeskgymError("INVALID_ARGUMENT", f"action_space {action_space!r} is not computer_13 or pyautogui")
        self.action_space = action_space
        self._traj_no = -1
        self._step_no = 0
        self.action_history: list[Any] = []
        self._address = address or os.environ.get("DESKGYM_ADDRESS", deskgym.DEFAULT_ADDRESS)
        self._token = token
        self._profile = profile
        self._native = native_actions
        self._network = network
        self._offline = offline
        self._env: deskgym.DeskgymEnv | None = None
        self._bridge: Bridge | None = None
        self._forwards: list[deskgym.PortForward] = []
        #: Each setup step of the current task as it ran: the ``config`` steps of the last
        #: reset, then the ``postconfig`` steps of the last evaluation (see
        #: :mod:`deskgym.osworld.outcomes`). OSWorld goes on past most failed steps; this
        #: says which failed and what the desktop answered.
        self.setup_outcomes: list[SetupOutcome] = []
        self._start_emulator()

    # -- the "VM" ----------------------------------------------------------------------

    def _start_emulator(self) -> None:
        if self._env is None:
            try:
                self._env = deskgym.make(
                    "blank", address=self._address, token=self._token, profile=self._profile,
                    screen=(self.screen_width, self.screen_height),
                    capabilities=CAPABILITIES + (("network",) if self._network else ()),
                    # The observation OSWorld shows comes from /screenshot; a step's own frame
                    # is only a cheap JPEG. Episodes end when the harness says, not by count.
                    obs_type="jpeg", max_steps=1_000_000,
                    # A failed action stays an error, as OSWorld's controller and the
                    # bridge expect (they answer it as OSWorld's server does).
                    env_errors="raise",
                )
            except deskgym.DeskgymError as e:
                if e.code != "PERMISSION_DENIED":
                    raise
                # The server names the first grant it refused; the shim needs two.
                raise deskgym.DeskgymError(
                    "PERMISSION_DENIED",
                    f"OSWorld's harness runs commands and moves files in the desktop: start the server "
                    f"with --allow-capabilities exec,files ({e.message})",
                ) from None
            self._fresh_desktop()
            self._bridge = Bridge(self._env, (self.screen_width, self.screen_height))
            # OSWorld reaches the VM's Chrome (socat 9222 -> 1337) and VLC (8080) at
            # vm_ip; here each is a local port tunnelled into this env's own sandbox.
            self._forwards = [self._env.forward(9222), self._env.forward(8080)]
        self.vm_ip = "127.0.0.1"
        assert self._bridge is not None
        self.server_port = self._bridge.port
        self.chromium_port, self.vlc_port = (f.port for f in self._forwards)
        self.controller = (
            NativeController(self._env, self.vm_ip, self.server_port)
            if self._native
            else PythonController(vm_ip=self.vm_ip, server_port=self.server_port)
        )
        phase = getattr(getattr(self, "setup_controller", None), "phase", "call")
        self.setup_controller = RecordingSetupController(
            vm_ip=self.vm_ip, server_port=self.server_port, chromium_port=self.chromium_port,
            vlc_port=self.vlc_port, cache_dir=self.cache_dir_base, client_password=self.client_password,
            screen_width=self.screen_width, screen_height=self.screen_height,
            bridge=self._bridge, outcomes=self.setup_outcomes,
        )
        self.setup_controller.phase = phase

    def _fresh_desktop(self) -> None:
        assert self._env is not None
        self._env.reset(seed=0)

    def _revert_to_snapshot(self) -> None:
        # A deskgym reset restarts the sandbox's session from its template: the state a
        # snapshot revert gives a VM.
        self._fresh_desktop()

    def _save_state(self, snapshot_name: str | None = None) -> None:
        raise DeskgymError("UNIMPLEMENTED", "use deskgym's Save/Fork (env.deskgym.save()) instead of VM snapshots")

    @property
    def deskgym(self) -> deskgym.DeskgymEnv:
        """The deskgym env under this one (pixels, tree, exec, save/fork)."""
        assert self._env is not None
        return self._env

    def close(self) -> None:
        for f in self._forwards:
            f.close()
        self._forwards = []
        if self._bridge is not None:
            self._bridge.close()
            self._bridge = None
        if self._env is not None:
            self._env.close()
            self._env = None

    # -- tasks ---------------------------------------------------------------------------

    def reset(self, task_config: dict[str, Any] | None = None, seed: Any = None, options: Any = None) -> Any:
        """OSWorld's reset; a failing setup step's error names the task (OSWorld's says
        only which step), so a log of many tasks says which one failed. Each step's
        outcome is in ``setup_outcomes`` afterwards, whether it raised or not."""
        self.setup_outcomes.clear()
        self.setup_controller.phase = "config"
        try:
            return super().reset(task_config=task_config, seed=seed, options=options)
        except Exception as e:
            tid = (task_config or {}).get("id")
            if tid and e.args and isinstance(e.args[0], str) and tid not in e.args[0]:
                e.args = (f"task {tid}: {e.args[0]}", *e.args[1:])
            raise
        finally:
            self.setup_controller.phase = "call"

    def evaluate(self) -> Any:
        """OSWorld's evaluation; its ``postconfig`` steps' outcomes join ``setup_outcomes``."""
        self.setup_controller.phase = "postconfig"
        try:
            return super().evaluate()
        finally:
            self.setup_controller.phase = "call"

    def _set_task_info(self, task_config: dict[str, Any]) -> None:
        super()._set_task_info(task_config)
        if self._offline:
            from deskgym.osworld.cache import missing

            gaps = missing(self.cache_dir_base, task_config)
            if gaps:
                raise DeskgymError(
                    "FAILED_PRECONDITION",
                    f"task {self.task_id} (offline): not in the cache: "
                    + "; ".join(f"{url} (put it at {path})" for url, path in gaps),
                )
            return
        self._check_downloads(self.config)

    def _check_downloads(self, config: list[dict[str, Any]]) -> None:
        """A download that is not in OSWorld's cache and cannot be fetched is a clear error
        naming the URL and where to put the file (OSWorld's own step retries, then fails
        with neither)."""
        for step in config:
            if step.get("type") != "download":
                continue
            for f in step["parameters"]["files"]:
                url, path = f["url"], f["path"]
                cached = os.path.join(self.cache_dir, download_name(url, path))
                if os.path.exists(cached):
                    continue
                try:
                    import requests

                    requests.head(url, timeout=5, allow_redirects=True).raise_for_status()
                except Exception as e:
                    raise DeskgymError(
                        "FAILED_PRECONDITION",
                        f"task {self.task_id}: {url} is not cached and cannot be fetched ({type(e).__name__}); "
                        f"put the file at {cached}",
                    ) from None
