"""deskgym servers placed and supervised by Ray (extra ``deskgym[ray]``).

A node offers desktops by advertising the custom resource ``deskgym_desktops`` (how
many it can run), e.g. ``ray start --resources='{"deskgym_desktops": 32}'``. On each
such node :func:`servers` starts (or finds) one :class:`ServerActor`, named per node,
which runs the node's ``deskgym-server`` with ``--max-envs`` set to that resource,
restarts it on the same port when it dies, and takes it down when the actor ends
(the kernel signals the server when its actor's process exits). :func:`make_vec`
returns one vector env over them (:class:`deskgym.fleet.ShardedVectorEnv`), placed by
each server's free capacity.

The server binary is the node's own: ``$DESKGYM_SERVER``, else ``deskgym-server`` on the
``PATH``, else this checkout's ``target/{release,debug}/deskgym-server`` (a wheel does not
carry it: the server needs the node's Xvfb, GStreamer and sandbox tools anyway).
Servers bind the node's address when a token is given (every call then carries it),
else loopback only: a cluster without a token works on one machine, as the tests run it.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from deskgym.errors import DeskgymError
from deskgym.fleet import ShardedVectorEnv

#: The custom resource a node advertises: how many desktops it runs.
RESOURCE = "deskgym_desktops"
#: The Ray namespace the server actors live in.
NAMESPACE = "deskgym"


def find_server_binary() -> str:
    """The node's ``deskgym-server`` (see the module's docs for the order)."""
    env = os.environ.get("DESKGYM_SERVER")
    if env:
        return env
    on_path = shutil.which("deskgym-server")
    if on_path:
        return on_path
    repo = pathlib.Path(__file__).resolve().parents[2]
    built = [p for p in (repo / "target" / prof / "deskgym-server" for prof in ("release", "debug")) if p.exists()]
    if built:
        return str(max(built, key=lambda p: p.stat().st_mtime))
    raise DeskgymError("FAILED_PRECONDITION", "no deskgym-server on this node: set $DESKGYM_SERVER or put it on the PATH")


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the server gets SIGTERM when the actor's process exits, even
    # by SIGKILL (ray.kill), so no server outlives its actor.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class ServerActor:
    """One ``deskgym-server`` on this actor's node, kept running."""

    def __init__(self, max_envs: int, token: str | None = None, args: Sequence[str] = ()) -> None:
        self.binary = find_server_binary()
        self.max_envs = max_envs
        self.token = token
        self.args = list(args)
        self.host = ray.util.get_node_ip_address() if token else "127.0.0.1"  # type: ignore[no-untyped-call]
        self.port = 0
        self.restarts = 0
        self.proc: subprocess.Popen[str] | None = None
        self.token_file: str | None = None
        if token:
            d = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"deskgym-ray-{os.getpid()}"
            d.mkdir(parents=True, exist_ok=True)
            f = d / "token"
            f.write_text(token)
            f.chmod(0o600)
            self.token_file = str(f)
        self.data_dir = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"deskgym-ray-data-{os.getpid()}"
        self._lock = threading.Lock()
        self._stopping = False
        self._start()
        threading.Thread(target=self._watch, name="deskgym-server-watch", daemon=True).start()

    def _start(self) -> None:
        cmd = [self.binary, "--listen", f"{self.host}:{self.port}", "--max-envs", str(self.max_envs),
               "--idle-timeout-s", "600", "--data-dir", str(self.data_dir), *self.args]
        if self.token_file:
            cmd += ["--token-file", self.token_file]
        for _ in range(50):  # the old port may linger a moment after a crash
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, preexec_fn=_die_with_parent)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if "listening on" in line:
                self.port = int(line.strip().rsplit(":", 1)[1])
                self.proc = proc
                return
            proc.wait()
            time.sleep(0.1)
        raise DeskgymError("UNAVAILABLE", f"deskgym-server did not start: {' '.join(cmd)}")

    def _watch(self) -> None:
        while not self._stopping:
            time.sleep(0.2)
            with self._lock:
                if self._stopping or self.proc is None or self.proc.poll() is None:
                    continue
                self.restarts += 1
                self._start()

    def address(self) -> str:
        """``host:port`` of the server (the same across restarts)."""
        return f"{self.host}:{self.port}"

    def info(self) -> dict[str, Any]:
        """Address, pid, restarts, node."""
        return {"address": self.address(), "pid": self.proc.pid if self.proc else None, "restarts": self.restarts,
                "node_id": ray.get_runtime_context().get_node_id(), "max_envs": self.max_envs}

    def kill_server(self) -> int:
        """Kills the server (SIGKILL), as a crash would; the actor restarts it. Returns
        the killed pid."""
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.kill()
        return pid

    def stop(self) -> None:
        """Stops the server (SIGTERM: it drains and closes its desktops)."""
        with self._lock:
            self._stopping = True
            if self.proc and self.proc.poll() is None:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.proc.kill()


def servers(token: str | None = None, args: Sequence[str] = ()) -> list[Any]:
    """One :class:`ServerActor` per node advertising ``deskgym_desktops``, started or found
    (named ``deskgym-server-<node id>`` in namespace ``deskgym``), pinned to its node."""
    if not ray.is_initialized():
        ray.init(namespace=NAMESPACE)
    actors = []
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        n = int(node.get("Resources", {}).get(RESOURCE, 0))
        if not node.get("Alive") or n <= 0:
            continue
        node_id = node["NodeID"]
        actors.append(ServerActor.options(  # type: ignore[attr-defined]
            name=f"deskgym-server-{node_id}", namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(n, token, list(args)))
    if not actors:
        raise DeskgymError("FAILED_PRECONDITION", f"no live Ray node advertises the {RESOURCE!r} resource "
                           "(ray start --resources='{\"deskgym_desktops\": N}')")
    return actors


def make_vec(task: str, num_envs: int, *, token: str | None = None, **kwargs: Any) -> ShardedVectorEnv:
    """A vector env of ``num_envs`` desktops over the cluster's deskgym servers (started
    if needed); keyword arguments as :func:`deskgym.make_vec`."""
    addresses = ray.get([a.address.remote() for a in servers(token)])
    return ShardedVectorEnv(task, num_envs, addresses=addresses, token=token, **kwargs)


def shutdown() -> None:
    """Stops every deskgym server actor of the cluster (their servers drain first)."""
    for node in ray.nodes():  # type: ignore[no-untyped-call]
        try:
            a = ray.get_actor(f"deskgym-server-{node['NodeID']}", namespace=NAMESPACE)
        except ValueError:
            continue
        try:
            ray.get(a.stop.remote(), timeout=60)
        except Exception:  # noqa: BLE001 - a dead actor or node: kill it below regardless
            pass
        ray.kill(a)
