"""Normalisation statistics (mean/std, min/max, q01/q10/q50/q90/q99) in LeRobot's ``stats.json`` layout.

The quantiles are those LeRobot's ``compute_stats`` writes (``DEFAULT_QUANTILES`` 0.01, 0.10, 0.50, 0.90,
0.99, keys ``q01`` .. ``q99``). q10/q50/q90 are optional when reading: files written before they existed
(robot_rl's older datasets and checkpoints, LeRobot's older stats) lack them.

Policies work in normalised action space [-1, 1] (docs/design.md §3); the statistics travel with every
checkpoint as ``normalization.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

STAT_NAMES = ("mean", "std", "min", "max", "q01", "q99")  # required in every statistics entry
EXTRA_QUANTILES = ("q10", "q50", "q90")  # written always, read when present (LeRobot's QUANTILE10 uses them)
ALL_STAT_NAMES = STAT_NAMES + EXTRA_QUANTILES
_QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
_EPS = 1e-6


@dataclass
class FeatureStats:
    """Per-dimension statistics of one feature, each float32 of the feature's shape (images: (3, 1, 1)).
    ``q10``/``q50``/``q90`` are None when read from a file that lacks them."""

    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    q01: np.ndarray
    q99: np.ndarray
    q10: np.ndarray | None = None
    q50: np.ndarray | None = None
    q90: np.ndarray | None = None

    def present(self) -> dict[str, np.ndarray]:
        """``{name: value}`` of every statistic this entry holds, in ``ALL_STAT_NAMES`` order."""
        return {n: getattr(self, n) for n in ALL_STAT_NAMES if getattr(self, n) is not None}

    @classmethod
    def from_array(cls, x: np.ndarray) -> FeatureStats:
        """Statistics over axis 0 of ``x`` (N, ...). Raises ValueError on an empty or non-finite array."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape[0] == 0:
            raise ValueError("cannot compute statistics of an empty array")
        if not np.isfinite(x).all():
            raise ValueError("cannot compute statistics: array contains NaN or inf")
        quantiles = dict(zip(_QUANTILES, np.quantile(x, list(_QUANTILES.values()), axis=0), strict=True))
        values = dict(mean=x.mean(0), std=x.std(0), min=x.min(0), max=x.max(0), **quantiles)
        return cls(**{k: np.asarray(v, dtype=np.float32) for k, v in values.items()})

    def normalize(self, x: np.ndarray, mode: str) -> np.ndarray:
        """Map ``x`` (..., D) to normalised space: ``mean_std`` (zero mean, unit std) or ``quantile``
        (q01 -> -1, q99 -> +1, as openpi). Raises ValueError on an unknown mode."""
        lo, scale = self.affine(mode)
        return ((x - lo) / scale).astype(np.float32)

    def unnormalize(self, y: np.ndarray, mode: str) -> np.ndarray:
        """Inverse of :meth:`normalize`."""
        lo, scale = self.affine(mode)
        return (y * scale + lo).astype(np.float32)

    def affine(self, mode: str) -> tuple[np.ndarray, np.ndarray]:
        """``(offset, scale)`` such that normalised = (x - offset) / scale."""
        if mode == "mean_std":
            return self.mean, np.maximum(self.std, _EPS)
        if mode == "quantile":
            mid = (self.q99 + self.q01) / 2
            half = np.maximum((self.q99 - self.q01) / 2, _EPS)
            return mid.astype(np.float32), half.astype(np.float32)
        raise ValueError(f"unknown normalization mode {mode!r}; expected 'mean_std' or 'quantile'")

    def mapped(self, fn: Callable[[np.ndarray], np.ndarray]) -> FeatureStats:
        """The same statistics with ``fn`` applied to each present value (e.g. a reshape)."""
        return FeatureStats(**{n: fn(v) for n, v in self.present().items()})


