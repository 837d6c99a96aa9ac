"""The HTTP interface OSWorld's controllers and getters call inside its VM, served next
to the harness for one deskgym env and backed by deskgym RPCs.

OSWorld's `PythonController`, `SetupController` and getters talk to
``http://{vm_ip}:{server_port}``; here that is ``127.0.0.1:<port of this bridge>`` on the
harness's machine, and every request becomes a gRPC call to the deskgym server (which may
be on another machine). Answers follow OSWorld's in-VM server (`desktop_env/server/main.py`):
the same paths, JSON shapes and status codes.
"""

from __future__ import annotations

import email.parser
import email.policy
import io
import json
import logging
import posixpath
import shlex
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, quote, unquote

from deskgym.errors import DeskgymError

#: How long an ``activate_window`` step waits for its window to appear (or get its title);
#: it returns as soon as it does. 60 s: code-server's window took over 30 s under a
#: clean-clone CI run with a benchmark beside it.
ACTIVATE_WAIT_S = 60.0

#: The bound of an ``/accessibility`` walk, in ms: the server's most (deskgym's default,
#: 5 s, suits an RL step). OSWorld's controller waits for its whole tree, and Calc's took
#: 3.8 s on a release server with nothing beside it and over 5 s on a debug one, so 5 s
#: would give an OSWorld agent a tree without the spreadsheet on a busy host.
TREE_TIMEOUT_MS = 30_000

logger = logging.getLogger("deskgym.osworld")

HOME = "/home/user"
#: Window names OSWorld's steps use for an app whose build here titles its windows
#: otherwise: the `osworld` profile's `google-chrome` is Debian's Chromium, whose product
#: name ("Chromium") is compiled into every window title where Google's build writes
#: "Google Chrome" (27 tasks activate "Google Chrome" in their setup).
WINDOW_ALIASES = {"Google Chrome": "Chromium"}
#: How long `/execute` commands may run (OSWorld's server uses 120 s).
EXEC_TIMEOUT_S = 120.0
#: How long `/setup/open_file` waits for the file's window.
OPEN_WAIT_S = 30.0
#: Where `/start_recording` writes inside the desktop.
RECORDING = "/tmp/deskgym-recording.mp4"
#: The recorder's sink argument, which also finds its process (`pgrep -f` / `pkill -f`).
RECORDER_MATCH = "location=" + RECORDING
#: The recorder: the screen with the pointer, real time at 10 fps, H.264 in MP4; `-e`
#: finishes the file on SIGINT (OSWorld's server runs ffmpeg the same way at 30 fps).
#: `remote=true`: the sandbox has its own IPC namespace, so MIT-SHM is out of reach, and
#: GStreamer 1.22's ximagesrc without it reads black frames unless it takes its
#: remote-display path (XGetSubImage), which reads the screen.
RECORDER = [
    "gst-launch-1.0", "-q", "-e", "ximagesrc", "use-damage=false", "show-pointer=true", "remote=true",
    "!", "video/x-raw,framerate=10/1", "!", "videoconvert", "!",
    "x264enc", "speed-preset=ultrafast", "tune=zerolatency", "!", "video/x-h264,profile=high", "!",
    "mp4mux", "!", "filesink", RECORDER_MATCH,
]
#: How long `/end_recording` waits for the recorder to finish its file.
RECORDING_FINISH_S = 15.0


def expand(arg: str) -> str:
    """``~/x`` -> ``/home/user/x`` (OSWorld's server expands ``~`` in argv)."""
    return HOME + arg[1:] if arg == "~" or arg.startswith("~/") else arg


