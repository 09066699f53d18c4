"""LeRobot dataset layout shared by the writer, the episode copier and the reader: path templates,
default features, data and episodes-metadata columns, info.json and stats.json, atomic file writes and
staged dataset folders, and parquet I/O that reports failures as DatasetError naming the file.

Format semantics follow LeRobot's v3.0 and v2.1 layouts (LeRobot 0.4.4's
``lerobot/datasets/v30`` format and its dataset docs); nothing here is
LeRobot code.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.normalize import FeatureStats, stats_to_json

V30 = "v3.0"
V21 = "v2.1"
SUPPORTED_VERSIONS = (V30, V21, "v2.0")  # codebase_version values the reader accepts
INFO_FIELDS = ("fps", "features", "total_episodes", "total_frames", "data_path")  # required in info.json
INFO = "meta/info.json"
STATS = "meta/stats.json"
TASKS_V30 = "meta/tasks.parquet"
TASKS_V21 = "meta/tasks.jsonl"
EPISODES_V21 = "meta/episodes.jsonl"
EPISODES_DIR_V30 = "meta/episodes"
EPISODES_PATH_V30 = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DATA_PATH_V30 = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH_V30 = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
CHUNKS_SIZE = 1000
DATA_FILES_SIZE_MB = 100
VIDEO_FILES_SIZE_MB = 200
SOURCE_COLUMN = "source"  # robot_rl's per-episode origin (keys.SOURCES), an extra episodes column

DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    keys.TIMESTAMP: {"dtype": "float32", "shape": [1], "names": None},
    keys.FRAME_INDEX: {"dtype": "int64", "shape": [1], "names": None},
    keys.EPISODE_INDEX: {"dtype": "int64", "shape": [1], "names": None},
    keys.INDEX: {"dtype": "int64", "shape": [1], "names": None},
    keys.TASK_INDEX: {"dtype": "int64", "shape": [1], "names": None},
}
DTYPES = ("float32", "float64", "int64", "int32", "bool", "video", "image")
_ARROW_TYPES = {
    "float32": pa.float32(),
    "float64": pa.float64(),
    "int64": pa.int64(),
    "int32": pa.int32(),
    "bool": pa.bool_(),
}


def arrow_column(arr: np.ndarray, feature: dict) -> pa.Array:
    """One data-parquet column holding a feature's frames, as LeRobot stores it.

    Args:
        arr: (T, *shape) values, already of the feature's dtype; a shape-[1] feature may be (T,).
        feature: the info.json entry: ``dtype`` (float32, float64, int64, int32 or bool) and ``shape``.
    Returns: a scalar column for shape [1], ``list<dtype>`` for a vector, nested lists beyond.
    Raises KeyError for a dtype with no data column (video, image): callers check dtypes first.
    """
    typ = _ARROW_TYPES[feature["dtype"]]
    flat = pa.array(arr.reshape(-1), typ)
    if list(feature["shape"]) == [1]:
        return flat
    for dim in reversed(arr.shape[1:]):
        flat = pa.ListArray.from_arrays(pa.array(np.arange(0, len(flat) + 1, dim, dtype=np.int32)), flat)
    return flat


def info_v30(
    features: dict[str, dict],
    fps: int,
    robot_type: str,
    total_episodes: int,
    total_frames: int,
    total_tasks: int,
    data_files_size_in_mb: float = DATA_FILES_SIZE_MB,
    video_files_size_in_mb: float = VIDEO_FILES_SIZE_MB,
) -> dict[str, Any]:
    """``meta/info.json`` of a v3.0 dataset in the writer's layout (data and video paths by chunk and
    file, one split ``train`` holding every episode); ``video_path`` is None when no feature is a video.

    Args:
        features: full info.json features, the default columns (:data:`DEFAULT_FEATURES`) included.
        fps, robot_type: as recorded.
        total_episodes, total_frames, total_tasks: the dataset's counts.
        data_files_size_in_mb, video_files_size_in_mb: the target file sizes the dataset is packed to
            (integers are written as integers, as LeRobot does).
    """
    has_video = any(feat["dtype"] == "video" for feat in features.values())
    return {
        "codebase_version": V30,
        "robot_type": robot_type,
        "total_episodes": total_episodes,
        "total_frames": total_frames,
        "total_tasks": total_tasks,
        "chunks_size": CHUNKS_SIZE,
        "fps": fps,
        "splits": {"train": f"0:{total_episodes}"},
        "data_path": DATA_PATH_V30,
        "video_path": VIDEO_PATH_V30 if has_video else None,
        "features": features,
        "data_files_size_in_mb": _number(data_files_size_in_mb),
        "video_files_size_in_mb": _number(video_files_size_in_mb),
    }


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def video_columns(key: str, chunk: int, file: int, length: int, fps: int) -> dict[str, Any]:
    """Episodes-metadata columns of an episode whose video ``key`` is the whole of mp4 (chunk, file):
    its chunk and file index and its span, 0 to ``length / fps`` seconds."""
    return {
        f"videos/{key}/chunk_index": chunk,
        f"videos/{key}/file_index": file,
        f"videos/{key}/from_timestamp": 0.0,
        f"videos/{key}/to_timestamp": length / fps,
    }


def stats_columns(stats: dict[str, FeatureStats], length: int) -> dict[str, Any]:
    """Episodes-metadata columns of an episode's statistics, in ``stats`` order: ``stats/<key>/<name>``
    (mean, std, min, max, q01..q99 as float64 lists) and ``stats/<key>/count`` = [``length``]."""
    row: dict[str, Any] = {}
    for key, s in stats.items():
        for name, value in s.present().items():
            row[f"stats/{key}/{name}"] = value.astype(np.float64).tolist()
        row[f"stats/{key}/count"] = [length]
    return row


def stats_json_tree(stats: dict[str, FeatureStats], counts: int | dict[str, int]) -> dict[str, Any]:
    """``meta/stats.json`` content in LeRobot's layout: per key the statistics and ``count`` ([frames the
    statistics cover]; ``counts`` is one number for every key or one per key)."""
    tree = stats_to_json(stats)
    for key, entry in tree.items():
        entry["count"] = [counts if isinstance(counts, int) else counts[key]]
    return tree


def write_stats_json(path: Path, stats: dict[str, FeatureStats], counts: int | dict[str, int]) -> None:
    """Write ``meta/stats.json`` atomically with ``stats_json_tree(stats, counts)``."""
    atomic_write_json(path, stats_json_tree(stats, counts))


def check_episode_ids(root: Path | str, episodes: Sequence[int], num_episodes: int) -> list[int]:
    """``episodes`` as a list of ints. Raises DatasetError naming ``root`` and the first index outside
    0..num_episodes-1."""
    ids = [int(e) for e in episodes]
    bad = [e for e in ids if not 0 <= e < num_episodes]
    if bad:
        raise DatasetError(
            f"{root}: episode {bad[0]} out of range: the dataset has {num_episodes} episodes "
            f"(0..{num_episodes - 1})"
        )
    return ids


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary sibling, fsync it, then ``os.replace`` it onto ``path`` (creating
    its folder), so ``path`` holds the old or the new content, never part. OSError (naming ``path``)
    propagates, and the temporary file is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from err


def atomic_write_json(path: Path, tree: Any) -> None:
    """Write ``tree`` as indented JSON through :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, (json.dumps(tree, indent=4) + "\n").encode())


