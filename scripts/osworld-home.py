#!/usr/bin/env python3
"""Builds the `osworld` profile's home once per machine: the state OSWorld's snapshot
holds because each application there has been started once (docs/osworld-home.md).

Every application runs here, headless or on a private 1280x720 Xvfb, in a bubblewrap
sandbox whose /home/user is the template being built (HOME=/home/user, uid 1000), so
the files are the ones this machine's builds write and every path in them says
/home/user. Nothing is copied from another machine or typed in by hand; the few
settings OSWorld's image documents (LibreOffice's default formats, no tip of the day)
are set through the application itself (LibreOffice's configuration API) or edited
into the file the application just wrote (GIMP's window geometry, the profile that
Thunderbird's profiles.ini marks default). Big caches the applications leave (GPU
shader caches, crash reports, locks) are trimmed: every reset copies this tree.

Usage: scripts/osworld-home.py [--out DIR]   (default /var/lib/deskgym/homes/osworld,
where the bundled catalog's `osworld` profile reads it). Safe to run again: the new
home replaces the old one only once it is whole.
"""

from __future__ import annotations

import argparse
import configparser
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

DEFAULT_OUT = "/var/lib/deskgym/homes/osworld"
HOME = "/home/user"
BUS = "unix:path=/run/user/1000/bus"
SCREEN = (1280, 720)
CODE_SERVER = "/usr/local/lib/code-server/out/node/entry.js"

#: The environment of the profile's sandboxes (server/profiles/catalog.toml, `desktop`).
ENV = {
    "HOME": HOME, "USER": "user", "LOGNAME": "user", "SHELL": "/bin/bash",
    "PATH": f"{HOME}/.local/bin:/usr/local/bin:/usr/bin:/bin", "XDG_RUNTIME_DIR": "/run/user/1000",
    "DISPLAY": ":0", "DBUS_SESSION_BUS_ADDRESS": BUS, "LANG": "en_US.UTF-8", "LC_ALL": "en_US.UTF-8",
    "GSETTINGS_BACKEND": "dconf", "SAL_USE_VCLPLUGIN": "gtk3", "XDG_SESSION_TYPE": "x11",
    "XDG_CURRENT_DESKTOP": "openbox", "MOZ_LEGACY_PROFILES": "1",
    # Chromium's own sandbox cannot start in a user namespace (the server's sandboxes add
    # the same flags through /etc/chromium.d, which Debian's launcher appends to this).
    "CHROMIUM_FLAGS": "--no-sandbox --test-type",
}

#: What the applications leave that is big, per-run or useless in a fresh home.
TRIM = [
    ".dbus", ".xsession-errors", ".cache/fontconfig", ".cache/mesa_shader_cache", ".cache/google-chrome",
    ".cache/thunderbird", ".cache/vlc", ".cache/code-server", ".cache/dconf", ".cache/gstreamer-1.0",
    ".config/google-chrome/GPUCache", ".config/google-chrome/GPUPersistentCache",
    ".config/google-chrome/GrShaderCache", ".config/google-chrome/ShaderCache",
    ".config/google-chrome/Crashpad", ".config/google-chrome/component_crx_cache",
    ".config/google-chrome/extensions_crx_cache", ".config/google-chrome/Safe Browsing",
    ".config/google-chrome/SingletonCookie", ".config/google-chrome/SingletonLock",
    ".config/google-chrome/SingletonSocket", ".config/google-chrome/Default/GPUCache",
    ".config/google-chrome/Default/DawnGraphiteCache", ".config/google-chrome/Default/DawnWebGPUCache",
    ".config/google-chrome/Default/Cache", ".config/google-chrome/Default/Code Cache",
    ".config/google-chrome/Default/Sessions", ".config/google-chrome/Default/LOCK",
    ".thunderbird/Crash Reports", ".thunderbird/Pending Pings",
    ".config/GIMP/2.10/CrashLog/*", ".config/GIMP/2.10/tmp/*", ".config/GIMP/2.10/backups/*",
    ".config/libreoffice/4/user/crash", ".config/libreoffice/4/user/.lock",
    ".config/Code/logs", ".config/Code/CachedData", ".config/Code/Crashpad", ".local/share/code-server",
    # code-server's own config (a generated password; the `code` wrapper passes --auth none).
    ".config/code-server", ".cache/Microsoft", ".cache/openbox", ".cache/gegl-0.4",
    # Chromium's crash reporter's folder under its own name, beside Chrome's profile.
    ".config/chromium",
]
#: Per-profile leftovers of Thunderbird (the profile's folder name is made here).
TRIM_THUNDERBIRD = ["lock", ".parentlock", "crashes", "minidumps", "datareporting", "saved-telemetry-pings"]