def cursor_png(rgb: bytes, width: int, height: int, x: int, y: int) -> bytes:
    """A PNG of raw RGB pixels with the pointer drawn in (OSWorld's `/screenshot` shows
    it; deskgym frames do not). Fast zlib level: the PNG only crosses the loopback."""
    from PIL import Image, ImageDraw

    img = Image.frombytes("RGB", (width, height), rgb)
    d = ImageDraw.Draw(img)
    arrow = [(x, y), (x, y + 17), (x + 4, y + 13), (x + 7, y + 20), (x + 9, y + 19), (x + 6, y + 12), (x + 12, y + 12)]
    d.polygon(arrow, fill=(255, 255, 255), outline=(0, 0, 0))
    out = io.BytesIO()
    img.save(out, format="PNG", compress_level=1)
    return out.getvalue()


@dataclass
class Call:
    """One request the bridge answered: its path, HTTP status and, for a command, the
    command's exit code and stderr."""

    path: str
    status: int = 0
    returncode: int | None = None
    stderr: str = ""
    error: str = ""


class Bridge:
    """One env's OSWorld HTTP interface on ``127.0.0.1:port`` (``port`` 0: a free one)."""

    def __init__(self, env: Any, screen: tuple[int, int], host: str = "127.0.0.1", port: int = 0) -> None:
        self.env = env
        self.screen = screen
        bridge = self

        class Handler(_Handler):
            owner = bridge

        #: While a list, every request is noted in it (:class:`Call`): the env's setup
        #: controller opens one per setup step, to learn what the desktop answered when
        #: OSWorld's step logs a failure and goes on.
        self.trace: list[Call] | None = None
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, name="osworld-bridge", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # -- what the handlers call ---------------------------------------------------

    def execute(self, command: Any, shell: bool, timeout: float = EXEC_TIMEOUT_S) -> dict[str, Any]:
        if shell:
            if not isinstance(command, str):
                command = " ".join(shlex.quote(str(c)) for c in command)
            r = self.env.exec(command, shell=True, timeout=timeout)
        else:
            argv = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
            r = self.env.exec([expand(a) for a in argv], timeout=timeout)
        code = r.exit_code if r.exit_code is not None else -9
        return {"status": "success", "output": r.stdout, "error": r.stderr, "returncode": code}

    def launch(self, command: Any, shell: bool) -> None:
        """Starts a program detached (OSWorld's server `Popen`s it and returns)."""
        if shell or isinstance(command, str):
            line = command if isinstance(command, str) else " ".join(shlex.quote(str(c)) for c in command)
            argv = ["sh", "-c", line]
        else:
            argv = [expand(str(c)) for c in command]
        # setsid -f: its own session, so it outlives this exec; no pipes left open. A
        # program that is not there is an error, as OSWorld's server's Popen raises.
        script = 'command -v "$1" >/dev/null || { echo "$1: not found" >&2; exit 127; }; ' \
                 'exec setsid -f "$@" >/dev/null 2>&1 </dev/null'
        r = self.env.exec(["sh", "-c", script, "sh", *argv], timeout=10)
        if not r.ok:
            raise DeskgymError("FAILED_PRECONDITION", f"cannot launch {argv!r}: {r.stderr.strip()}")

    def tree(self, path: str) -> dict[str, Any]:
        listing = self.env.list_directory(expand(path), depth=8)
        root: dict[str, Any] = {"type": "directory", "name": posixpath.basename(listing.path.rstrip("/")), "children": []}
        dirs = {"": root}
        for e in listing.entries:
            parent = dirs.get(posixpath.dirname(e.path))
            if parent is None:
                continue
            node: dict[str, Any] = {"type": "directory" if e.kind == "dir" else "file", "name": posixpath.basename(e.path)}
            if e.kind == "dir":
                node["children"] = []
                dirs[e.path] = node
            parent["children"].append(node)
        return root

    def terminal_text(self) -> str | None:
        """OSWorld's ``/terminal``: the text of the desktop's terminal, None without one.
        OSWorld's SetupController asks it before every setup and postconfig (to see the
        server is up), so the tree is read only when a terminal's window is there."""
        if not any("terminal" in w.wm_class.lower() for w in self.env.windows()):
            return None
        t = self.env.observe(structured=True)
        terms = [e for e in t if e.role == "terminal"]
        return terms[0].text if terms else None

    def recording(self) -> bool:
        return bool(self.env.exec(["pgrep", "-f", RECORDER_MATCH]).ok)

    def start_recording(self) -> bool:
        """Starts the recorder; False when one runs already (OSWorld answers 400)."""
        if self.recording():
            return False
        self.env.exec(["rm", "-f", RECORDING])
        self.launch(RECORDER, False)
        # Back once the first frame is in the file (10 s at most), so a recording stopped
        # right away still holds the screen rather than no video at all.
        self.env.exec(["sh", "-c", f"for i in $(seq 100); do [ -s {RECORDING} ] && exit 0; sleep 0.1; done"],
                      timeout=15)
        return True

    def end_recording(self) -> bytes | None:
        """Stops the recorder and returns its MP4; None when none was running."""
        if not self.env.exec(["pkill", "-INT", "-f", RECORDER_MATCH]).ok:
            return None
        t0 = time.monotonic()
        while self.recording():
            if time.monotonic() - t0 > RECORDING_FINISH_S:
                self.env.exec(["pkill", "-KILL", "-f", RECORDER_MATCH])
                raise TimeoutError(f"the recorder did not finish its file within {RECORDING_FINISH_S:.0f} s")
            time.sleep(0.1)
        data: bytes = self.env.get_file(RECORDING)
        return data

    def wallpaper(self) -> bytes | None:
        """The file GNOME's background setting names (what OSWorld's server reads on
        Linux); None when it names none."""
        r = self.env.exec(["gsettings", "get", "org.gnome.desktop.background", "picture-uri"])
        uri = r.stdout.strip().strip("'") if r.ok else ""
        if not uri.startswith("file://"):
            return None
        path = unquote(uri[len("file://"):])
        # Files are read from the home and /tmp only: a system wallpaper goes by /tmp.
        if not path.startswith((HOME + "/", "/tmp/")):
            if not self.env.exec(["cp", "--", path, "/tmp/deskgym-wallpaper"]).ok:
                return None
            path = "/tmp/deskgym-wallpaper"
        try:
            data: bytes = self.env.get_file(path)
        except DeskgymError as e:
            if e.code == "NOT_FOUND":
                return None
            raise
        return data

    def change_wallpaper(self, path: str) -> None:
        """Points GNOME's background setting at ``path`` (light and dark), as OSWorld's
        server does; openbox paints no wallpaper, so the screen does not change."""
        path = expand(path)
        if not self.env.exec(["test", "-f", path]).ok:
            raise FileNotFoundError(path)
        uri = "file://" + quote(path)
        for key in ("picture-uri", "picture-uri-dark"):
            r = self.env.exec(["gsettings", "set", "org.gnome.desktop.background", key, uri])
            if not r.ok:
                raise DeskgymError("FAILED_PRECONDITION", f"gsettings set {key}: {r.stderr.strip()}")

    def window_step(self, d: dict[str, Any], activate: bool) -> bool:
        """OSWorld's ``activate_window`` / ``close_window`` (``wmctrl -a`` / ``-c``): whether a
        window was found. A step right after the launch it follows may come before the
        window has its title (code-server's takes ~9 s to be "Visual Studio Code"; a
        terminal is "Terminal" only until bash retitles it, as on OSWorld's Ubuntu), so an
        activation waits for the window (``ACTIVATE_WAIT_S``), and a loose name (not
        ``by_class``, not ``strict``) also matches a window's class, as a user who says
        "the Terminal" means gnome-terminal's. A name in ``WINDOW_ALIASES`` also matches
        with the app's name here in its place ("Google Chrome": Chromium's windows)."""
        name, strict, by_class = d["window_name"], bool(d.get("strict")), bool(d.get("by_class"))
        flag = "-a" if activate else "-c"
        opts = [*(["-x"] if by_class else []), *(["-F"] if strict else [])]
        tries = [(opts, name)]
        if not by_class and not strict:
            tries.append((["-x"], name))
        tries += [(opts, name.replace(theirs, ours)) for theirs, ours in WINDOW_ALIASES.items() if theirs in name]
        deadline = time.monotonic() + (ACTIVATE_WAIT_S if activate else 0)
        while True:
            for opts, title in tries:
                if self.env.exec(["wmctrl", *opts, flag, title]).ok:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.5)

    def open_file(self, path: str) -> None:
        path = expand(path)
        if not self.env.exec(["test", "-e", path]).ok:
            raise FileNotFoundError(path)
        self.launch(["xdg-open", path], False)
        name = posixpath.basename(path)
        t0 = time.monotonic()
        while time.monotonic() - t0 < OPEN_WAIT_S:
            if any(name in w.title for w in self.env.windows()):
                return
            time.sleep(0.3)
        raise TimeoutError(f"no window showed {name!r} within {OPEN_WAIT_S:.0f} s")


