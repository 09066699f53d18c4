"""LeRobot 0.4.4's training loader on a dataset, for the side-by-side row of ``bench_loader.py``.

Runs only in the LeRobot side venv (``../shared/peers/lerobot/setup.sh``), never in robot_rl's: it imports
LeRobot. Shuffled batches of ``--batch-size`` items through ``torch.utils.data.DataLoader`` over
``LeRobotDataset(video_backend="torchcodec")``, each item one frame of every camera at native resolution
(float32 (3, H, W) in [0, 1], LeRobot's only output). Prints one JSON line:
``{"frames_per_s": ..., "cpu_ms_per_frame": ..., "workers": ...}`` (CPU time of this process, all its
threads; with workers it leaves out theirs); the first batch (worker start-up) is not timed.

    HF_HUB_OFFLINE=1 /tmp/lerobot044/bin/python benchmarks/lerobot_loader_peer.py --dataset PATH
"""

from __future__ import annotations

import argparse
import json
import os
import time

import lerobot_tv_shim  # noqa: F401 - must precede torchvision (see ../shared/peers/lerobot/README.md)
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    args = parser.parse_args()
    ds = LeRobotDataset("local/bench", root=args.dataset, video_backend="torchcodec")
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        generator=torch.Generator().manual_seed(0),
        multiprocessing_context="spawn" if args.workers else None,
    )
    stream = iter(loader)
    next(stream)
    t0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(args.batches):
        next(stream)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    frames = args.batches * args.batch_size * len(ds.meta.video_keys)
    result = {
        "frames_per_s": frames / seconds,
        "cpu_ms_per_frame": 1e3 * cpu / frames,
        "workers": args.workers,
    }
    print(json.dumps(result), flush=True)
    # torchcodec's worker threads abort the spawned workers at interpreter teardown; the number is out.
    os._exit(0)


if __name__ == "__main__":
    main()