#: Chromium names its accessibility tree's application "Chromium" (its build's product
#: name, compiled in); Google's build says "Google Chrome", which OSWorld's getters look
#: for (the address bar under `application[name=Google Chrome]`). This library, preloaded
#: by the osworld profile's `google-chrome` (server/profiles/catalog.toml), gives the
#: application node the name in $DESKGYM_ATK_APP_NAME; every other node keeps its own.
ATK_APP_NAME_SO = ".local/lib/deskgym/atk-app-name.so"
ATK_APP_NAME_C = r"""/* Names the AT-SPI application of the process $DESKGYM_ATK_APP_NAME (deskgym's
   google-chrome: Chromium says "Chromium", its build's product name, where Google's
   build says "Google Chrome", which OSWorld's getters look for). Loaded with
   LD_PRELOAD; every other object keeps the name the application gives it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef struct _AtkObject AtkObject;

const char *atk_object_get_name(AtkObject *obj) {
    static const char *(*real)(AtkObject *);
    static int (*role_of)(AtkObject *);
    static int application = -1;
    if (!real) {
        real = (const char *(*)(AtkObject *))dlsym(RTLD_NEXT, "atk_object_get_name");
        role_of = (int (*)(AtkObject *))dlsym(RTLD_NEXT, "atk_object_get_role");
        int (*role_for_name)(const char *) = (int (*)(const char *))dlsym(RTLD_NEXT, "atk_role_for_name");
        if (role_for_name) application = role_for_name("application");
    }
    const char *name = real ? real(obj) : NULL;
    const char *want = getenv("DESKGYM_ATK_APP_NAME");
    if (want && *want && role_of && application >= 0 && role_of(obj) == application) return want;
    return name;
}
"""


def log(msg: str) -> None:
    print(f"osworld-home: {msg}", file=sys.stderr, flush=True)


# -- outside: the sandbox, the trim, the swap ----------------------------------------------


#: Where the sandbox sees this script (its private /run).
INSIDE_SCRIPT = "/run/deskgym-osworld-home.py"


def sandbox_argv(work: pathlib.Path, etc: pathlib.Path) -> list[str]:
    """bwrap with `work` as /home/user, as the server's sandboxes see it (uid 1000, own
    pid, IPC and network namespaces, the system read-only, private /tmp and /run)."""
    argv = ["bwrap", "--unshare-user", "--uid", "1000", "--gid", "1000", "--unshare-pid", "--unshare-ipc",
            "--unshare-net", "--unshare-uts", "--hostname", "deskgym", "--die-with-parent",
            "--ro-bind", "/", "/", "--tmpfs", "/home", "--bind", str(work), HOME, "--tmpfs", "/tmp",
            "--tmpfs", "/run", "--dir", "/run/user/1000", "--dev", "/dev", "--proc", "/proc",
            "--ro-bind", str(etc / "passwd"), "/etc/passwd", "--ro-bind", str(etc / "group"), "/etc/group",
            # This script, wherever the checkout is (one under /tmp is hidden by the tmpfs).
            "--ro-bind", os.path.abspath(__file__), INSIDE_SCRIPT]
    argv += ["--clearenv", "--chdir", HOME]
    for k, v in ENV.items():
        argv += ["--setenv", k, v]
    return argv


def trim(home: pathlib.Path) -> None:
    for pattern in TRIM:
        for p in home.glob(pattern):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
    for prof in home.glob(".thunderbird/*.default*"):
        for name in TRIM_THUNDERBIRD:
            p = prof / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            elif p.exists() or p.is_symlink():
                p.unlink()
    # Empty folders left in the home's top level (a first start's working directory).
    for p in home.iterdir():
        if p.is_dir() and not p.name.startswith(".") and not any(p.iterdir()):
            p.rmdir()
    # Sockets and dangling links (a crashed process's) are nothing a new home can use.
    for p in home.rglob("*"):
        if p.is_socket() or (p.is_symlink() and not p.exists()):
            p.unlink()


