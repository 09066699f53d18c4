"""Validate a LeRobot dataset (v3.0 or v2.1) and report every problem found, not just the first.

Checks, each independent so one problem does not hide another:
- ``meta/info.json`` parses and has the fields a reader needs;
- the dataset is not empty;
- every data parquet opens and has a column for every non-video feature, with no nulls;
- float features hold no NaN or inf;
- timestamps increase and ``frame_index`` counts 0, 1, ... within each episode;
- the frame and episode counts of the data files match ``info.json``;
- each video feature's declared codec (``info.video.codec``) is one PyAV can decode;
- the metadata is consistent (the reader's own structural checks: episodes, tasks, indices);
- every video file opens, has the declared height and width, and holds at least as many frames as the
  parquet rows of its episodes need.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pyarrow as pa

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.reader import LeRobotDataset

_FLOAT_DTYPES = ("float32", "float64", "float16")


def validate_dataset(root: str | Path) -> list[str]:
    """All problems found in the dataset at ``root``, each a message naming the file (and key).

    Returns an empty list for a valid dataset. Never raises for a bad dataset; a missing or unparsable
    ``meta/info.json`` is reported as the only problem, since nothing else can be checked without it.
    """
    root = Path(root)
    try:
        info = fmt.read_json(root / fmt.INFO)
    except DatasetError as err:
        return [str(err)]
    problems = _check_info(root, info)
    if problems:
        return problems
    features: dict[str, dict] = info["features"]
    problems += _check_codecs(root, features)
    frames, episodes = _check_data_files(root, features, problems)
    if frames == 0:
        problems.append(f"{root}: the dataset is empty (no frames in {root / 'data'})")
    for field, actual in (("total_frames", frames), ("total_episodes", episodes)):
        if int(info[field]) != actual:
            problems.append(f"{root / fmt.INFO}: {field} is {info[field]} but the data files hold {actual}")
    problems += _check_with_reader(root)
    return list(dict.fromkeys(problems))  # one line per distinct problem, in the order found


def _check_info(root: Path, info: dict) -> list[str]:
    path = root / fmt.INFO
    if not isinstance(info, dict):
        return [f"{path}: top level must be a JSON object"]
    missing = [f for f in ("codebase_version", *fmt.INFO_FIELDS) if f not in info]
    if missing:
        return [f"{path}: missing field {f!r}" for f in missing]
    if info["codebase_version"] not in fmt.SUPPORTED_VERSIONS:
        return [f"{path}: unsupported codebase_version {info['codebase_version']!r}"]
    return []


def _check_codecs(root: Path, features: dict[str, dict]) -> list[str]:
    problems = []
    for key, feat in features.items():
        if feat.get("dtype") != "video":
            continue
        codec = (feat.get("info") or {}).get("video.codec")
        if codec is None:
            continue
        try:
            av.Codec(codec, "r")
        except Exception:  # noqa: BLE001 - PyAV raises UnknownCodecError or ValueError by version
            problems.append(
                f"{root / fmt.INFO}: video {key!r} declares codec {codec!r}, which PyAV cannot decode"
            )
    return problems


def _check_data_files(root: Path, features: dict[str, dict], problems: list[str]) -> tuple[int, int]:
    """Per-file column, null, NaN and timestamp checks; returns (frames, distinct episodes) found."""
    tabular = [k for k, f in features.items() if f.get("dtype") != "video"]
    frames, episodes = 0, set()
    for path in sorted((root / "data").rglob("*.parquet")):
        try:
            table = fmt.read_parquet(path)
        except DatasetError as err:
            problems.append(str(err))
            continue
        missing = [k for k in tabular if k not in table.column_names]
        if missing:
            problems.append(f"{path}: missing column(s) {missing} declared in {root / fmt.INFO}")
        frames += table.num_rows
        for key in tabular:
            if key not in table.column_names:
                continue
            column = table.column(key)
            if column.null_count:
                problems.append(f"{path}: column {key!r} has {column.null_count} null values")
            if features[key].get("dtype") in _FLOAT_DTYPES:
                bad = _non_finite(column)
                if bad:
                    problems.append(f"{path}: column {key!r} has {bad} NaN/inf values")
        if keys.EPISODE_INDEX in table.column_names:
            episode = table.column(keys.EPISODE_INDEX).to_numpy()
            episodes.update(np.unique(episode).tolist())
            problems += _check_time(path, table, episode)
    return frames, len(episodes)


def _non_finite(column: pa.ChunkedArray) -> int:
    arr = fmt.flat_values(column.combine_chunks()).to_numpy(zero_copy_only=False).astype(np.float64)
    return int(np.count_nonzero(~np.isfinite(arr)))


def _check_time(path: Path, table: pa.Table, episode: np.ndarray) -> list[str]:
    problems = []
    has_ts, has_fi = keys.TIMESTAMP in table.column_names, keys.FRAME_INDEX in table.column_names
    ts = table.column(keys.TIMESTAMP).to_numpy().astype(np.float64) if has_ts else None
    fi = table.column(keys.FRAME_INDEX).to_numpy() if has_fi else None
    for ep in np.unique(episode):
        rows = np.flatnonzero(episode == ep)
        if ts is not None and np.any(np.diff(ts[rows]) <= 0):
            step = int(np.argmax(np.diff(ts[rows]) <= 0))
            problems.append(
                f"{path}: episode {ep}: timestamps are not increasing at frame {step + 1} "
                f"({ts[rows][step]:.4f}s then {ts[rows][step + 1]:.4f}s)"
            )
        if fi is not None and not np.array_equal(fi[rows], np.arange(len(rows))):
            problems.append(f"{path}: episode {ep}: frame_index is not 0..{len(rows) - 1}")
    return problems


def _check_with_reader(root: Path) -> list[str]:
    """The reader's structural checks, then every video against its episodes' frame counts."""
    try:
        ds = LeRobotDataset(root)
    except DatasetError as err:
        return [str(err)]
    problems = []
    try:
        for key in ds.video_keys:
            problems += ds.video_problems(key)
    except DatasetError as err:
        problems.append(str(err))
    finally:
        ds.close()
    return problems
