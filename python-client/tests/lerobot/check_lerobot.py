"""Loads a deskgym LeRobot export with LeRobot's own ``LeRobotDataset`` (offline) and
checks every item: runs in a separate Python >= 3.12 venv with ``lerobot[dataset]``.

    python check_lerobot.py EXPORT_DIR FRAMES_JSON

FRAMES_JSON maps each global index to the recorded PNG (base64) the row's video frame
must match. Prints one JSON line with the counts and the worst mean absolute error.
"""

from __future__ import annotations

import base64
import io
import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402
from PIL import Image  # noqa: E402


def main() -> int:
    root, frames_json = sys.argv[1], sys.argv[2]
    expected = json.loads(open(frames_json).read())
    ds = LeRobotDataset("deskgym/export-check", root=root)
    worst_video, worst_image, n = 0.0, 0.0, 0
    prev_ep, prev_frame = -1, -1
    for i in range(len(ds)):
        item = ds[i]
        ep, frame = int(item["episode_index"]), int(item["frame_index"])
        assert (ep == prev_ep and frame == prev_frame + 1) or (ep == prev_ep + 1 and frame == 0), (i, ep, frame)
        assert abs(float(item["timestamp"]) - frame / ds.fps) < 1e-4, (i, float(item["timestamp"]))
        want = np.asarray(Image.open(io.BytesIO(base64.b64decode(expected[str(i)]))).convert("RGB"), dtype=np.float32)
        img = item["observation.image"].numpy().transpose(1, 2, 0) * 255.0  # CHW float in [0, 1]
        worst_image = max(worst_image, float(np.abs(img - want).mean()))
        if "observation.video" in item:
            vid = item["observation.video"].numpy().transpose(1, 2, 0) * 255.0
            h, w = vid.shape[:2]
            worst_video = max(worst_video, float(np.abs(vid - want[:h, :w]).mean()))
        prev_ep, prev_frame = ep, frame
        n += 1
    print(json.dumps({"items": n, "episodes": ds.num_episodes, "fps": ds.fps,
                      "worst_image_mae": worst_image, "worst_video_mae": worst_video,
                      "has_video": "observation.video" in ds.meta.video_keys, "has_stats": ds.meta.stats is not None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