def atk_app_name(home: pathlib.Path) -> None:
    """Compiles ATK_APP_NAME_C into the home (this host's compiler and libatk's ABI)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        log("warning: no C compiler: Chrome's accessibility tree keeps the name Chromium")
        return
    out = home / ATK_APP_NAME_SO
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as t:
        c = pathlib.Path(t, "atk-app-name.c")
        c.write_text(ATK_APP_NAME_C)
        r = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", str(out), str(c)],
                           capture_output=True, text=True)
    if r.returncode != 0:
        log(f"warning: compiling {ATK_APP_NAME_SO} failed: {r.stderr.strip()[-300:]}")
        out.unlink(missing_ok=True)


def build(out: pathlib.Path) -> None:
    for prog in ("bwrap", "Xvfb", "dbus-daemon"):
        if not shutil.which(prog):
            sys.exit(f"osworld-home: {prog} not found: run scripts/setup.sh --osworld first")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = out.with_name(out.name + ".building")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    # A home as `useradd -m` makes it on OSWorld's image: /etc/skel's dotfiles.
    shutil.copytree("/etc/skel", work, dirs_exist_ok=True)
    with tempfile.TemporaryDirectory() as t:
        etc = pathlib.Path(t)
        (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/bash\n")
        (etc / "group").write_text("root:x:0:\nuser:x:1000:\n")
        t0 = time.monotonic()
        r = subprocess.run([*sandbox_argv(work, etc), "/usr/bin/python3", INSIDE_SCRIPT, "--inside"],
                           stdin=subprocess.DEVNULL, timeout=600)
        if r.returncode != 0:
            sys.exit(f"osworld-home: building in the sandbox failed (exit {r.returncode}); {work} kept")
        log(f"apps ran in {time.monotonic() - t0:.1f} s")
    trim(work)
    atk_app_name(work)
    # Readable by every sandbox's user (the server copies it into each profile template).
    for p in [work, *work.rglob("*")]:
        if not p.is_symlink():
            p.chmod((p.stat().st_mode & 0o7777) | (0o755 if p.is_dir() else 0o644))
    old = out.with_name(out.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if out.exists():
        out.rename(old)
    work.rename(out)
    shutil.rmtree(old, ignore_errors=True)
    files = [p for p in out.rglob("*") if p.is_file()]
    log(f"{out}: {len(files)} files, {sum(p.stat().st_size for p in files) / 1e6:.1f} MB")


# -- inside the sandbox: each application once ---------------------------------------------


def wait_for(pred, what: str, timeout: float) -> bool:
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            log(f"warning: no {what} within {timeout:.0f} s")
            return False
        time.sleep(0.2)
    return True


def stop(p: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM (the applications here save their state on it), then SIGKILL."""
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def run(argv: list[str], timeout: float = 120) -> None:
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=timeout, text=True)
    if r.returncode != 0:
        log(f"warning: {' '.join(argv)} exited {r.returncode}: {r.stderr.strip()[-300:]}")


def session() -> list[subprocess.Popen]:
    """The display, the session bus and the window manager, as a profile's session."""
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    xvfb = subprocess.Popen(["Xvfb", ":0", "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24", "-nolisten", "tcp"],
                            **quiet)
    wait_for(lambda: os.path.exists("/tmp/.X11-unix/X0"), "X display", 20)
    bus = subprocess.Popen(["dbus-daemon", "--session", f"--address={BUS}", "--nofork", "--nopidfile"], **quiet)
    wait_for(lambda: os.path.exists("/run/user/1000/bus"), "session bus", 20)
    wm = subprocess.Popen(["openbox"], **quiet)
    return [wm, bus, xvfb]


def gsettings() -> None:
    """The GNOME settings OSWorld's image sets (its server README): the accessibility
    toolkit on, the screen never blanking; and no animations or blinking carets."""
    for schema, key, value in [("org.gnome.desktop.interface", "toolkit-accessibility", "true"),
                               ("org.gnome.desktop.session", "idle-delay", "uint32 0"),
                               ("org.gnome.desktop.screensaver", "lock-enabled", "false"),
                               # What the catalog's settings.ini says for GTK (decision 189),
                               # for apps that read GNOME's settings themselves.
                               ("org.gnome.desktop.interface", "enable-animations", "false"),
                               ("org.gnome.desktop.interface", "cursor-blink", "false")]:
        run(["gsettings", "set", schema, key, value])


