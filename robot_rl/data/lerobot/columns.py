"""Add or replace per-frame columns of a LeRobot dataset, writing a copy (e.g. rewards or progress labels
computed offline): :func:`with_columns`."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.episode_copy import write_episodes
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.normalize import compute_stats

INDEX_KEYS = (keys.INDEX, keys.EPISODE_INDEX, keys.FRAME_INDEX, keys.TIMESTAMP, keys.TASK_INDEX)
COLUMN_DTYPES = ("float32", "int64", "bool")


def with_columns(
    src: str | Path, dst: str | Path, columns: dict[str, np.ndarray], overwrite: bool = False
) -> Path:
    """Copy the LeRobot dataset at ``src`` to ``dst`` (v3.0) with per-frame columns added or replaced.

    Args:
        src: a v3.0 dataset, copied file by file (videos hard-linked, or copied where a link is not
            possible; never re-encoded), or a v2.1 (v2.0) dataset, converted as ``dataset convert`` does.
        dst: the new dataset's folder, staged in a hidden sibling folder and renamed into place at the end.
        columns: ``{feature key: values}``, values of shape (N,) or (N, d), N = the number of frames, row
            i = global frame ``index`` i (the order of ``LeRobotDataset(src).load_tabular()``), dtype
            float32, int64 or bool. A new key becomes a feature ``{"dtype", "shape": [1] for (N,) or [d],
            "names": None}``; an existing key (e.g. ``next.reward``) keeps its feature entry, and its
            values are cast to the feature's dtype, which must hold them safely (bool -> float32 does).
        overwrite: replace ``dst`` if it exists (only a LeRobot dataset, an empty folder or a folder of
            LeRobot datasets is ever replaced).
    Returns: ``dst``. Everything but the given columns is as in ``src``; the given columns' statistics
    are recomputed, over all frames in ``meta/stats.json`` and per episode in the ``stats/<key>/...``
    columns of the episodes metadata (where the source stores per-episode statistics).
    Raises:
        DatasetError: ``src`` cannot be read; a key is a video feature or an index column
            (:data:`INDEX_KEYS`); values have the wrong length or number of dimensions, a dtype other than
            float32/int64/bool, a dtype or shape that does not fit the existing feature, or NaN/inf;
            ``dst`` exists and ``overwrite`` is false. Messages name ``src`` and the key. On any error
            ``dst`` is left as it was.
    """
    src = Path(src)
    ds = LeRobotDataset(src)
    try:
        arrays, features = _checked(ds, columns)
    finally:
        ds.close()
    with fmt.staged_destination(dst, overwrite) as tmp:
        if ds.version == fmt.V30:
            _copy_tree(src, tmp)
        else:
            write_episodes([(src, None)], tmp)
        _write_columns(tmp, arrays, features)
        stats_path = tmp / fmt.STATS
        old = fmt.read_json(stats_path) if stats_path.is_file() else {}
        fmt.atomic_write_json(
            stats_path, {**old, **fmt.stats_json_tree(compute_stats(arrays), ds.num_frames)}
        )
    return Path(dst)


def _checked(ds: LeRobotDataset, columns: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """(values cast to their feature's dtype, feature entries) of ``columns``, checked against ``ds``."""
    arrays, features = {}, {}
    for key, values in columns.items():
        arr, where = np.asarray(values), f"{ds.root}: column {key!r}"
        if key in ds.video_keys or key in INDEX_KEYS:
            what = "a video feature" if key in ds.video_keys else "an index column"
            raise DatasetError(f"{where} is {what}, which cannot be added or replaced")
        if arr.ndim not in (1, 2) or len(arr) != ds.num_frames:
            raise DatasetError(
                f"{where} has shape {arr.shape}; expected ({ds.num_frames},) or ({ds.num_frames}, d): "
                "one row per frame"
            )
        if arr.dtype.name not in COLUMN_DTYPES:
            raise DatasetError(f"{where} has dtype {arr.dtype}; expected one of {COLUMN_DTYPES}")
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise DatasetError(f"{where} holds NaN or inf")
        shape = list(arr.shape[1:]) or [1]
        feature = ds.features.get(key) or {"dtype": arr.dtype.name, "shape": shape, "names": None}
        if shape != list(feature["shape"]) or not np.can_cast(arr.dtype, feature["dtype"]):
            raise DatasetError(
                f"{where}: {arr.dtype} values of shape {shape} do not fit the existing feature "
                f"({feature['dtype']}, shape {feature['shape']})"
            )
        arrays[key], features[key] = arr.astype(feature["dtype"]), feature
    return arrays, features


def _copy_tree(src: Path, dst: Path) -> None:
    """Every file of ``src`` into the empty folder ``dst``: videos hard-linked (copied where linking
    fails), the rest copied, so that rewriting a file of ``dst`` never touches ``src``."""
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = path.relative_to(src)
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        (_link_or_copy if rel.parts[0] == "videos" else shutil.copyfile)(path, dst / rel)


def _link_or_copy(path: Path, out: Path) -> None:
    try:
        os.link(path, out)
    except OSError:  # another filesystem, or links to files we do not own are not allowed
        shutil.copyfile(path, out)


def _write_columns(root: Path, arrays: dict[str, np.ndarray], features: dict[str, dict]) -> None:
    """Write ``arrays`` into the v3.0 dataset at ``root``: the data files its episodes point at, the
    per-episode statistics, and the new keys' features in info.json."""
    info = fmt.read_json(root / fmt.INFO)
    data_files: set[tuple[int, int]] = set()
    for path in sorted((root / fmt.EPISODES_DIR_V30).glob("chunk-*/file-*.parquet")):
        table = fmt.read_parquet(path)
        data_files |= set(
            zip(table["data/chunk_index"].to_pylist(), table["data/file_index"].to_pylist(), strict=True)
        )
        if any(name.startswith("stats/") for name in table.column_names):
            fmt.atomic_write_parquet(path, _with_episode_stats(table, arrays))
    for chunk, file in sorted(data_files):
        path = root / info["data_path"].format(chunk_index=chunk, file_index=file)
        table = fmt.read_parquet(path)
        rows = table[keys.INDEX].to_numpy()
        for key, arr in arrays.items():
            column = fmt.arrow_column(arr[rows], features[key])
            at = table.schema.get_field_index(key)
            table = table.set_column(at, key, column) if at >= 0 else table.append_column(key, column)
        fmt.atomic_write_parquet(path, table)
    info["features"] |= {key: feat for key, feat in features.items() if key not in info["features"]}
    fmt.atomic_write_json(root / fmt.INFO, info)


def _with_episode_stats(table: pa.Table, arrays: dict[str, np.ndarray]) -> pa.Table:
    """An episodes-metadata table with the ``stats/<key>/...`` columns of ``arrays``' keys recomputed
    over each episode's rows [dataset_from_index, dataset_to_index)."""
    bounds = zip(table["dataset_from_index"].to_pylist(), table["dataset_to_index"].to_pylist(), strict=True)
    new = pa.Table.from_pylist(
        [
            fmt.stats_columns(compute_stats({k: a[lo:hi] for k, a in arrays.items()}), hi - lo)
            for lo, hi in bounds
        ]
    )
    stale = [c for c in table.column_names if c.startswith("stats/") and c[6:].rsplit("/", 1)[0] in arrays]
    table = table.drop_columns(stale)
    for name in new.column_names:
        table = table.append_column(name, new[name])
    return table
