"""VLC's Qt interface as a user drives it: Tools > Preferences (Ctrl+P), "Show settings:
All", the advanced tree filtered by its search box. VLC's Qt widgets are not in the
accessibility tree here (no Qt AT-SPI bridge), so controls are found where the dialog,
maximized on the 1920x1080 screen, shows them (OSWorld's screen size)."""

from __future__ import annotations

import pathlib
import subprocess
import tempfile
from typing import Any

from _common import hotkey, typewrite, until, wait_window, window

__all__ = ["advanced_qt_page", "mp3", "mp4", "player", "preferences", "save_preferences"]


def player(env: Any) -> Any:
    """VLC's main window, once it takes input."""
    return wait_window(env, title="VLC media player", wm_class="vlc", timeout=60, settle=1.5)


def preferences(env: Any) -> Any:
    """The Simple Preferences dialog (Ctrl+P in the player)."""
    w = player(env)
    env.step(f"pyautogui.click({w.x + w.width // 2}, {w.y + w.height // 2})", pause=0.5)
    env.step(hotkey("ctrl", "p"), pause=1.0)
    return wait_window(env, title="Simple Preferences", timeout=30)


def advanced_qt_page(env: Any) -> None:
    """Preferences, "All", maximized, the tree searched for "Qt" and its Qt interface
    page (Interface > Main interfaces > Qt) shown."""
    d = preferences(env)
    env.step(f"pyautogui.click({d.x + 95}, {d.y + d.height - 28})", pause=1.0)  # Show settings: All
    d = wait_window(env, title="Advanced Preferences", timeout=30)
    env.step(f"pyautogui.click({d.x + d.width - 27}, {d.y - 11})", pause=1.0)  # the title bar's maximize
    until(lambda: (w := window(env, title="Advanced Preferences")) and w.width >= 1900, "the dialog maximized", 20)
    env.step("pyautogui.click(400, 47)", pause=0.5)  # the tree's search box
    env.step(typewrite("Qt"), pause=1.5)
    env.step("pyautogui.click(88, 162)", pause=1.5)  # Interface > Main interfaces > Qt


def save_preferences(env: Any) -> None:
    """The dialog's Save (it closes; VLC writes vlcrc)."""
    env.step("pyautogui.click(1783, 1058)", pause=1.5)
    until(lambda: not window(env, title="Preferences"), "the preferences closed", 20)


def _gst(pipeline: str, suffix: str) -> bytes:
    """What ``gst-launch-1.0 PIPELINE ! filesink`` writes (GStreamer is on this machine;
    no ffmpeg)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / f"out{suffix}"
        subprocess.run(["gst-launch-1.0", "-q", *pipeline.split(), "!", "filesink", f"location={out}"],
                       check=True, timeout=120)
        return out.read_bytes()


def mp4(seconds: int = 120) -> bytes:
    """A small H.264 MP4 (320x240, 5 frames/s, a bouncing ball): a stand-in video VLC plays."""
    return _gst(f"videotestsrc num-buffers={seconds * 5} pattern=ball ! video/x-raw,width=320,height=240,"
                "framerate=5/1 ! x264enc ! mp4mux", ".mp4")


def mp3(seconds: int = 120) -> bytes:
    """A sine tone as MP3: a stand-in song VLC plays."""
    return _gst(f"audiotestsrc num-buffers={seconds} samplesperbuffer=44100 ! audioconvert ! lamemp3enc", ".mp3")
