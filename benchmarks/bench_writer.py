"""LeRobotWriter at many episodes: write rate, files on disk and read-back time, packed (LeRobot's layout,
the default) against one file per episode (``FileSizes(0, 0)``, the layout robot_rl wrote before).

Usage: python benchmarks/bench_writer.py [--episodes 10000] [--frames 20] [--cameras 2] [--size 32]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.lerobot.packing import FileSizes
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.writer import LeRobotWriter


def _features(cameras: int, size: int) -> dict:
    feats = {
        keys.STATE: {"dtype": "float32", "shape": [8]},
        keys.ACTION: {"dtype": "float32", "shape": [4]},
        keys.REWARD: {"dtype": "float32", "shape": [1]},
    }
    for c in range(cameras):
        feats[f"observation.images.cam{c}"] = {"dtype": "video", "shape": [size, size, 3]}
    return feats


def _episode(rng: np.random.Generator, frames: int, cameras: int, size: int, seed: int) -> dict:
    out = {
        keys.STATE: rng.normal(size=(frames, 8)).astype(np.float32),
        keys.ACTION: rng.uniform(-1, 1, (frames, 4)).astype(np.float32),
        keys.REWARD: rng.uniform(size=frames).astype(np.float32),
    }
    ramp = np.linspace(0, 80, size, dtype=np.float32)[None, None, :, None]
    level = ((np.arange(frames) * 7 + seed) % 150).astype(np.float32)[:, None, None, None]
    image = np.broadcast_to(ramp + level, (frames, size, size, 3)).astype(np.uint8)
    for c in range(cameras):
        out[f"observation.images.cam{c}"] = image
    return out


def _run(root: Path, args: argparse.Namespace, sizes: FileSizes | None) -> dict:
    rng = np.random.default_rng(0)
    feats = _features(args.cameras, args.size)
    start = time.perf_counter()
    with LeRobotWriter(root, fps=10, features=feats, file_sizes=sizes) as writer:
        for i in range(args.episodes):
            writer.add_episode(_episode(rng, args.frames, args.cameras, args.size, i), task="t")
    write_s = time.perf_counter() - start
    files = [p for p in root.rglob("*") if p.is_file()]
    start = time.perf_counter()
    ds = LeRobotDataset(root)
    assert ds.num_episodes == args.episodes
    ds.load_tabular()
    open_s = time.perf_counter() - start
    ds.close()
    return {
        "write_s": write_s,
        "files": len(files),
        "data_video_files": sum(p.parts[len(root.parts)] in ("data", "videos") for p in files),
        "mb": sum(p.stat().st_size for p in files) / 1024**2,
        "open_s": open_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10000)
    parser.add_argument("--frames", type=int, default=20)
    parser.add_argument("--cameras", type=int, default=2)
    parser.add_argument("--size", type=int, default=32, help="square camera images, pixels")
    parser.add_argument("--skip-per-episode", action="store_true")
    args = parser.parse_args()
    print(
        f"{args.episodes} episodes x {args.frames} frames, {args.cameras} cameras {args.size}x{args.size}, "
        f"cpu cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}"
    )
    modes = [("packed (default, 100/200 MB)", None)]
    if not args.skip_per_episode:
        modes.append(("one file per episode", FileSizes(0, 0)))
    for name, sizes in modes:
        with tempfile.TemporaryDirectory() as tmp:
            r = _run(Path(tmp) / "ds", args, sizes)
        print(
            f"{name:30s}: {args.episodes / r['write_s']:7.1f} episodes/s written, "
            f"{r['data_video_files']:6d} data+video files ({r['files']} in all, {r['mb']:.1f} MB), "
            f"open + load_tabular {r['open_s']:.2f} s"
        )


if __name__ == "__main__":
    main()
