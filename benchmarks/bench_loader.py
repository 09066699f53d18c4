"""Training-batch loading from a video dataset: frames/s of robot_rl's video loader against LeRobot 0.4.4's,
measured in the same run, interleaved round by round (the machine is shared: each round pairs the two).

Every row reads shuffled batches of ``--batch-size`` samples, one camera frame each:
- LeRobot 0.4.4 (``benchmarks/lerobot_loader_peer.py`` in the side venv of ``../shared/peers/lerobot``:
  torchcodec, native resolution, 0 and 2 DataLoader workers); skipped with a note when the venv is absent;
- robot_rl's video path (``TrainingSet`` with ``frame_cache=none`` through
  ``robot_rl.data.training.loader.batches``) at native resolution, decoding with 1 thread per process and
  with the default (``data.decode_threads=0``: the process's CPUs, at most 4);
- once, after the rounds: a plain loop that opens, seeks, decodes and closes per sample, robot_rl's video
  path at ``--size``, and its decoded-frame caches (``zarr``, ``memory``) at ``--size``.

Run with ``OMP_NUM_THREADS=1`` for equal thread settings. The dataset defaults to the G1 fixture
(``$ROBOT_RL_FIXTURES/lerobot/g1_pick_bottle_v30``, else ``<clone>/../shared/fixtures/...``); without it a
synthetic dataset of the same shape (5 episodes, 1,800 frames, 480×640 AV1) is written to a temporary folder.

    OMP_NUM_THREADS=1 python benchmarks/bench_loader.py [--dataset PATH] [--batches 12] [--batch-size 32]
        [--repeats 3] [--lerobot-python /tmp/lerobot044/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import av
import numpy as np

from robot_rl import keys
from robot_rl.config import DataConfig
from robot_rl.data.lerobot.video import default_decode_threads
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.data.training.loader import batches
from robot_rl.data.training.training_set import TrainingSet

HERE = Path(__file__).resolve().parent
G1 = Path("lerobot/g1_pick_bottle_v30")


def default_dataset() -> Path | None:
    """The G1 fixture under ``$ROBOT_RL_FIXTURES`` or ``<clone>/../shared/fixtures``, if present."""
    roots = [Path(os.environ["ROBOT_RL_FIXTURES"])] if os.environ.get("ROBOT_RL_FIXTURES") else []
    roots.append(HERE.parents[1] / "shared/fixtures")
    return next((r / G1 for r in roots if (r / G1 / "meta/info.json").is_file()), None)


def synthetic_dataset(root: Path, episodes: int = 5, length: int = 360) -> Path:
    """A G1-shaped dataset (480×640 video, 26-dim state and action, 30 fps) with moving smooth images."""
    h, w = 480, 640
    features = {
        keys.STATE: {"dtype": "float32", "shape": [26], "names": None},
        keys.ACTION: {"dtype": "float32", "shape": [26], "names": None},
        "observation.images.cam_high": {"dtype": "video", "shape": [h, w, 3], "names": None},
    }
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    with LeRobotWriter(root, fps=30, features=features) as writer:
        for ep in range(episodes):
            t = np.arange(length, dtype=np.float32)[:, None, None]
            img = 128 + 60 * np.sin((xx + 4 * t + 37 * ep) / 40) + 40 * np.cos((yy - 3 * t) / 55)
            video = np.repeat(np.clip(img, 0, 255).astype(np.uint8)[..., None], 3, axis=-1)
            video[..., 1] = np.roll(video[..., 1], ep * 7, axis=2)
            writer.add_episode(
                {
                    keys.STATE: rng.normal(size=(length, 26)).astype(np.float32),
                    keys.ACTION: rng.normal(size=(length, 26)).astype(np.float32),
                    "observation.images.cam_high": video,
                },
                task="synthetic",
            )
    return root


def load() -> str:
    """The 1-minute load average (other processes distort every rate on a shared machine)."""
    return f"{os.getloadavg()[0]:.2f}"


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


def lerobot_rate(python: str, dataset: str, batches_: int, batch_size: int, workers: int) -> dict | str:
    """LeRobot 0.4.4's ``{"frames_per_s", "cpu_ms_per_frame"}`` from the side venv, or why it did not run."""
    if not Path(python).is_file():
        return f"skipped: no LeRobot side venv at {python} (bash ../shared/peers/lerobot/setup.sh)"
    cmd = [python, str(HERE / "lerobot_loader_peer.py"), "--dataset", dataset, "--workers", str(workers)]
    cmd += ["--batches", str(batches_), "--batch-size", str(batch_size)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        return f"failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="", help="LeRobot dataset folder (default: the G1 fixture)")
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--size", type=int, nargs=2, default=[96, 128], metavar=("H", "W"))
    parser.add_argument("--repeats", type=int, default=3, help="interleaved LeRobot / robot_rl rounds")
    parser.add_argument("--lerobot-python", default="/tmp/lerobot044/bin/python")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2], help="DataLoader workers per row")
    parser.add_argument("--rounds-only", action="store_true", help="skip the rows after the rounds")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench_loader_"))
    dataset = Path(args.dataset) if args.dataset else default_dataset()
    if dataset is None:
        print("G1 fixture not found: writing a synthetic 480x640 AV1 dataset of the same shape")
        dataset = synthetic_dataset(scratch / "synthetic")
    frames = args.batches * args.batch_size

    def build(mode: str, size: list[int] | None, threads: int = 0) -> tuple[TrainingSet, float]:
        t0 = time.perf_counter()
        cfg = DataConfig(path=str(dataset), image_size=size or [], frame_cache=mode, decode_threads=threads)
        return TrainingSet(dataset, cfg, horizon=10, gamma=0.99, cache_dir=scratch), time.perf_counter() - t0

    def measure(data: TrainingSet, workers: int) -> dict:
        """frames/s and this process's CPU ms per frame (all threads; workers' CPU is not counted)."""
        stream = batches(data, args.batch_size, seed=0, start=0, stop=args.batches + 1, num_workers=workers)
        next(stream)  # worker start-up is not counted
        t0, cpu0 = time.perf_counter(), time.process_time()
        for _ in range(args.batches):
            next(stream)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        return {"frames_per_s": frames / wall, "cpu_ms_per_frame": 1e3 * cpu / frames}

    def rate(data: TrainingSet, workers: int) -> float:
        return measure(data, workers)["frames_per_s"]

    video, _ = build("none", args.size)
    key = video.camera_keys[0]
    h, w, _ = video.dataset.features[key]["shape"]
    res = f"{args.size[0]}x{args.size[1]}"
    print(
        f"dataset {dataset}: {video.dataset.num_frames} frames, {key} {h}x{w}; batches of {args.batch_size}"
    )
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, load {load()} at start")
    native = {t: build("none", None, t)[0] for t in (1, 0)}
    auto = default_decode_threads()
    ratios: dict[tuple[int, int], list[float]] = {}
    print("native frames/s (0 workers: and CPU ms per frame); robot_rl decoding with 1 thread and with auto")
    print(f"threads ({auto} in process, shared among the workers of a DataLoader: data.decode_threads=0)")
    print("round  workers  LeRobot 0.4.4          robot_rl 1 thread            robot_rl auto threads")
    for rnd in range(args.repeats):
        for workers in args.workers:
            peer = lerobot_rate(args.lerobot_python, str(dataset), args.batches, args.batch_size, workers)
            if isinstance(peer, str):
                print(f"LeRobot row {peer}")
                peer = None
            rows = [peer] + [measure(native[t], workers) for t in (1, 0)]
            cells = []
            for t, got in zip((None, 1, 0), rows, strict=True):
                if got is None:
                    cells.append(f"{'-':>22s}")
                    continue
                cell = f"{got['frames_per_s']:6.1f}"
                if t is not None and peer:
                    ratios.setdefault((workers, t), []).append(got["frames_per_s"] / peer["frames_per_s"])
                    cell += f" x{ratios[workers, t][-1]:4.2f}"
                if workers == 0:
                    cell += f" ({got['cpu_ms_per_frame']:.1f} ms)"
                cells.append(f"{cell:22s}")
            print(f"{rnd:5d}  {workers:7d}  {'  '.join(cells)}   load {load()}")
    for (workers, t), values in sorted(ratios.items()):
        name = "1 thread" if t == 1 else "auto threads"
        print(f"median ratio robot_rl/LeRobot, {workers} workers, {name}: x{float(np.median(values)):.2f}")
    if args.rounds_only:
        print(f"load {load()} at end")
        return
    rng = np.random.default_rng(0)
    timestamps = video.dataset.load_tabular()["timestamp"]
    t0 = time.perf_counter()
    for _ in range(args.batches):
        naive_frames(
            video, key, timestamps, video.train.rows[rng.integers(0, len(video.train.rows), args.batch_size)]
        )
    print(f"plain decode-every-sample loop, {res}: {frames / (time.perf_counter() - t0):8.1f} frames/s")
    for workers in args.workers:
        print(f"robot_rl video {res}, {workers} workers: {rate(video, workers):8.1f} frames/s")
    for mode in ("zarr", "memory"):
        data, setup = build(mode, args.size)
        for workers in [w for w in args.workers if mode != "memory" or w == 0]:  # memory: in process only
            got = rate(data, workers)
            print(f"robot_rl {mode} {res}, {workers} workers: {got:8.1f} frames/s (set-up {setup:.1f} s)")
    print(f"load {load()} at end")


if __name__ == "__main__":
    main()