LO_SETTINGS = r'''
import sys, time, uno
from com.sun.star.beans import PropertyValue
local = uno.getComponentContext()
resolver = local.ServiceManager.createInstanceWithContext("com.sun.star.bridge.UnoUrlResolver", local)
for _ in range(300):
    try:
        ctx = resolver.resolve("uno:pipe,name=deskgym-home;urp;StarOffice.ComponentContext")
        break
    except Exception:
        time.sleep(0.2)
else:
    sys.exit("LibreOffice did not answer")
smgr = ctx.ServiceManager
cp = smgr.createInstanceWithContext("com.sun.star.configuration.ConfigurationProvider", ctx)
def node(path):
    arg = PropertyValue(); arg.Name = "nodepath"; arg.Value = path
    return cp.createInstanceWithArguments("com.sun.star.configuration.ConfigurationUpdateAccess", (arg,))
# OSWorld's image saves in Microsoft's formats by default (its server README).
factories = node("/org.openoffice.Setup/Office/Factories")
for doc, flt in [("com.sun.star.text.TextDocument", "MS Word 2007 XML"),
                 ("com.sun.star.sheet.SpreadsheetDocument", "Calc MS Excel 2007 XML"),
                 ("com.sun.star.presentation.PresentationDocument", "Impress MS PowerPoint 2007 XML")]:
    factories.getByName(doc).setPropertyValue("ooSetupFactoryDefaultFilter", flt)
factories.commitChanges()
# An office started before: no tip of the day, no first-start "what's new" bar.
misc = node("/org.openoffice.Office.Common/Misc")
misc.setPropertyValue("ShowTipOfTheDay", False)
misc.setPropertyValue("FirstRun", False)
misc.commitChanges()
# Typed text lands as typed, whatever the typing speed (decision 188; the `desktop`
# profile's registrymodifications.xcu says the same where there is no home base): no
# word completion in Writer, no AutoInput in Calc, no AutoCorrect "While Typing".
for path, prop in [("/org.openoffice.Office.Writer/AutoFunction/Completion", "Enable"),
                   ("/org.openoffice.Office.Writer/AutoFunction/Format/ByInput", "Enable"),
                   ("/org.openoffice.Office.Calc/Input", "AutoInput")]:
    n = node(path)
    n.setPropertyValue(prop, False)
    n.commitChanges()
product = node("/org.openoffice.Setup/Product")
version = product.getPropertyValue("ooSetupVersion")
product.setPropertyValue("ooSetupLastVersion", version)
product.commitChanges()
import os
try:
    smgr.createInstanceWithContext("com.sun.star.frame.Desktop", ctx).terminate()
except Exception:
    pass  # the office went away under the call: it has stopped, its settings saved
os._exit(0)  # (the bridge can crash on interpreter exit once its office is gone)
'''


