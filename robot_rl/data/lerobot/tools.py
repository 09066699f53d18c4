"""Inspect a LeRobot dataset and recompute its normalisation statistics (``robot-rl dataset info|stats``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.normalize import FeatureStats, PooledStats, compute_stats

VIDEO_STATS_FRAMES = 16  # frames sampled per episode for image statistics


def evenly_spaced(lo: int, hi: int, count: int) -> np.ndarray:
    """At most ``count`` distinct indices in [lo, hi), evenly spread from ``lo`` to ``hi - 1`` (both
    included when ``count`` >= 2), sorted, int64. Fewer when the range is shorter; empty when it is."""
    return np.unique(np.linspace(lo, hi - 1, max(0, min(hi - lo, count))).astype(np.int64))


def dataset_summary(root: str | Path) -> dict:
    """What a user asks first of a dataset: version, fps, episodes, frames, duration (s), tasks, size on
    disk (bytes), robot type, episode sources, and each feature's dtype, shape and (videos) codec.

    Raises:
        DatasetError: the dataset cannot be opened; the message names the file (run ``validate`` for a
            full list of problems).
    """
    root = Path(root)
    ds = LeRobotDataset(root)
    try:
        lengths = (ds.episode_to - ds.episode_from).tolist()
        features = {}
        for key, feat in ds.features.items():
            entry = {"dtype": feat["dtype"], "shape": list(feat["shape"])}
            if key in ds.video_keys:
                entry["codec"] = (feat.get("info") or {}).get("video.codec")
            features[key] = entry
        sources = ds.episode_sources or []
        return {
            "root": str(root),
            "codebase_version": ds.version,
            "robot_type": ds.info.get("robot_type"),
            "fps": ds.fps,
            "episodes": ds.num_episodes,
            "frames": ds.num_frames,
            "duration_s": ds.num_frames / ds.fps,
            "episode_length": {"min": min(lengths, default=0), "max": max(lengths, default=0)},
            "tasks": list(ds.tasks),
            "sources": {s: sources.count(s) for s in sorted(set(sources))},
            "size_bytes": sum(p.stat().st_size for p in root.rglob("*") if p.is_file()),
            "features": features,
        }
    finally:
        ds.close()


def recompute_stats(root: str | Path, out: str | Path | None = None) -> Path:
    """Recompute mean/std/min/max/q01/q99 of every feature from the data and write them in LeRobot's
    ``stats.json`` layout (with ``count``) to ``out`` (default ``<root>/meta/stats.json``), atomically.

    Tabular features use every frame. Videos use up to ``VIDEO_STATS_FRAMES`` evenly spaced frames per
    episode, pooled over episodes: per-channel statistics in [0, 1] of shape (3, 1, 1), as LeRobot.
    Returns the path written.

    Raises:
        DatasetError: the dataset cannot be opened or a video cannot be decoded (names the file), or a
            feature holds NaN or inf (names the dataset and the key).
    """
    root = Path(root)
    ds = LeRobotDataset(root)
    try:
        tabular = {k: v for k, v in ds.load_tabular().items() if k in ds.features}
        stats: dict[str, FeatureStats] = {}
        for key, values in tabular.items():
            try:
                stats |= compute_stats({key: values})
            except ValueError as err:  # NaN or inf, or no frames
                raise DatasetError(f"{root}: feature {key!r}: {err}") from err
        counts = dict.fromkeys(tabular, ds.num_frames)
        for key in ds.video_keys:
            pooled = PooledStats()
            for ep in range(ds.num_episodes):
                lo, hi = int(ds.episode_from[ep]), int(ds.episode_to[ep])
                rows = evenly_spaced(lo, hi, VIDEO_STATS_FRAMES)
                pooled.add(compute_stats({key: ds.video_frames(key, rows)}), len(rows))
            stats.update(pooled.result())
            counts[key] = pooled.count
    finally:
        ds.close()
    path = Path(out) if out is not None else root / fmt.STATS
    fmt.write_stats_json(path, stats, counts)
    return path
