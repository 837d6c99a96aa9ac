"""Set up the Outlook account anonym-x2024@outlook.com in Thunderbird with its password
("password"), finishing the setup even where the login fails.

Unsolvable here: the metric decrypts the profile's saved logins (`firefox_decrypt.py`)
and wants the IMAP and SMTP servers' logins with the password. Debian's Thunderbird 153
sets an account up in its Account Hub, which asks for the password only once a server
has answered the manual configuration's test; offline no server answers, so the account
can only be made through "Advanced config", which saves no login, and the Saved Logins
dialog has no way to add one (tried by hand, 2026-12-07). OSWorld's Thunderbird 115
wizard takes the password on its first page and saves it with the account, answered or
not. (The evaluation's `firefox_decrypt.py` is fetched from GitHub; offline its stand-in
prints no logins either.)"""

from __future__ import annotations

UNSOLVABLE = ("offline, Thunderbird 153's Account Hub asks for the password only after a server answers; "
              "\"Advanced config\" makes the account without a saved login, which the metric decrypts and needs")