def compute_stats(arrays: dict[str, np.ndarray]) -> dict[str, FeatureStats]:
    """Statistics for each feature array (N, ...). Images (N, H, W, 3) uint8 get per-channel stats in
    [0, 1] with shape (3, 1, 1), as LeRobot stores them."""
    out = {}
    for key, arr in arrays.items():
        arr = np.asarray(arr)
        if arr.ndim == 4 and arr.shape[-1] == 3 and arr.dtype == np.uint8:
            per_channel = FeatureStats.from_array(arr.reshape(-1, 3).astype(np.float32) / 255.0)
            out[key] = per_channel.mapped(lambda v: v.reshape(3, 1, 1))
        else:
            out[key] = FeatureStats.from_array(arr.reshape(arr.shape[0], -1) if arr.ndim == 1 else arr)
    return out


class PooledStats:
    """Running pool of per-episode statistics, O(1) per episode, so appending stays linear in episodes.

    mean, std, min and max are exact for the union of the episodes (pooled variance); the quantiles are the
    count-weighted mean of the per-episode quantiles, an approximation, as LeRobot's
    ``aggregate_stats``. A quantile some episode lacks (q10/q50/q90 of older files) is left out of the
    result for that key, as LeRobot's ``aggregate_feature_stats`` does.
    """

    def __init__(self) -> None:
        self.count = 0
        self._sums: dict[str, dict[str, np.ndarray]] = {}

    def add(self, stats: dict[str, FeatureStats], count: int) -> None:
        """Pool one episode's statistics, computed over ``count`` frames (> 0)."""
        for key, s in stats.items():
            mean, std = s.mean.astype(np.float64), s.std.astype(np.float64)
            terms = {"mean": count * mean, "second": count * (std**2 + mean**2)}
            for name, value in s.present().items():
                if name in _QUANTILES:
                    terms[name] = count * value.astype(np.float64)
            acc = self._sums.get(key)
            if acc is None:
                self._sums[key] = {**terms, "min": s.min.copy(), "max": s.max.copy()}
                continue
            for name in [n for n in acc if n in _QUANTILES and n not in terms]:
                del acc[name]
            for name in [n for n in terms if n in acc]:
                acc[name] = acc[name] + terms[name]
            acc["min"], acc["max"] = np.minimum(acc["min"], s.min), np.maximum(acc["max"], s.max)
        self.count += count

    def result(self) -> dict[str, FeatureStats]:
        """The pooled statistics, float32. Raises ValueError if nothing was added."""
        if not self.count:
            raise ValueError("no statistics pooled yet")
        out = {}
        for key, acc in self._sums.items():
            mean = acc["mean"] / self.count
            values = dict(
                mean=mean,
                std=np.sqrt(np.maximum(acc["second"] / self.count - mean**2, 0.0)),
                min=acc["min"],
                max=acc["max"],
                **{n: acc[n] / self.count for n in _QUANTILES if n in acc},
            )
            out[key] = FeatureStats(**{k: np.asarray(v, dtype=np.float32) for k, v in values.items()})
        return out


def stats_to_json(stats: dict[str, FeatureStats]) -> dict:
    """``{key: {name: nested list}}`` of every statistic each entry holds (``ALL_STAT_NAMES`` order)."""
    return {key: {name: v.tolist() for name, v in s.present().items()} for key, s in stats.items()}


def stats_from_json(tree: dict, source: str = "<dict>") -> dict[str, FeatureStats]:
    """Parse the ``stats.json`` layout.

    Raises ValueError naming ``source`` and the key if a statistic of ``STAT_NAMES`` is missing; q10/q50/q90
    are read when present. Other entries (e.g. LeRobot's ``count``) are ignored."""
    out = {}
    for key, entry in tree.items():
        missing = [n for n in STAT_NAMES if n not in entry]
        if missing:
            raise ValueError(f"{source}: statistics for {key!r} lack {missing}")
        names = [n for n in ALL_STAT_NAMES if n in entry]
        out[key] = FeatureStats(**{n: np.asarray(entry[n], dtype=np.float32) for n in names})
    return out


def save_stats(stats: dict[str, FeatureStats], path: str | Path) -> None:
    Path(path).write_text(json.dumps(stats_to_json(stats), indent=2))


def load_stats(path: str | Path) -> dict[str, FeatureStats]:
    """Read a ``stats.json``/``normalization.json``; FileNotFoundError or ValueError names the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"normalization statistics not found: {path}")
    try:
        tree = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON: {err}") from err
    return stats_from_json(tree, source=str(path))
