"""Online replay memory against the number of image episodes (issue 15 §4): process RSS and the mean time
per episode to add it and then draw one batch, for the capped FIFO replay and the old concatenating one.

Cases, each run in its own process so that RSS is its own:

- ``new``: the learner's :class:`~robot_rl.runtime.replay_memory.EpisodeMemory` with ``--capacity`` env
  steps, sampled through a :class:`~robot_rl.data.training.sampler.ChunkSampler` over views, as
  :class:`~robot_rl.runtime.replay.OnlineReplay` does.
- ``old`` (the same-run baseline): the mirror OnlineReplay kept before, a list of every episode
  concatenated into one array whenever a batch follows an add. Run only up to ``--old-episodes``: its
  memory and time per episode grow with N.

By default the disk side (the zarr buffer every episode is also written to) is left out, because it costs
the same in both cases and does not grow with N; ``--disk`` adds it, through the real
:class:`OnlineReplay` for ``new`` and the same :class:`ZarrReplayBuffer` append for ``old``, in a temporary
folder deleted afterwards (images are constant per episode, so the zarr stays small).

    python benchmarks/bench_replay.py                       # 10,000 episodes of 20 steps, 64x64x3 images
    python benchmarks/bench_replay.py --disk --episodes 200 --at 50 200 --old-episodes 200 --capacity 2000
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.data.training.sampler import ChunkSampler
from robot_rl.runtime.replay import ACTOR_EPISODE_KEY, ACTOR_KEY, OnlineReplay, episode_spec, final_spec
from robot_rl.runtime.replay_memory import EpisodeMemory

IMAGE = "observation.images.front"
HORIZON, GAMMA, BATCH = 5, 0.99, 256


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _episode(index: int, length: int, image: int) -> dict[str, np.ndarray]:
    """One truncated episode as an actor records it (:func:`episode_spec`): constant ``image``-side images
    (compressible), an 8-d state, task index 0, 4-d actions."""
    frames = {
        IMAGE: np.full((length, image, image, 3), index % 251, np.uint8),
        keys.STATE: np.full((length, 8), index, np.float32),
        keys.TASK_INDEX: np.zeros(length, np.int64),
        keys.ACTION: np.zeros((length, 4), np.float32),
        keys.REWARD: np.zeros(length, np.float32),
        keys.DONE: np.zeros(length, bool),
        keys.SUCCESS: np.zeros(length, bool),
        keys.INTERVENTION: np.zeros(length, bool),
    }
    frames.update({keys.final_key(k): frames[k][-1] for k in (IMAGE, keys.STATE)})
    return frames


class NewMemory:
    """The capped replay in memory: what OnlineReplay holds and samples."""

    def __init__(self, shapes: dict, capacity: int) -> None:
        spec = episode_spec(shapes, 4)
        self.obs_keys = sorted(shapes)
        sampled = (*self.obs_keys, keys.ACTION, keys.REWARD, keys.DONE, keys.INTERVENTION)
        self.memory = EpisodeMemory({k: spec[k] for k in sampled}, final_spec(shapes), capacity)
        self.episodes = 0

    def add(self, frames: dict) -> None:
        self.memory.append(frames, frames, self.episodes)
        self.episodes += 1

    def sample(self, rng: np.random.Generator) -> dict:
        finals = self.memory.finals()
        sampler = ChunkSampler(
            self.memory.frames(),
            self.memory.episode_index(),
            self.obs_keys,
            HORIZON,
            GAMMA,
            final_obs={k: finals[keys.final_key(k)] for k in self.obs_keys},
        )
        return sampler.get(rng.integers(0, len(sampler), size=BATCH))

    @property
    def held(self) -> int:
        return self.memory.num_steps


class OldMemory:
    """The pre-issue-15 mirror: every episode kept, concatenated into one array before each batch."""

    def __init__(self, shapes: dict, buffer: ZarrReplayBuffer | None) -> None:
        self.obs_keys, self.buffer = sorted(shapes), buffer
        self.spec, self.finals_spec = episode_spec(shapes, 4), final_spec(shapes)
        self.parts: list[dict] = []
        self.finals: list[dict] = []
        self.index: list[np.ndarray] = []
        self.episodes = 0

    def add(self, frames: dict) -> None:
        ep = self.episodes
        if self.buffer is not None:
            n = len(frames[keys.ACTION])
            stored = {**frames, ACTOR_KEY: np.zeros(n, np.int32), ACTOR_EPISODE_KEY: np.full(n, ep, np.int64)}
            ep = self.buffer.add_episode(stored, source="online")
        self.parts.append({k: np.asarray(frames[k]) for k in self.spec})
        self.finals.append({k: np.asarray(frames[k])[None] for k in self.finals_spec})
        self.index.append(np.full(len(frames[keys.ACTION]), ep, np.int64))
        self.episodes += 1

    def sample(self, rng: np.random.Generator) -> dict:
        if len(self.parts) > 1:
            self.parts = [{k: np.concatenate([p[k] for p in self.parts]) for k in self.parts[0]}]
            self.finals = [{k: np.concatenate([p[k] for p in self.finals]) for k in self.finals[0]}]
            self.index = [np.concatenate(self.index)]
        final_obs = {k: self.finals[0][keys.final_key(k)] for k in self.obs_keys}
        sampler = ChunkSampler(
            self.parts[0], self.index[0], self.obs_keys, HORIZON, GAMMA, final_obs=final_obs
        )
        return sampler.get(rng.integers(0, len(sampler), size=BATCH))

    @property
    def held(self) -> int:
        return len(self.index[0]) if len(self.index) == 1 else sum(map(len, self.index))


class DiskReplay:
    """The real OnlineReplay (zarr on disk + the capped memory)."""

    def __init__(self, path: Path, shapes: dict, capacity: int) -> None:
        self.replay = OnlineReplay(path, shapes, 4, HORIZON, GAMMA, capacity)
        self.episodes = 0

    def add(self, frames: dict) -> None:
        self.replay.add(0, self.episodes, frames)
        self.episodes += 1

    def sample(self, rng: np.random.Generator) -> dict:
        return self.replay.sample_online(BATCH, rng)

    @property
    def held(self) -> int:
        return self.replay.memory.num_steps


def run_case(args: argparse.Namespace) -> None:
    """Add episodes one by one, draw a batch after each, print one JSON row per checkpoint."""
    shapes = {IMAGE: (args.image, args.image, 3), keys.STATE: (8,)}
    tmp = Path(tempfile.mkdtemp(prefix="bench_replay_")) if args.disk else None
    rng = np.random.default_rng(0)
    try:
        if args.case == "new":
            replay = (
                DiskReplay(tmp / "replay", shapes, args.capacity) if tmp else NewMemory(shapes, args.capacity)
            )
        else:
            spec = {**episode_spec(shapes, 4), ACTOR_KEY: ((), np.int32), ACTOR_EPISODE_KEY: ((), np.int64)}
            replay = OldMemory(
                shapes, ZarrReplayBuffer(tmp / "replay", spec, final_spec(shapes)) if tmp else None
            )
        print(json.dumps({"episodes": 0, "rss_mb": _rss_mb()}), flush=True)
        add_s = sample_s = 0.0
        since = 0
        for index in range(args.episodes):
            frames = _episode(index, args.length, args.image)
            start = time.perf_counter()
            replay.add(frames)
            middle = time.perf_counter()
            batch = replay.sample(rng)
            add_s, sample_s = add_s + middle - start, sample_s + time.perf_counter() - middle
            assert batch["observations"][IMAGE].shape == (BATCH, args.image, args.image, 3)
            done = index + 1
            if done in args.at:
                row = {
                    "episodes": done,
                    "held_steps": replay.held,
                    "rss_mb": _rss_mb(),
                    "add_ms": 1e3 * add_s / (done - since),
                    "sample_ms": 1e3 * sample_s / (done - since),
                }
                print(json.dumps(row), flush=True)
                add_s = sample_s = 0.0
                since = done
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=10_000)
    p.add_argument(
        "--at", type=int, nargs="+", default=[100, 500, 1000, 2000, 5000, 10_000], help="checkpoints"
    )
    p.add_argument("--length", type=int, default=20, help="env steps per episode")
    p.add_argument("--image", type=int, default=64, help="image side (pixels)")
    p.add_argument("--capacity", type=int, default=20_000, help="the new replay's capacity (env steps)")
    p.add_argument("--old-episodes", type=int, default=2000, help="episodes the old replay runs to")
    p.add_argument("--disk", action="store_true", help="also write every episode to zarr (a temp dir)")
    p.add_argument("--case", choices=["new", "old"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.case:
        return run_case(args)
    print(
        f"{args.length}-step episodes of {args.image}x{args.image}x3 uint8 images + 8-d state; after each "
        f"add one batch of {BATCH} chunks (h={HORIZON}); disk {'on' if args.disk else 'off'}; new capacity "
        f"{args.capacity} env steps; times are means over the episodes since the previous row"
    )
    rows: dict[str, dict[int, dict]] = {}
    for case, episodes in (("old", min(args.old_episodes, args.episodes)), ("new", args.episodes)):
        argv = [sys.argv[0], "--case", case, "--episodes", str(episodes), "--at", *map(str, args.at)]
        argv += ["--length", str(args.length), "--image", str(args.image), "--capacity", str(args.capacity)]
        argv += ["--disk"] if args.disk else []
        start = time.perf_counter()
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True, check=True).stdout
        rows[case] = {r["episodes"]: r for r in map(json.loads, out.splitlines())}
        print(
            f"{case}: {episodes} episodes in {time.perf_counter() - start:.0f} s wall, "
            f"RSS {rows[case][0]['rss_mb']:.0f} MB before the first episode"
        )
    print(
        f"{'case':4} | {'episodes':>8} | {'held steps':>10} | {'RSS MB':>7} | {'add ms':>7} | "
        f"{'sample ms':>9} | {'add+sample ms':>13} | x vs old"
    )
    for case in ("old", "new"):
        for n, r in sorted(rows[case].items()):
            if not n:
                continue
            total = r["add_ms"] + r["sample_ms"]
            old = rows["old"].get(n)
            ratio = f"{total / (old['add_ms'] + old['sample_ms']):.2f}" if old else "(old not run)"
            print(
                f"{case:4} | {n:8d} | {r['held_steps']:10d} | {r['rss_mb']:7.0f} | {r['add_ms']:7.2f} | "
                f"{r['sample_ms']:9.2f} | {total:13.2f} | {ratio}"
            )


if __name__ == "__main__":
    main()
