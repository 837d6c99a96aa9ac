"""Thunderbird as OSWorld's tasks find it: the profile their archive
(`thunderbird-profile.tar.gz`, not fetchable here) unpacks to
`~/.thunderbird/t5q2a5hp.default-release`, with OSWorld's account in it (the IMAP account
anonym-x2024@outlook.com and Local Folders), so Thunderbird opens on its three-pane
window, not on the account setup the generic stand-in (a profile with no account) shows.
And the acting helpers: Thunderbird's window, its menu bar, a control found by name in
the accessibility tree."""

from __future__ import annotations

import io
import re
import time
import tarfile
from typing import Any

from _common import hotkey, press, put_download, typewrite, until, window

__all__ = ["PROFILE", "a11y_box", "click_named", "context_menu", "config_editor", "main_window", "menu_item", "new_local_folder",
           "profile_archive", "put_profile", "scroll_to", "set_pref"]

#: Where OSWorld's archives unpack the profile (relative to the home).
PROFILE = ".thunderbird/t5q2a5hp.default-release"
ADDRESS = "anonym-x2024@outlook.com"
#: The folder pane's row height (px).
ROW = 28

_PREFS = {
    "mail.shell.checkDefaultClient": False,
    # No start page (live.thunderbird.net): offline, Thunderbird 153 opens it as a second
    # tab, "Server Not Found", a moment after its window shows, and the tab bar that
    # appears then moves every pane down under a click already aimed.
    "mailnews.start_page.enabled": False,
    "mail.accountmanager.accounts": "account1,account2",
    "mail.accountmanager.defaultaccount": "account1",
    "mail.accountmanager.localfoldersserver": "server2",
    "mail.account.account1.identities": "id1",
    "mail.account.account1.server": "server1",
    "mail.account.account2.server": "server2",
    "mail.identity.id1.fullName": "Anonym",
    "mail.identity.id1.useremail": ADDRESS,
    "mail.identity.id1.smtpServer": "smtp1",
    "mail.identity.id1.valid": True,
    "mail.server.server1.directory-rel": "[ProfD]ImapMail/outlook.office365.com",
    "mail.server.server1.hostname": "outlook.office365.com",
    "mail.server.server1.name": ADDRESS,
    "mail.server.server1.port": 993,
    "mail.server.server1.socketType": 3,
    "mail.server.server1.type": "imap",
    "mail.server.server1.userName": ADDRESS,
    # No network here: the account does not try to log in at each start (a failed login
    # is a prompt OSWorld's image, online, does not show).
    "mail.server.server1.login_at_startup": False,
    "mail.server.server1.check_new_mail": False,
    "mail.server.server2.directory-rel": "[ProfD]Mail/Local Folders",
    "mail.server.server2.hostname": "Local Folders",
    "mail.server.server2.name": "Local Folders",
    "mail.server.server2.type": "none",
    "mail.server.server2.userName": "nobody",
    "mail.smtpservers": "smtp1",
    "mail.smtp.defaultserver": "smtp1",
    "mail.smtpserver.smtp1.hostname": "smtp.office365.com",
    "mail.smtpserver.smtp1.port": 587,
    "mail.smtpserver.smtp1.try_ssl": 2,
    "mail.smtpserver.smtp1.username": ADDRESS,
}

_MBOX = ("From - Mon Jan  1 00:00:00 2024\nFrom: Anonym <anonym-x2024@gmail.com>\nTo: {to}\n"
         "Date: Mon, 1 Jan 2024 00:00:00 +0000\nSubject: {subject}\nMessage-ID: <{mid}@example.com>\n\n{body}\n\n")


def _pref_line(key: str, value: Any) -> str:
    v = ("true" if value else "false") if isinstance(value, bool) else str(value) if isinstance(value, int) \
        else '"' + re.sub(r'(["\\])', r"\\\1", value) + '"'
    return f'user_pref("{key}", {v});\n'