def libreoffice() -> None:
    """A first start (the user profile with registrymodifications.xcu), then OSWorld's
    settings through LibreOffice's own configuration API, which writes them."""
    run(["libreoffice", "--headless", "--terminate_after_init"])
    office = subprocess.Popen(["soffice", "--headless", "--invisible", "--norestore", "--nologo",
                               "--accept=pipe,name=deskgym-home;urp;"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run(["/usr/bin/python3", "-c", LO_SETTINGS], timeout=120)
        office.wait(60)
    finally:
        stop(office)


def gimp() -> None:
    """A first start with its windows (plug-ins queried: pluginrc; sessionrc, gimprc),
    quit from Script-Fu; then the image window placed on the 1280x720 screen: GIMP
    saved it where it first put it, mostly below the screen (y 620 of 720)."""
    run(["gimp", "--no-splash", "-b", "(gimp-quit 0)"], timeout=300)
    rc = pathlib.Path(HOME, ".config/GIMP/2.10/sessionrc")
    if not rc.exists():
        log("warning: GIMP wrote no sessionrc")
        return
    text = rc.read_text()
    w, h = SCREEN

    def place(m: re.Match) -> str:
        return f'{m.group(1)}(position 0 0)\n    (size {w} {h})'

    text = re.sub(r'(\(factory-entry "gimp-single-image-window"\)\s*)\(position -?\d+ -?\d+\)\s*\(size \d+ \d+\)',
                  place, text)
    text = re.sub(r'(\(factory-entry "gimp-empty-image-window"\)\s*)\(position -?\d+ -?\d+\)\s*\(size \d+ \d+\)',
                  lambda m: f"{m.group(1)}(position 0 0)\n    (size 640 480)", text)
    rc.write_text(text)


def vlc() -> None:
    """The Qt interface started once (its settings, the media library), without the
    first-start privacy question (the catalog's vlcrc answers it in every home)."""
    run(["vlc", "--no-qt-privacy-ask", "--no-metadata-network-access", "vlc://quit"], timeout=60)


def thunderbird() -> None:
    """A profile made by Thunderbird (-CreateProfile), started once headless, and marked
    default in profiles.ini (the profile MOZ_LEGACY_PROFILES starts on)."""
    prof = pathlib.Path(HOME, ".thunderbird", "deskgym.default-release")
    run(["thunderbird", "--headless", "-CreateProfile", f"default-release {prof}"], timeout=60)
    p = subprocess.Popen(["thunderbird", "--headless", "-P", "default-release"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checkpoints = prof / "sessionCheckpoints.json"
    wait_for(lambda: checkpoints.exists() and "final-ui-startup" in checkpoints.read_text(), "Thunderbird start", 90)
    # Its address book, calendar and message index come a little after the start.
    wait_for(lambda: all((prof / f).exists() for f in ("abook.sqlite", "global-messages-db.sqlite")),
             "Thunderbird's databases", 30)
    time.sleep(2)
    stop(p, 30)
    ini = pathlib.Path(HOME, ".thunderbird", "profiles.ini")
    cfg = configparser.ConfigParser()
    cfg.optionxform = str  # Mozilla's keys are case-sensitive
    cfg.read(ini)
    for s in cfg.sections():
        if s.startswith("Profile") and cfg[s].get("Name") == "default-release":
            cfg[s]["Default"] = "1"
    with ini.open("w") as f:
        cfg.write(f, space_around_delimiters=False)


def chrome() -> None:
    """Chromium started once on Chrome's profile directory (what `google-chrome` uses)."""
    data = pathlib.Path(HOME, ".config/google-chrome")
    p = subprocess.Popen(["chromium", "--headless=new", f"--user-data-dir={data}", "--no-first-run",
                          "--no-default-browser-check", "--disable-background-networking",
                          "--disable-component-update", "--disable-sync", "--password-store=basic", "about:blank"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: (data / "Default" / "Preferences").exists() and (data / "Local State").exists(),
             "Chrome profile", 60)
    time.sleep(2)
    stop(p)


def code() -> None:
    """code-server's first start with VS Code's directories (as the `code` wrapper
    starts it): ~/.config/Code/User exists before any task writes settings.json."""
    if not os.path.exists(CODE_SERVER):
        log(f"warning: {CODE_SERVER} missing (scripts/install-code-server.sh): no VS Code state")
        return
    data, ext = f"{HOME}/.config/Code", f"{HOME}/.vscode/extensions"
    p = subprocess.Popen(["node", CODE_SERVER, "--user-data-dir", data, "--extensions-dir", ext, "--auth", "none",
                          "--bind-addr", "127.0.0.1:8999", "--disable-telemetry", "--disable-update-check",
                          "--disable-workspace-trust", "--disable-getting-started-override"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import urllib.request

    def up() -> bool:
        try:
            urllib.request.urlopen("http://127.0.0.1:8999/healthz", timeout=1)
            return True
        except OSError:
            return False

    if wait_for(up, "code-server", 120):
        # The workbench page, as the editor's window loads it first.
        try:
            urllib.request.urlopen("http://127.0.0.1:8999/", timeout=30).read()
        except OSError as e:
            log(f"warning: code-server's page: {e}")
        time.sleep(2)
    stop(p)
    # VS Code's first start makes these; a settings.json only once the user sets something
    # (tasks test for its absence), so none is left here.
    pathlib.Path(data, "User").mkdir(parents=True, exist_ok=True)
    pathlib.Path(ext).mkdir(parents=True, exist_ok=True)
    pathlib.Path(data, "User", "settings.json").unlink(missing_ok=True)


def files_and_terminal() -> None:
    """The file manager's and the terminal's first starts (their config files)."""
    fm = subprocess.Popen(["pcmanfm", HOME], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: os.path.exists(f"{HOME}/.config/libfm/libfm.conf"), "file manager settings", 30)
    time.sleep(1)
    stop(fm)
    run(["gnome-terminal", "--wait", "--", "true"], timeout=60)


def inside() -> None:
    procs = session()
    steps = [gsettings, libreoffice, gimp, vlc, thunderbird, chrome, code, files_and_terminal]
    try:
        for step in steps:
            t0 = time.monotonic()
            step()
            log(f"{step.__name__}: {time.monotonic() - t0:.1f} s")
    finally:
        for p in procs:
            stop(p, 5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"where the home goes (default {DEFAULT_OUT})")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.inside:
        inside()
    else:
        build(pathlib.Path(a.out).absolute())


if __name__ == "__main__":
    main()
