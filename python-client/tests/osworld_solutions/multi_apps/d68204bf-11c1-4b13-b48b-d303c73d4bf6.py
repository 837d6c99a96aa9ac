"""Split tilearray.png into three vertical strips and put them in order of warmth (coolest
left, warmest right) as rearranged.png, from the command line: the solution opens the
terminal the setup opened and runs a Python one-liner with Pillow there (OSWorld's image
has python3 with Pillow, as pyautogui needs it). The files are three strips, each a
gradient of one hue (blue, orange, red) in a scrambled order, and the gold the strips in
order blue, orange, red."""
from __future__ import annotations

import io
import pathlib
from typing import Any

from _common import put_cloud, put_download, type_line, wait_window

#: Hues from cool to warm, and the order the input holds them in.
HUES = [(40, 80, 220), (230, 140, 60), (230, 20, 10)]
SCRAMBLED = [1, 2, 0]
W, H = 120, 90


def _strip(rgb: tuple[int, int, int]) -> Any:
    from PIL import Image

    img = Image.new("RGB", (W, H))
    for y in range(H):
        for x in range(W):
            f = 0.4 + 0.6 * ((x * 7 + y * 3) % 40) / 40  # a texture SSIM can see
            img.putpixel((x, y), tuple(int(c * f) for c in rgb))
    return img


def _row(order: list[int]) -> bytes:
    from PIL import Image

    out = Image.new("RGB", (W * 3, H))
    for i, hue in enumerate(order):
        out.paste(_strip(HUES[hue]), (i * W, 0))
    buf = io.BytesIO()
    out.save(buf, format="PNG")
    return buf.getvalue()


def files(cache: pathlib.Path, task: dict) -> None:
    put_download(cache, task, _row(SCRAMBLED))
    put_cloud(cache, "rearranged_gold.png", _row([0, 1, 2]))


#: Warmth of a strip: mean red less mean blue.
SCRIPT = ("from PIL import Image, ImageStat as S; i=Image.open('tilearray.png').convert('RGB'); w=i.width//3; "
          "t=[i.crop((k*w,0,k*w+w,i.height)) for k in range(3)]; "
          "t.sort(key=lambda s:S.Stat(s).mean[0]-S.Stat(s).mean[2]); "
          "o=Image.new('RGB',(w*3,i.height)); [o.paste(s,(k*w,0)) for k,s in enumerate(t)]; o.save('rearranged.png')")


def solve(env: Any) -> None:
    term = wait_window(env, wm_class="Gnome-terminal", timeout=30)
    env.step(f"pyautogui.click({term.x + term.width // 2}, {term.y + term.height // 2})", pause=0.5)
    type_line(env, "cd ~/Desktop", pause=0.5)
    type_line(env, f'python3 -c "{SCRIPT}"', pause=2.0)
