"""What the trainer-face tests share: the OpenEnv face served by uvicorn in a thread, and
what an oracle model needs to read a screenshot."""

from __future__ import annotations

import base64
import io
import socket
import threading

import numpy as np
import uvicorn
from PIL import Image

import deskgym.openenv
from deskgym.agents.reference import RED, centroid, mask

#: Small desktops: the tests send screenshots through JSON and chat messages.
SMALL = (320, 240)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """``deskgym.openenv.app`` under uvicorn on a free port, in a thread of this process."""

    def __init__(self, address: str, task: str = "click-target", **kwargs: object) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        app = deskgym.openenv.app(task, address=address, screen=SMALL, **kwargs)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            self.thread.join(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def frame_of(b64_png: str) -> np.ndarray:
    """A base64 PNG (or a ``data:image/png;base64,`` URL) as an (H, W, 3) uint8 array."""
    data = b64_png.split(",", 1)[1] if b64_png.startswith("data:") else b64_png
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))


def target(b64_png: str) -> tuple[int, int]:
    """The centre of click-target's red target in a screenshot."""
    xy = centroid(mask(frame_of(b64_png), RED))
    assert xy is not None, "click-target draws a red target"
    return xy
