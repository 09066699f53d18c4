"""Camera keys in the zarr replay / episode log: time to append an episode and to read one frame, with
chunks of about ``CHUNK_BYTES`` per key (the default) against the old layout, 1,024 frames per chunk for
every key (``chunk_bytes=None``), in the same run.

zarr rewrites a whole chunk on every append into it and decodes a whole chunk to read one frame (the
episode browser reads single frames), so the cost of both grows with the chunk's size. Frames are a
gradient plus noise of amplitude ``--noise`` (0-255; 255 makes them incompressible, the worst case).

    python benchmarks/bench_replay_chunks.py                    # 64x64 and 480x640, 4 episodes of 100 frames
    python benchmarks/bench_replay_chunks.py --sizes 480x640 --episodes 8 --noise 255
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.replay import CHUNK_BYTES, ZarrReplayBuffer

CAM = keys.image_key("front")


def frames(h: int, w: int, n: int, noise: int, seed: int) -> np.ndarray:
    """(n, h, w, 3) uint8: a horizontal gradient shifted per frame, plus uniform noise up to ``noise``."""
    rng = np.random.default_rng(seed)
    base = (np.arange(w)[None, :, None] * 255 // max(1, w - 1)).astype(np.int32)
    out = np.empty((n, h, w, 3), np.uint8)
    for i in range(n):
        img = np.broadcast_to((base + i) % 256, (h, w, 3)) + rng.integers(0, noise + 1, (h, w, 3))
        out[i] = np.clip(img, 0, 255)
    return out


def run(h: int, w: int, length: int, episodes: int, noise: int, chunk_bytes: int | None) -> dict[str, float]:
    """Appends ``episodes`` episodes of ``length`` frames; returns mean append ms, mean one-frame read ms
    over 20 frames spread over the buffer, chunk frames and MB on disk."""
    folder = Path(tempfile.mkdtemp(prefix="bench_chunks_"))
    try:
        spec = {CAM: ((h, w, 3), np.uint8), keys.ACTION: ((4,), np.float32)}
        buf = ZarrReplayBuffer(folder / "r", spec, chunk_bytes=chunk_bytes)
        appends = []
        for e in range(episodes):
            ep = {CAM: frames(h, w, length, noise, e), keys.ACTION: np.zeros((length, 4), np.float32)}
            start = time.perf_counter()
            buf.add_episode(ep)
            appends.append(time.perf_counter() - start)
        arr = ZarrReplayBuffer(folder / "r").zarr_arrays()[CAM]
        picks = np.linspace(0, episodes * length - 1, 20).astype(int)
        start = time.perf_counter()
        for i in picks:
            np.asarray(arr[int(i)])
        read = (time.perf_counter() - start) / len(picks)
        disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6
        return {
            "append_ms": 1e3 * float(np.mean(appends)),
            "read_ms": 1e3 * read,
            "chunk": arr.chunks[0],
            "mb": disk,
        }
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["64x64", "480x640"], help="HxW camera sizes")
    p.add_argument("--length", type=int, default=100, help="frames per episode")
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--noise", type=int, default=32, help="noise amplitude 0-255 (255: incompressible)")
    args = p.parse_args()
    print(
        f"{args.episodes} episodes of {args.length} frames, noise {args.noise}; "
        f"new: ~{CHUNK_BYTES >> 20} MiB chunks"
    )
    print("size     | layout | chunk frames | append ms/episode | read ms/frame | MB on disk")
    for size in args.sizes:
        h, w = (int(v) for v in size.split("x"))
        old = run(h, w, args.length, args.episodes, args.noise, None)
        new = run(h, w, args.length, args.episodes, args.noise, CHUNK_BYTES)
        for name, r in (("old", old), ("new", new)):
            print(
                f"{size:8s} | {name:6s} | {r['chunk']:12d} | {r['append_ms']:17.0f} | {r['read_ms']:13.1f} | "
                f"{r['mb']:.1f}"
            )
        print(
            f"{size:8s} | ratio old/new: append x{old['append_ms'] / new['append_ms']:.1f}, "
            f"read x{old['read_ms'] / new['read_ms']:.1f}"
        )


if __name__ == "__main__":
    main()
