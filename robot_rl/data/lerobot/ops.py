"""Dataset operations built on :mod:`robot_rl.data.lerobot.episode_copy`: merge, split, filter successful
episodes, and convert LeRobot v2.1 to v3.0. Every output is a LeRobot v3.0 dataset, written whole or not
at all; video is copied, not re-encoded, wherever the source allows."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.episode_copy import copy_episodes, write_episodes
from robot_rl.data.lerobot.reader import LeRobotDataset

SELECTED, REST = "selected", "rest"  # the two datasets a split by episodes writes


def merge(
    sources: Sequence[str | Path], dst: str | Path, overwrite: bool = False, drop: Sequence[str] = ()
) -> Path:
    """Concatenate every episode of ``sources`` (v3.0 or v2.1, same fps and features), in order, into a
    new v3.0 dataset at ``dst``, leaving out the features in ``drop`` (e.g. the suite's
    ``observation.environment_state``, whose size differs per task). Returns ``dst``.

    Raises DatasetError: no sources, a source unreadable, fps or kept features differ (naming both roots
    and the key), a ``drop`` key that is a LeRobot index column or in no source, or ``dst`` exists and not
    ``overwrite``.
    """
    if not sources:
        raise DatasetError(f"{dst}: merge needs at least one source dataset")
    return copy_episodes([(src, None) for src in sources], dst, overwrite, drop=drop)


def split(
    src: str | Path,
    dst_dir: str | Path,
    by: str = "episodes",
    episodes: Sequence[int] | None = None,
    overwrite: bool = False,
) -> dict[str, Path]:
    """Split ``src`` into several v3.0 datasets inside ``dst_dir`` (written together, all or none).

    Args:
        by: ``"episodes"``: ``dst_dir/selected`` holds ``episodes`` (in the order given) and
            ``dst_dir/rest`` the others (omitted when none are left). ``"task"``: one dataset per task,
            ``dst_dir/task-<i:03d>`` for the source's task index i, holding the episodes whose first frame
            has that task.
        episodes: episode indices, for ``by="episodes"`` only.
        overwrite: replace an existing ``dst_dir`` (only if it holds LeRobot datasets or nothing).
    Returns: ``{"selected": path, "rest": path}`` or ``{task text: path}``.
    Raises DatasetError naming the root: an unknown ``by``, ``episodes`` missing, repeated or out of
    range, or ``dst_dir`` exists and not ``overwrite``.
    """
    ds = LeRobotDataset(src)
    try:
        n, tasks = ds.num_episodes, list(ds.tasks)
        first_task = ds.load_tabular()[keys.TASK_INDEX][ds.episode_from]
    finally:
        ds.close()
    if by == "episodes":
        chosen = _checked_episodes(Path(src), episodes, n)
        rest = sorted(set(range(n)) - set(chosen))
        parts = {SELECTED: chosen, REST: rest} if rest else {SELECTED: chosen}
        labels = {name: name for name in parts}
    elif by == "task":
        if episodes is not None:
            raise DatasetError(f"{src}: split by task takes no episode list")
        parts, labels = {}, {}
        for t in np.unique(first_task).tolist():
            parts[f"task-{t:03d}"] = np.flatnonzero(first_task == t).tolist()
            labels[f"task-{t:03d}"] = tasks[t]
    else:
        raise DatasetError(f"{src}: unknown split {by!r}; use 'episodes' or 'task'")
    with fmt.staged_destination(dst_dir, overwrite) as tmp:
        for name, eps in parts.items():
            write_episodes([(src, eps)], tmp / name)
    return {labels[name]: Path(dst_dir) / name for name in parts}


def _checked_episodes(src: Path, episodes: Sequence[int] | None, n: int) -> list[int]:
    if not episodes:
        raise DatasetError(f"{src}: split by episodes needs a non-empty episode list")
    chosen = fmt.check_episode_ids(src, episodes, n)
    repeated = sorted({e for e in chosen if chosen.count(e) > 1})
    if repeated:
        raise DatasetError(f"{src}: episode {repeated[0]} is listed more than once")
    return chosen


def successful_episodes(src: str | Path) -> list[int]:
    """Indices of the episodes of ``src`` that succeeded: ``next.success`` true at any frame, or, when the
    dataset has no ``next.success``, ``next.reward`` > 0 at the last frame.

    Raises DatasetError naming info.json when the dataset has neither feature.
    """
    ds = LeRobotDataset(src)
    try:
        if keys.SUCCESS not in ds.features and keys.REWARD not in ds.features:
            raise DatasetError(
                f"{ds.root / fmt.INFO}: neither {keys.SUCCESS!r} nor {keys.REWARD!r} is a feature, so "
                "successful episodes cannot be told apart"
            )
        bounds = zip(ds.episode_from.tolist(), ds.episode_to.tolist(), strict=True)
        if keys.SUCCESS in ds.features:
            success = ds.load_tabular()[keys.SUCCESS].astype(bool)
            return [ep for ep, (lo, hi) in enumerate(bounds) if success[lo:hi].any()]
        reward = ds.load_tabular()[keys.REWARD].astype(np.float64)
        return [ep for ep, (_, hi) in enumerate(bounds) if reward[hi - 1] > 0]
    finally:
        ds.close()


def filter_success(src: str | Path, dst: str | Path, overwrite: bool = False) -> Path:
    """Copy the successful episodes of ``src`` (see :func:`successful_episodes`) into a new v3.0 dataset
    at ``dst``. Returns ``dst``.

    Raises DatasetError naming the file: no success or reward feature, no successful episode (nothing is
    written), or ``dst`` exists and not ``overwrite``.
    """
    keep = successful_episodes(src)
    if not keep:
        raise DatasetError(f"{src}: no successful episodes; nothing written to {dst}")
    return copy_episodes([(src, keep)], dst, overwrite)


def convert_v21_to_v30(src: str | Path, dst: str | Path, overwrite: bool = False) -> Path:
    """Rewrite a LeRobot v2.1 (or v2.0) dataset in the v3.0 layout at ``dst``, episode for episode, with
    the videos copied unchanged. Returns ``dst``.

    Raises DatasetError naming info.json when ``src`` is already v3.0, or as :func:`copy_episodes`.
    """
    info_path = Path(src) / fmt.INFO
    version = fmt.read_json(info_path).get("codebase_version")
    if version == fmt.V30:
        raise DatasetError(f"{info_path}: the dataset is already {fmt.V30}")
    return copy_episodes([(src, None)], dst, overwrite)
