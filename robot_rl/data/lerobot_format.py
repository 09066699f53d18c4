"""LeRobot dataset layout shared by the writer and the reader: path templates, default features,
atomic file writes and parquet I/O that reports failures as DatasetError naming the file.

Format semantics follow LeRobot's v3.0 and v2.1 layouts (ANCHORS.md, "Dataset v3.0"); nothing here is
LeRobot code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from robot_rl import keys
from robot_rl.data.errors import DatasetError

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


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary sibling, fsync it, then ``os.replace`` it onto ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_write_json(path: Path, tree: Any) -> None:
    atomic_write_bytes(path, (json.dumps(tree, indent=4) + "\n").encode())


def atomic_write_parquet(path: Path, table: pa.Table) -> None:
    """Write ``table`` to ``path`` through a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    pq.write_table(table, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
    """Task strings ordered by task_index from a v3.0 tasks.parquet (pandas index or a ``task`` column)."""
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
