"""Training-batch loading from a video dataset: frames/s of robot_rl's loader against a plain
decode-every-sample loop, measured in the same run.

Baseline: for every sampled frame, open its mp4 with PyAV, seek, decode up to the frame, convert and scale
it, close (what a naive ``Dataset.__getitem__`` does). robot_rl: ``TrainingSet`` batches through
``robot_rl.data.training.loader.batches``, decoding only the sampled frames with containers kept open
(``none``), or reading the zarr decoded-frame cache (``zarr``), or from RAM (``memory``), with 0 or 2
DataLoader workers. Every case returns the same (B, H, W, 3) uint8 frames for the same rows.

    python benchmarks/bench_loader.py [--dataset PATH] [--batches 12] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from robot_rl.config import DataConfig
from robot_rl.data.training.loader import batches
from robot_rl.data.training.training_set import TrainingSet

FIXTURE = Path(__file__).resolve().parents[1].parent / "shared/fixtures/lerobot/g1_pick_bottle_v30"


def naive_frames(data: TrainingSet, key: str, timestamps: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Decode each row's frame from a freshly opened container (the baseline)."""
    ds, (h, w, _) = data.dataset, data.obs_shapes[key]
    out = []
    for row in rows:
        path, start = ds.video_path(int(ds.episode_of(np.array([row]))[0]), key)
        t = start + float(timestamps[row])
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            container.seek(int(t / float(stream.time_base)), stream=stream, backward=True)
            for frame in container.decode(stream):
                if frame.time >= t - 1e-4:
                    out.append(frame.to_ndarray(format="rgb24", height=h, width=w, interpolation="AREA"))
                    break
    return np.stack(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(FIXTURE))
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--size", type=int, nargs=2, default=[96, 128], metavar=("H", "W"))
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="bench_loader_"))
    frames = args.batches * args.batch_size

    def build(mode: str) -> tuple[TrainingSet, float]:
        t0 = time.perf_counter()
        cfg = DataConfig(path=args.dataset, image_size=list(args.size), frame_cache=mode)
        return TrainingSet(
            args.dataset, cfg, horizon=10, gamma=0.99, cache_dir=cache
        ), time.perf_counter() - t0

    video, _ = build("none")
    key = video.camera_keys[0]
    rng = np.random.default_rng(0)
    timestamps = video.dataset.load_tabular()["timestamp"]
    t0 = time.perf_counter()
    for _ in range(args.batches):
        rows = video.train.rows[rng.integers(0, len(video.train.rows), args.batch_size)]
        naive_frames(video, key, timestamps, rows)
    base = frames / (time.perf_counter() - t0)
    print(f"dataset {args.dataset}: {video.dataset.num_frames} frames, {key} scaled to {args.size}")
    print(f"plain decode-every-sample loop          : {base:8.1f} frames/s  x1.00")
    for mode in ("none", "zarr", "memory"):
        data, setup = build(mode)
        for workers in (0, 2) if mode != "memory" else (0,):
            stream = batches(
                data, args.batch_size, seed=0, start=0, stop=args.batches + 1, num_workers=workers
            )
            next(stream)  # worker start-up is not counted
            t0 = time.perf_counter()
            for _ in range(args.batches):
                next(stream)
            rate = frames / (time.perf_counter() - t0)
            del stream
            print(
                f"robot_rl {mode:6s} frames, {workers} workers   : {rate:8.1f} frames/s  x{rate / base:.2f}"
                f"   (set-up {setup:.1f} s)"
            )


if __name__ == "__main__":
    main()
