"""Download kingbird.jpeg from Hugging Face and compress it with GIMP to under 600 KB as
~/Desktop/compressed.jpeg. Not solvable offline: no setup step downloads the image (the
agent fetches it from the web), so no cache can hold it."""
from __future__ import annotations

UNSOLVABLE = ("the input image is fetched by the agent from huggingface.co (no setup download a cache could hold); "
              "offline desktops cannot get it")