def atomic_write_parquet(path: Path, table: pa.Table) -> None:
    """Write ``table`` to ``path`` through a temporary file and ``os.replace``; on failure the temporary
    file is removed and the OSError (naming ``path``) propagates."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise OSError(err.errno, err.strerror, str(path)) from err


@contextmanager
def staged_destination(
    dst: str | Path,
    overwrite: bool = False,
    replaceable: Callable[[Path], bool] | None = None,
    kind: str = "a LeRobot dataset, an empty folder or a folder of them",
) -> Iterator[Path]:
    """Yield an empty hidden folder next to ``dst``; when the block succeeds it is renamed to ``dst``
    (replacing the old one when ``overwrite``), when it raises it is deleted and ``dst`` is untouched.

    ``replaceable(dst)`` says whether an existing ``dst`` may be replaced, and ``kind`` names what may
    be; the default accepts a LeRobot dataset, an empty folder or a folder of LeRobot datasets.

    Raises DatasetError naming ``dst`` if it exists and ``overwrite`` is false, or if it is not replaceable.
    """
    dst = Path(dst)
    if dst.exists() or dst.is_symlink():
        if not overwrite:
            raise DatasetError(f"{dst}: destination already exists; pass overwrite=True (--overwrite)")
        if not (replaceable or _replaceable)(dst):
            raise DatasetError(f"{dst}: refusing to overwrite: not {kind}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if dst.exists():
        old = dst.with_name(f".{dst.name}.old-{os.getpid()}")
        os.rename(dst, old)
        os.rename(tmp, dst)
        shutil.rmtree(old)
    else:
        os.rename(tmp, dst)


def _replaceable(path: Path) -> bool:
    if not path.is_dir() or path.is_symlink():
        return False
    children = list(path.iterdir())
    return (
        not children or (path / INFO).is_file() or all(c.is_dir() and (c / INFO).is_file() for c in children)
    )


def read_json(path: Path) -> Any:
    """Parse a JSON file. Raises DatasetError naming the file when it is missing or invalid."""
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DatasetError(f"{path}: not valid JSON: {err}") from err


def read_jsonl(path: Path) -> list[dict]:
    """Parse a JSON-lines file. Raises DatasetError naming the file (and line) on failure."""
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    out = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise DatasetError(f"{path}:{n}: not valid JSON: {err}") from err
    return out


def flat_values(arr: pa.Array) -> pa.Array:
    """The leaf values of a (possibly nested) list, large_list or fixed_size_list column; ``arr`` itself
    when it is not a list."""
    is_list = (pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list)
    while any(test(arr.type) for test in is_list):
        arr = arr.flatten()
    return arr


def read_parquet(path: Path, columns: list[str] | None = None) -> pa.Table:
    """Read a parquet file. Raises DatasetError naming the file when it is missing, unreadable or
    corrupt, or naming the file and column when a requested column is absent."""
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as err:
        raise DatasetError(f"{path}: unreadable parquet file: {err}") from err
    for col in columns or []:
        if col not in schema.names:
            raise DatasetError(f"{path}: missing column {col!r} (has {schema.names})")
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as err:
        raise DatasetError(f"{path}: unreadable parquet file: {err}") from err


def tasks_table(tasks: list[str]) -> pa.Table:
    """``meta/tasks.parquet`` as LeRobot writes it through pandas: column ``task_index`` and the task
    strings as the pandas index (stored as ``__index_level_0__`` with pandas metadata)."""
    table = pa.table(
        {
            "task_index": pa.array(range(len(tasks)), pa.int64()),
            "__index_level_0__": pa.array(tasks, pa.string()),
        }
    )
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def tasks_from_table(table: pa.Table, path: Path) -> list[str]:
    """Task strings ordered by task_index from a v3.0 tasks.parquet (pandas index or a ``task`` column).
    Raises DatasetError naming ``path`` for a missing column or a task_index out of range."""
    names = table.column_names
    if "task_index" not in names:
        raise DatasetError(f"{path}: missing column 'task_index'")
    text_col = next((c for c in ("task", "__index_level_0__", "index") if c in names), None)
    if text_col is None:
        raise DatasetError(f"{path}: missing the task text column ('task' or the pandas index)")
    index = table.column("task_index").to_pylist()
    text = table.column(text_col).to_pylist()
    out: list[str | None] = [None] * len(index)
    for i, t in zip(index, text, strict=True):
        if not 0 <= i < len(index):
            raise DatasetError(f"{path}: task_index {i} out of range 0..{len(index) - 1}")
        out[i] = t
    return out  # type: ignore[return-value]