class _Handler(BaseHTTPRequestHandler):
    owner: Bridge
    #: The request being answered, while the bridge keeps a trace.
    call: Call | None = None
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, fmt: str, *args: Any) -> None:
        logger.debug("bridge: " + fmt, *args)

    # -- plumbing --------------------------------------------------------------------

    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _json_in(self) -> dict[str, Any]:
        body = self._body()
        ctype = self.headers.get("Content-Type", "")
        if "application/x-www-form-urlencoded" in ctype:
            return {k: v[0] for k, v in parse_qs(body.decode()).items()}
        d: dict[str, Any] = json.loads(body or b"{}")
        return d

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        call = self.call
        if call is not None:
            call.status = code
            if code >= 400:
                call.error = body[:500].decode(errors="replace")
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, obj: Any, code: int = 200) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    def _text(self, text: str, code: int = 200) -> None:
        self._send(code, text.encode(), "text/plain; charset=utf-8")

    def _multipart(self) -> dict[str, tuple[str | None, bytes]]:
        raw = b"Content-Type: " + self.headers.get("Content-Type", "").encode() + b"\r\n\r\n" + self._body()
        msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(raw)
        out: dict[str, tuple[str | None, bytes]] = {}
        for part in msg.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if isinstance(name, str):
                payload = part.get_payload(decode=True)
                out[name] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
        return out

    # -- routes ----------------------------------------------------------------------

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        trace = self.owner.trace
        self.call = None
        if trace is not None:
            # In the trace before the answer goes out: the caller reads it as soon as it
            # has the answer. `_send` notes the status before it writes a byte.
            self.call = Call(path)
            trace.append(self.call)
        try:
            self._answer(method, path)
        finally:
            self.call = None

    def _answer(self, method: str, path: str) -> None:
        b = self.owner
        try:
            if path == "/screenshot":
                shot = b.env.screenshot(encoding="rgb")
                png = cursor_png(shot.frame, shot.width, shot.height, shot.pointer.x, shot.pointer.y)
                self._send(200, png, "image/png")
            elif path == "/accessibility":
                t = b.env.observe(structured=True, osworld_xml=True, timeout_ms=TREE_TIMEOUT_MS)
                self._json({"AT": t.osworld_xml})
            elif path == "/terminal":
                self._json({"output": b.terminal_text()})
            elif path in ("/execute", "/setup/execute") and method == "POST":
                d = self._json_in()
                shell = bool(d.get("shell", False))
                r = b.execute(d.get("command", "" if shell else []), shell)
                if self.call is not None:
                    self.call.returncode, self.call.stderr = r["returncode"], r["error"][-2000:]
                self._json(r)
            elif path == "/setup/launch" and method == "POST":
                d = self._json_in()
                b.launch(d.get("command", ""), bool(d.get("shell", False)))
                self._text("Application launched successfully")
            elif path == "/setup/upload" and method == "POST":
                form = self._multipart()
                target = form.get("file_path", (None, b""))[1].decode()
                data = form.get("file_data", (None, b""))[1]
                if not target:
                    self._text("file_path is missing", 400)
                    return
                target = expand(target)
                b.env.exec(["mkdir", "-p", posixpath.dirname(target)])
                b.env.put_file(target, data)
                self._text("File Uploaded")
            elif path == "/setup/open_file" and method == "POST":
                b.open_file(self._json_in()["path"])
                self._text("File opened successfully")
            elif path in ("/setup/activate_window", "/setup/close_window") and method == "POST":
                d = self._json_in()
                ok = b.window_step(d, path.endswith("activate_window"))
                self._text("Window activated" if ok else f"Window {d['window_name']!r} not found", 200 if ok else 404)
            elif path == "/file" and method == "POST":
                fp = expand(self._json_in().get("file_path", ""))
                try:
                    self._send(200, b.env.get_file(fp), "application/octet-stream")
                except DeskgymError as e:
                    self._text(f"File not found: {e.message}", 404)
            elif path == "/list_directory" and method == "POST":
                self._json({"directory_tree": b.tree(self._json_in()["path"])})
            elif path == "/screen_size":
                w, h = b.screen
                self._json({"width": w, "height": h})
            elif path == "/window_size" and method == "POST":
                cls = self._json_in().get("app_class_name", "")
                ws = [w for w in b.env.windows() if cls.lower() in w.wm_class.lower()]
                if not ws:
                    self._text(f"no window of class {cls!r}", 404)
                else:
                    self._json({"width": ws[0].width, "height": ws[0].height})
            elif path == "/start_recording" and method == "POST":
                if b.start_recording():
                    self._text("Started recording.")
                else:
                    self._text("Recording is already in progress.", 400)
            elif path == "/end_recording" and method == "POST":
                video = b.end_recording()
                if video is None:
                    self._text("No recording in progress to stop.", 400)
                else:
                    self._send(200, video, "video/mp4")
            elif path == "/wallpaper" and method == "POST":
                image = b.wallpaper()
                if image is None:
                    self._text("Wallpaper file not found.", 404)
                else:
                    self._send(200, image, "application/octet-stream")
            elif path == "/setup/change_wallpaper" and method == "POST":
                b.change_wallpaper(self._json_in().get("path", ""))
                self._text("Wallpaper changed successfully")
            elif path == "/desktop_path":
                self._json({"desktop_path": f"{HOME}/Desktop"})
            elif path == "/platform":
                self._text("Linux")
            elif path == "/cursor_position":
                p = b.env.screenshot(encoding="jpeg", max_long_edge=16).pointer
                self._json([p.x, p.y])
            elif path == "/run_python" and method == "POST":
                r = b.execute(["python3", "-c", self._json_in().get("code", "")], False)
                ok = r["returncode"] == 0
                self._json({"status": "success" if ok else "error", "message": "" if ok else r["error"],
                            "output": r["output"], "error": r["error"], "return_code": r["returncode"]})
            elif path == "/run_bash_script" and method == "POST":
                d = self._json_in()
                script = d.get("script", "")
                cwd = d.get("working_dir")
                line = (f"cd {shlex.quote(expand(cwd))} && " if cwd else "") + script
                r = b.execute(["bash", "-c", line], False, timeout=float(d.get("timeout", 30)))
                self._json({"status": "success" if r["returncode"] == 0 else "error", "output": r["output"],
                            "error": r["error"], "returncode": r["returncode"]})
            else:
                self._text(f"{method} {path} is not served by deskgym's OSWorld bridge", 404)
        except FileNotFoundError as e:
            self._text(f"not found: {e}", 404)
        except Exception as e:  # an answer, never a dropped connection: OSWorld retries on 5xx
            logger.warning("bridge %s %s failed: %s", method, path, e)
            self._json({"status": "error", "message": str(e)}, 500)
