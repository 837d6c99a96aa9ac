"""Install VS Code's lisp extension (mattn.lisp) and write a Script-Fu script resizing
character.png to 128x128 as resized.png. Not solvable offline: the extension comes from
the marketplace (code-server's is Open VSX), which an offline desktop cannot reach, and
the metric checks `code --list-extensions` for mattn.lisp."""
from __future__ import annotations

UNSOLVABLE = ("the metric wants the mattn.lisp extension installed, which only the marketplace (Open VSX for "
              "code-server) serves: the desktop is offline")
