"""An OSWorld-style in-desktop action server, written here as the baseline deskgym is
compared against. Like OSWorld's in-VM server it executes each action by spawning
``python -c "import pyautogui; pyautogui.click(x, y)"`` and answers a screenshot
request with a PNG of the screen (PIL ``ImageGrab``, the path an Ubuntu OSWorld VM takes).

    DISPLAY=:5 XAUTHORITY=<the display's -auth file> python osworld_baseline.py PORT
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import ImageGrab


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Without this, keep-alive requests stall ~40 ms on Nagle + delayed ACK (FACTS.md).
    disable_nagle_algorithm = True

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, body: bytes, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # /execute {"command": "pyautogui.click(x, y)"}
        n = int(self.headers.get("Content-Length", 0))
        cmd = json.loads(self.rfile.read(n))["command"]
        r = subprocess.run([sys.executable, "-c", f"import pyautogui; {cmd}"], capture_output=True, text=True)
        self._reply(json.dumps({"returncode": r.returncode, "error": r.stderr[-500:]}).encode(), "application/json")

    def do_GET(self) -> None:  # /screenshot
        img = ImageGrab.grab()
        buf = io.BytesIO()
        img.save(buf, format="PNG")
        self._reply(buf.getvalue(), "image/png")


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()
