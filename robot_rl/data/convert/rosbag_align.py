"""Time alignment and episode windows for the rosbag2 importer. All times are integer nanoseconds (int64).

Rules (also in :func:`robot_rl.data.convert.rosbag.bag_to_lerobot`'s docstring):

- An episode's frames lie on the grid ``t0 + (k * 1e9) // fps`` ns, k = 0, 1, ..., from ``t0`` = the
  latest first sample among the mapped topics inside the episode's window to the earliest last sample:
  every frame lies where every topic has data on both sides, so nothing is extrapolated and no sample
  from outside the window (another episode) is used.
- ``nearest``: the sample closest in time (a tie goes to the earlier one). ``linear``: the two samples
  around the frame time, mixed ``a * (1 - w) + b * w``; a frame time equal to a sample's time gets that
  sample exactly. Images are always ``nearest``.
"""

from __future__ import annotations

import numpy as np

from robot_rl.data.errors import DatasetError

NS = 1_000_000_000


def frame_times(t0: int, t1: int, fps: int) -> np.ndarray:
    """Grid ``t0 + (k * 1e9) // fps`` for k >= 0 up to ``t1`` inclusive: int64 (n,), empty if t1 < t0.
    The exporter stamps its messages with this same grid, so re-import lands on the samples exactly."""
    if t1 < t0:
        return np.zeros(0, np.int64)
    n = (t1 - t0) * fps // NS + 1
    return t0 + (np.arange(n, dtype=np.int64) * NS) // fps


def nearest(times: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Index into sorted ``times`` (n,) of the sample nearest each grid time (ties: the earlier): int64."""
    right = np.clip(np.searchsorted(times, grid, side="left"), 0, len(times) - 1)
    left = np.clip(right - 1, 0, len(times) - 1)
    take_left = np.abs(grid - times[left]) <= np.abs(times[right] - grid)
    return np.where(take_left, left, right)


def linear(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Linear interpolation of ``values`` (n, D) sampled at sorted ``times`` (n,) at ``grid`` times, which
    must lie within [times[0], times[-1]]: float64 (len(grid), D). Equal neighbouring times use the first."""
    if len(times) == 1:
        return np.repeat(values[:1].astype(np.float64), len(grid), axis=0)
    i = np.clip(np.searchsorted(times, grid, side="right") - 1, 0, len(times) - 2)
    span = (times[i + 1] - times[i]).astype(np.float64)
    w = np.where(span > 0, (grid - times[i]) / np.where(span > 0, span, 1.0), 0.0)[:, None]
    return values[i].astype(np.float64) * (1.0 - w) + values[i + 1].astype(np.float64) * w


def gap_windows(times: np.ndarray, gap_s: float) -> list[tuple[int, int]]:
    """[start, end] windows (ns, inclusive) of sorted message ``times`` split where consecutive messages
    are more than ``gap_s`` seconds apart."""
    if not len(times):
        return []
    cuts = np.flatnonzero(np.diff(times) > gap_s * NS)
    starts = np.r_[0, cuts + 1]
    ends = np.r_[cuts, len(times) - 1]
    return [(int(times[a]), int(times[b])) for a, b in zip(starts, ends, strict=True)]


def marker_windows(
    markers: list[tuple[int, bool | str]], end_ns: int, where: str
) -> list[tuple[int, int, str]]:
    """Episode windows (start, end, task text) from time-ordered markers.

    Bool: true opens an episode (closing any open one there), false closes the open one (a false with no
    open episode is ignored). String: every message opens an episode (closing the previous), its text
    the task ('' keeps the topics file's task). An episode still open at the end runs to ``end_ns``.
    Raises DatasetError naming ``where`` when no marker opens an episode.
    """
    windows: list[tuple[int, int, str]] = []
    open_at: tuple[int, str] | None = None
    for t, value in markers:
        if open_at is not None and (value is not False):
            windows.append((open_at[0], t, open_at[1]))
            open_at = None
        if value is False:
            if open_at is not None:
                windows.append((open_at[0], t, open_at[1]))
            open_at = None
        else:
            open_at = (t, value if isinstance(value, str) else "")
    if open_at is not None:
        windows.append((open_at[0], end_ns, open_at[1]))
    if not windows:
        raise DatasetError(f"{where}: no episode marker starts an episode (Bool true or any String)")
    return windows