def profile_archive() -> bytes:
    """The profile as a .tar.gz of home-relative paths (profiles.ini marking it default)."""
    files = {
        ".thunderbird/profiles.ini": "[Profile0]\nName=default-release\nIsRelative=1\n"
                                     "Path=t5q2a5hp.default-release\nDefault=1\n\n"
                                     "[General]\nStartWithLastProfile=1\nVersion=2\n",
        f"{PROFILE}/prefs.js": "".join(_pref_line(k, v) for k, v in _PREFS.items()),
        f"{PROFILE}/Mail/Local Folders/Inbox": _MBOX.format(to=ADDRESS, subject="Welcome", mid="m1",
                                                            body="A message in the local Inbox."),
        f"{PROFILE}/Mail/Local Folders/Trash": "",
        f"{PROFILE}/ImapMail/outlook.office365.com/INBOX": "",
        f"{PROFILE}/ImapMail/outlook.office365.com/msgFilterRules.dat": 'version="9"\nlogging="no"\n',
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mtime = len(data), 1_700_000_000
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put_profile(cache: Any, task: dict[str, Any]) -> None:
    """The task's profile archive (its only download) as OSWorld's holds it."""
    put_download(cache, task, profile_archive())


def main_window(env: Any, timeout: float = 60) -> Any:
    """Thunderbird's main window once it has its title and takes input."""
    w = until(lambda: window(env, title="Mozilla Thunderbird"), "Thunderbird's window", timeout)
    env.step("WAIT", pause=2.0)
    return w


def a11y_box(env: Any, role: str, name: str) -> tuple[int, int, int, int] | None:
    """The screen box of the first showing ``role`` element named ``name`` (a regex
    matching the whole name) in the accessibility tree, or None."""
    tree = env.controller.get_accessibility_tree() or ""
    pat = rf'<{role} name="({name})"[^>]*cp:screencoord="\((-?\d+), (-?\d+)\)" cp:size="\((\d+), (\d+)\)"'
    for m in re.finditer(pat, tree):
        x, y, w, h = (int(v) for v in m.groups()[-4:])
        if w > 0 and h > 0 and x >= 0 and y >= 0:
            return x, y, w, h
    return None


def click_named(env: Any, role: str, name: str, timeout: float = 30, button: str = "left") -> None:
    """Waits for the control in the accessibility tree and clicks its middle (a tree
    item's own row: an expanded one's box holds its children's rows too)."""
    x, y, w, h = until(lambda: a11y_box(env, role, name), f"{role} {name!r}", timeout, every=1.0)
    dy = min(h // 2, ROW // 2) if role == "tree-item" else h // 2
    env.step(f"pyautogui.click({x + w // 2}, {y + dy}, button={button!r})", pause=1.0)


def context_menu(env: Any, role: str, name: str, item: str, tries: int = 3) -> None:
    """Right-clicks the control and clicks ``item`` in its context menu. Offline,
    Thunderbird opens a "Server Not Found" tab a moment after its start, and the tab bar
    that appears then moves the panes down under a click already aimed: a menu without
    ``item`` (another row's) is closed and the click aimed again."""
    for _ in range(tries):
        click_named(env, role, name, button="right")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 8:
            if a11y_box(env, "menu-item", item):
                click_named(env, "menu-item", item)
                return
            time.sleep(0.5)
        env.step(press("escape"), pause=1.0)
    raise AssertionError(f"no {item!r} in the context menu of {role} {name!r}")


def new_local_folder(env: Any, name: str) -> None:
    """A folder ``name`` under Local Folders: the folder's context menu, New Folder…, the
    name, Enter (what the dialog's default button, Create Folder, does)."""
    context_menu(env, "tree-item", "Local Folders", "New Folder…")
    until(lambda: window(env, title="New Folder"), "the New Folder dialog", 30)
    env.step("WAIT", pause=1.0)
    env.step(typewrite(name + "\n"), pause=1.0)
    until(lambda: not window(env, title="New Folder"), "the New Folder dialog closed", 30)


def menu_item(env: Any, key: str, item: str, tries: int = 3) -> None:
    """Opens a menu of the (hidden) menu bar by its access key, Alt+``key``, and clicks
    ``item`` in it."""
    for _ in range(tries):
        env.step(hotkey("alt", key), pause=1.0)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 8:
            if a11y_box(env, "menu-item", item):
                click_named(env, "menu-item", item)
                return
            time.sleep(0.5)
        env.step(press("escape"), pause=1.0)
    raise AssertionError(f"no {item!r} in the menu Alt+{key} opens")


def scroll_to(env: Any, role: str, name: str, at: tuple[int, int], tries: int = 12) -> None:
    """Scrolls the page under ``at`` down until the control shows on screen."""
    for _ in range(tries):
        if a11y_box(env, role, name):
            return
        env.step(f"pyautogui.moveTo{at}; pyautogui.scroll(-5)", pause=1.0)
    raise AssertionError(f"{role} {name!r} never showed")


def config_editor(env: Any) -> None:
    """Settings (the spaces toolbar's gear), found by "Find in Settings", Config
    Editor…: the Advanced Preferences tab with its search box."""
    click_named(env, "push-button", "Settings")
    click_named(env, "entry", "Find in Settings")
    env.step(typewrite("Config Editor"), pause=1.5)
    click_named(env, "push-button", "Config Editor…")
    until(lambda: a11y_box(env, "entry", "Search preference name"), "the Config Editor", 30)


def set_pref(env: Any, name: str, action: str) -> None:
    """In the Config Editor: ``name`` searched, then its row's ``action`` button
    ("Add" a new boolean, which is true; "Toggle" an existing one)."""
    click_named(env, "entry", "Search preference name")
    env.step(hotkey("ctrl", "a"), pause=0.3)
    env.step(typewrite(name), pause=1.5)
    click_named(env, "push-button", action)
