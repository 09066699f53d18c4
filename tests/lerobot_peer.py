"""Runs inside the LeRobot 0.4.4 side venv (never in robot_rl's): LeRobot is the real client that
test_lerobot_compat.py checks robot_rl's datasets against. Imports nothing from robot_rl.

Usage: python lerobot_peer.py REQUEST.json; the request is a list of jobs, each one of

- ``{"op": "load", "root": DIR, "out": NPZ, "indices": [...], "delta_timestamps": {key: [s, ...]}}``:
  open ``LeRobotDataset`` (torchcodec video backend), write to NPZ every non-video column of every row
  (``col/<key>``, from LeRobot's own parquet loading), each requested item ``item/<i>/<key>`` (tensors as
  arrays, ``_is_pad`` included) and ``meta`` (JSON: num_frames, num_episodes, fps, the tasks of the items);
- ``{"op": "delete", "root": DIR, "episodes": [...], "out": DIR}``: ``dataset_tools.delete_episodes``;
- ``{"op": "split", "root": DIR, "splits": {name: [...]}, "out": DIR}``: ``dataset_tools.split_dataset``;
- ``{"op": "merge", "roots": [DIR, ...], "out": DIR}``: ``dataset_tools.merge_datasets``.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import lerobot_tv_shim  # noqa: E402,F401  - before anything imports torchvision (see the peer README)
import numpy as np  # noqa: E402
from lerobot.datasets import dataset_tools  # noqa: E402
from lerobot.datasets.lerobot_dataset import LeRobotDataset  # noqa: E402


def _open(root: str, delta_timestamps: dict | None = None) -> LeRobotDataset:
    return LeRobotDataset(
        "local/" + os.path.basename(root.rstrip("/")),
        root=root,
        video_backend="torchcodec",
        delta_timestamps=delta_timestamps or None,
    )


def _load(job: dict) -> None:
    ds = _open(job["root"], job.get("delta_timestamps"))
    out: dict[str, np.ndarray] = {}
    table = ds.hf_dataset.with_format(None).data.table  # LeRobot's loaded parquet rows, in its order
    video_keys = set(ds.meta.video_keys)
    for key in table.column_names:
        if key in video_keys:
            continue
        column = table.column(key).combine_chunks()
        values = column.to_numpy(zero_copy_only=False)
        if values.dtype == object:
            values = np.stack([np.asarray(v) for v in values])
        out[f"col/{key}"] = values
    tasks = []
    for i in job.get("indices", []):
        item = ds[int(i)]
        tasks.append(item.pop("task"))
        for key, value in item.items():
            if hasattr(value, "numpy"):
                out[f"item/{i}/{key}"] = value.numpy()
    meta = {"num_frames": ds.num_frames, "num_episodes": ds.num_episodes, "fps": ds.fps, "tasks": tasks}
    out["meta"] = np.array(json.dumps(meta))
    np.savez(job["out"], **out)


def main() -> None:
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    for job in jobs:
        op = job["op"]
        if op == "load":
            _load(job)
        elif op == "delete":
            dataset_tools.delete_episodes(_open(job["root"]), job["episodes"], output_dir=job["out"])
        elif op == "split":
            dataset_tools.split_dataset(_open(job["root"]), job["splits"], output_dir=job["out"])
        elif op == "merge":
            sources = [_open(root) for root in job["roots"]]
            dataset_tools.merge_datasets(sources, "local/merged", output_dir=job["out"])
        else:
            raise SystemExit(f"unknown op {op!r}")
        print("done", op, flush=True)


if __name__ == "__main__":
    main()
