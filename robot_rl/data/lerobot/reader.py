"""Read LeRobot datasets (v3.0 and v2.1 layouts) with pyarrow + PyAV, returning LeRobot-style items.

Semantics follow LeRobot's ``LeRobotDataset`` (format knowledge only, no LeRobot code): an item is a dict
of torch tensors for one frame; images come back float32 (3, H, W) in [0, 1]; with ``delta_timestamps``
a key is stacked over the offsets and ``<key>_is_pad`` marks offsets outside the episode, whose values
repeat the episode's edge frame.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import torch

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.video import VideoDecoder
from robot_rl.data.normalize import EXTRA_QUANTILES, STAT_NAMES, FeatureStats, compute_stats, stats_from_json


def _to_numpy(col: pa.ChunkedArray, shape: list[int], path: Path, key: str) -> np.ndarray:
    """Arrow column -> numpy (N, *shape) (shape [1] -> (N,)). Raises DatasetError on a shape mismatch."""
    arr = col.combine_chunks()
    n = len(arr)
    if arr.null_count:
        raise DatasetError(f"{path}: column {key!r} has {arr.null_count} null values")
    values = fmt.flat_values(arr)
    if values is not arr:
        out = values.to_numpy(zero_copy_only=False)
        if out.size != n * int(np.prod(shape)):
            raise DatasetError(
                f"{path}: column {key!r} holds {out.size} values for {n} rows; features declare shape {shape}"
            )
        return out.reshape(n, *shape)
    if list(shape) != [1]:
        raise DatasetError(f"{path}: column {key!r} is scalar but features declare shape {shape}")
    return arr.to_numpy(zero_copy_only=False)


class LeRobotDataset(torch.utils.data.Dataset):
    """A LeRobot v3.0 or v2.1 dataset on local disk.

    Args:
        root: dataset folder (holding ``meta/info.json``).
        delta_timestamps: ``{key: [offset_s, ...]}``; each offset must be a multiple of 1/fps (within
            ``tolerance_s``). The key is then returned stacked as (len(offsets), ...) plus
            ``<key>_is_pad`` bool (len(offsets),).
        tolerance_s: tolerance for matching video frames to timestamps and offsets to the frame grid.
        decode_threads: threads decoding the frames of one request in parallel (0 = automatic,
            :func:`robot_rl.data.lerobot.video.default_decode_threads`).

    ``dataset[i]`` -> dict: every non-video feature as a tensor (shape-[1] features as 0-d tensors),
    every video key as float32 (3, H, W) in [0, 1] (or (n, 3, H, W) with deltas), ``task`` str.

    DataLoader workers: pass ``multiprocessing_context="spawn"`` (or "forkserver"). The dataset pickles
    without its open video containers and each worker opens its own. With the default fork the decoder
    also reopens containers per process, but forking a parent that runs decoder or zarr threads can
    deadlock a worker.

    Raises DatasetError (naming the file and key) for a missing file, unreadable/corrupt parquet, missing
    column, feature shape mismatch, info.json totals that do not match the metadata or data, and
    unreadable video (on access).
    """

    def __init__(
        self,
        root: str | Path,
        delta_timestamps: dict[str, list[float]] | None = None,
        tolerance_s: float = 1e-4,
        decode_threads: int = 0,
    ) -> None:
        self.root = Path(root)
        self.tolerance_s = tolerance_s
        info_path = self.root / fmt.INFO
        self.info: dict = fmt.read_json(info_path)
        self.version = self.info.get("codebase_version")
        if self.version not in fmt.SUPPORTED_VERSIONS:
            raise DatasetError(
                f"{info_path}: unsupported codebase_version {self.version!r}; reads {fmt.SUPPORTED_VERSIONS}"
            )
        for field in fmt.INFO_FIELDS:
            if field not in self.info:
                raise DatasetError(f"{info_path}: missing field {field!r}")
        self.fps = int(self.info["fps"])
        self.features: dict[str, dict] = self.info["features"]
        self.video_keys = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        if any(f.get("dtype") == "image" for f in self.features.values()):
            raise DatasetError(f"{info_path}: image (non-video) features are not supported")
        self._tabular_keys = [k for k in self.features if k not in self.video_keys]
        if self.version == fmt.V30:
            self._load_meta_v30()
        else:
            self._load_meta_v21()
        self._check_totals(info_path)
        self._load_data()
        self._decoder = VideoDecoder(tolerance_s, threads=decode_threads)
        self.delta_timestamps = self._check_deltas(delta_timestamps or {})

    # -- metadata ------------------------------------------------------------------------------------
    def _load_meta_v30(self) -> None:
        tasks_path = self.root / fmt.TASKS_V30
        self.tasks: list[str] = fmt.tasks_from_table(fmt.read_parquet(tasks_path), tasks_path)
        ep_dir = self.root / fmt.EPISODES_DIR_V30
        files = sorted(ep_dir.glob("chunk-*/file-*.parquet"))
        if not files:
            raise DatasetError(f"{ep_dir}: no episodes metadata files (chunk-*/file-*.parquet)")
        required = [
            "episode_index",
            "dataset_from_index",
            "dataset_to_index",
            "data/chunk_index",
            "data/file_index",
            "tasks",
        ]
        for key in self.video_keys:
            required += [f"videos/{key}/{c}" for c in ("chunk_index", "file_index", "from_timestamp")]
        rows: list[dict] = []
        for path in files:
            table = fmt.read_parquet(path)
            missing = [c for c in required if c not in table.column_names]
            if missing:
                raise DatasetError(f"{path}: missing column {missing[0]!r}")
            cols = required + ([fmt.SOURCE_COLUMN] if fmt.SOURCE_COLUMN in table.column_names else [])
            rows += table.select(cols).to_pylist()
        rows.sort(key=lambda r: r["episode_index"])
        self._episodes = rows
        self._episodes_file = files[0] if len(files) == 1 else ep_dir
        self.episode_from = np.array([r["dataset_from_index"] for r in rows], dtype=np.int64)
        self.episode_to = np.array([r["dataset_to_index"] for r in rows], dtype=np.int64)
        self.episode_sources: list[str] | None = (
            [r[fmt.SOURCE_COLUMN] for r in rows] if rows and fmt.SOURCE_COLUMN in rows[0] else None
        )

    def _load_meta_v21(self) -> None:
        tasks_path = self.root / fmt.TASKS_V21
        task_rows = sorted(fmt.read_jsonl(tasks_path), key=lambda r: r.get("task_index", 0))
        try:
            self.tasks = [r["task"] for r in task_rows]
        except KeyError as err:
            raise DatasetError(f"{tasks_path}: missing key {err}") from err
        ep_path = self.root / fmt.EPISODES_V21
        rows = sorted(fmt.read_jsonl(ep_path), key=lambda r: r.get("episode_index", 0))
        for r in rows:
            for key in ("episode_index", "length"):
                if key not in r:
                    raise DatasetError(f"{ep_path}: an episode lacks key {key!r}")
        self._episodes = rows
        self._episodes_file = ep_path
        lengths = np.array([r["length"] for r in rows], dtype=np.int64)
        self.episode_to = np.cumsum(lengths)
        self.episode_from = self.episode_to - lengths
        self.episode_sources = (
            [r[fmt.SOURCE_COLUMN] for r in rows] if rows and fmt.SOURCE_COLUMN in rows[0] else None
        )

    def _check_totals(self, info_path: Path) -> None:
        ids = [r["episode_index"] for r in self._episodes]
        if ids != list(range(len(ids))):
            raise DatasetError(f"{self._episodes_file}: episode_index is not 0..{len(ids) - 1}")
        checks = [
            ("total_episodes", len(self._episodes), "episodes in " + str(self._episodes_file)),
            ("total_frames", int(self.episode_to[-1]) if len(ids) else 0, "frames in the episodes metadata"),
        ]
        if "total_tasks" in self.info:
            checks.append(("total_tasks", len(self.tasks), "tasks in the tasks file"))
        for field, actual, what in checks:
            if int(self.info[field]) != actual:
                raise DatasetError(
                    f"{info_path}: {field} is {self.info[field]} but there are {actual} {what}"
                )
        if len(ids) and (
            np.any(self.episode_to <= self.episode_from)
            or self.episode_from[0] != 0
            or np.any(self.episode_from[1:] != self.episode_to[:-1])
        ):
            raise DatasetError(f"{self._episodes_file}: episode from/to indices are not contiguous")

    # -- data ----------------------------------------------------------------------------------------
    def _data_files(self) -> list[Path]:
        tmpl, size = self.info["data_path"], int(self.info.get("chunks_size", fmt.CHUNKS_SIZE))
        if self.version == fmt.V30:
            pairs = sorted({(r["data/chunk_index"], r["data/file_index"]) for r in self._episodes})
            return [self.root / tmpl.format(chunk_index=c, file_index=f) for c, f in pairs]
        return [
            self.root
            / tmpl.format(episode_chunk=r["episode_index"] // size, episode_index=r["episode_index"])
            for r in self._episodes
        ]

    def _episodes_by_file(self) -> dict[Path, np.ndarray]:
        """v3.0: the episode indices the metadata places in each data file (int64 arrays)."""
        tmpl, out = self.info["data_path"], {}
        for r in self._episodes:
            path = self.root / tmpl.format(chunk_index=r["data/chunk_index"], file_index=r["data/file_index"])
            out.setdefault(path, []).append(r["episode_index"])
        return {path: np.array(eps, dtype=np.int64) for path, eps in out.items()}

    def _load_data(self) -> None:
        cols: dict[str, list[np.ndarray]] = {k: [] for k in self._tabular_keys}
        files = self._data_files()
        owned = self._episodes_by_file() if self.version == fmt.V30 else {}
        for path in files:
            table = fmt.read_parquet(path, columns=self._tabular_keys)
            if path in owned and keys.EPISODE_INDEX in table.column_names:
                # A file may also hold rows of episodes the metadata places elsewhere: a writer killed while
                # packing files leaves them until it resumes. Only the metadata's episodes count.
                mask = np.isin(table.column(keys.EPISODE_INDEX).to_numpy(), owned[path])
                if not mask.all():
                    table = table.filter(pa.array(mask))
            for key in self._tabular_keys:
                cols[key].append(_to_numpy(table.column(key), self.features[key]["shape"], path, key))
        self._cols = {k: np.concatenate(v) if v else np.zeros((0,)) for k, v in cols.items()}
        where = files[0] if len(files) == 1 else self.root / "data"
        n = len(self._cols[keys.INDEX]) if keys.INDEX in self._cols else 0
        if n != self.num_frames:
            raise DatasetError(
                f"{where}: data files hold {n} frames but info.json total_frames is {self.num_frames}"
            )
        for key in (keys.INDEX, keys.EPISODE_INDEX, keys.TIMESTAMP, keys.TASK_INDEX):
            if key not in self._cols:
                raise DatasetError(f"{self.root / fmt.INFO}: features lack the default key {key!r}")
        index = self._cols[keys.INDEX]
        if not np.array_equal(index, np.arange(n)):
            order = np.argsort(index, kind="stable")
            if not np.array_equal(index[order], np.arange(n)):
                raise DatasetError(f"{where}: column 'index' is not a permutation of 0..{n - 1}")
            self._cols = {k: v[order] for k, v in self._cols.items()}
        lengths = self.episode_to - self.episode_from
        expected = np.repeat(np.arange(self.num_episodes), lengths)
        if not np.array_equal(self._cols[keys.EPISODE_INDEX], expected):
            raise DatasetError(f"{where}: column 'episode_index' disagrees with {self._episodes_file}")
        self._episode_of = expected
        bad = self._cols[keys.TASK_INDEX][
            (self._cols[keys.TASK_INDEX] < 0) | (self._cols[keys.TASK_INDEX] >= len(self.tasks))
        ]
        if len(bad):
            raise DatasetError(
                f"{where}: column 'task_index' has {bad[0]}, outside the {len(self.tasks)} tasks"
            )

    def _check_deltas(self, deltas: dict[str, list[float]]) -> dict[str, np.ndarray]:
        out = {}
        for key, values in deltas.items():
            if key not in self.features:
                raise DatasetError(f"{self.root / fmt.INFO}: delta_timestamps key {key!r} is not a feature")
            steps = np.asarray(values, dtype=np.float64) * self.fps
            offsets = np.round(steps).astype(np.int64)
            if np.any(np.abs(steps - offsets) / self.fps > self.tolerance_s):
                raise DatasetError(
                    f"{self.root}: delta_timestamps[{key!r}] = {values} are not multiples of "
                    f"1/fps = {1 / self.fps:.6f}s within tolerance {self.tolerance_s}s"
                )
            out[key] = offsets
        return out

    # -- public API ----------------------------------------------------------------------------------
    @property
    def num_episodes(self) -> int:
        return len(self._episodes)

    @property
    def num_frames(self) -> int:
        return int(self.episode_to[-1]) if self.num_episodes else 0

    def __len__(self) -> int:
        return self.num_frames

    def video_path(self, ep: int, key: str) -> tuple[Path, float]:
        """(mp4 path, start time in seconds of the episode within that file) for episode ``ep``."""
        if key not in self.video_keys:
            raise DatasetError(f"{self.root / fmt.INFO}: {key!r} is not a video feature")
        tmpl = self.info.get("video_path")
        if not tmpl:
            raise DatasetError(f"{self.root / fmt.INFO}: video feature {key!r} but no 'video_path' template")
        row = self._episodes[ep]
        if self.version == fmt.V30:
            c, f = row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"]
            return self.root / tmpl.format(video_key=key, chunk_index=c, file_index=f), float(
                row[f"videos/{key}/from_timestamp"]
            )
        size = int(self.info.get("chunks_size", fmt.CHUNKS_SIZE))
        return self.root / tmpl.format(episode_chunk=ep // size, video_key=key, episode_index=ep), 0.0

    def episode_of(self, rows: np.ndarray) -> np.ndarray:
        """Episode index of each dataset row: int64 (len(rows),)."""
        return self._episode_of[np.asarray(rows, dtype=np.int64)]

    def video_frames(self, key: str, rows: np.ndarray, size: tuple[int, int] | None = None) -> np.ndarray:
        """Frames of video ``key`` at dataset ``rows`` (any episodes, any order): (len(rows), H, W, 3)
        uint8, at native resolution or scaled to ``size`` = (H, W). The rows of each video file are decoded
        in one request (episodes packed into one file share it). Raises DatasetError naming the file."""
        rows = np.asarray(rows, dtype=np.int64)
        episodes = self._episode_of[rows]
        by_file: dict[Path, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        for ep in np.unique(episodes).tolist():
            path, start = self.video_path(ep, key)
            where = np.flatnonzero(episodes == ep)
            picks, times = by_file.setdefault(path, ([], []))
            picks.append(where)
            times.append(start + self._cols[keys.TIMESTAMP][rows[where]].astype(np.float64))
        out: np.ndarray | None = None
        for path, (picks, times) in by_file.items():
            got = self._decoder.decode(path, np.concatenate(times), size)
            if out is None:
                out = np.empty((len(rows), *got.shape[1:]), dtype=np.uint8)
            out[np.concatenate(picks)] = got
        if out is None:
            raise DatasetError(f"{self.root}: video_frames({key!r}) needs at least one row")
        return out

    def __getitem__(self, idx: int) -> dict:
        idx = int(idx)
        if idx < 0:
            idx += len(self)
        if not 0 <= idx < len(self):
            raise IndexError(f"index {idx} out of range for {len(self)} frames")
        ep = int(self._episode_of[idx])
        lo, hi = int(self.episode_from[ep]), int(self.episode_to[ep])
        item: dict = {}
        for key in self._tabular_keys + self.video_keys:
            if key in self.delta_timestamps:
                query = idx + self.delta_timestamps[key]
                rows = np.clip(query, lo, hi - 1)
                item[f"{key}_is_pad"] = torch.from_numpy((query < lo) | (query >= hi))
            else:
                rows = np.array([idx])
            if key in self.video_keys:
                frames = torch.from_numpy(self.video_frames(key, rows))
                frames = frames.permute(0, 3, 1, 2).float().div_(255.0)
                item[key] = frames if key in self.delta_timestamps else frames[0]
            else:
                value = self._cols[key][rows]
                value = value if key in self.delta_timestamps else value[0]
                item[key] = torch.from_numpy(value.copy()) if value.ndim else torch.tensor(value)
        item[keys.TASK] = self.tasks[int(self._cols[keys.TASK_INDEX][idx])]
        return item

    def load_tabular(self) -> dict[str, np.ndarray]:
        """All non-video columns for all frames, {key: (N, *shape)} (shape-[1] keys as (N,)), in index
        order. The fast path for state-only training: no video is decoded."""
        return {k: v.copy() for k, v in self._cols.items()}

    def episode_video(self, ep: int, key: str, size: tuple[int, int] | None = None) -> np.ndarray:
        """Every frame of episode ``ep`` for video ``key``: (T, H, W, 3) uint8 RGB, native or scaled to
        ``size`` = (H, W)."""
        if not 0 <= ep < self.num_episodes:
            raise IndexError(f"episode {ep} out of range for {self.num_episodes} episodes")
        return self.video_frames(key, np.arange(self.episode_from[ep], self.episode_to[ep]), size)

    def stats(self) -> dict[str, FeatureStats]:
        """Normalisation statistics from ``meta/stats.json`` (v3.0) with any missing quantiles (LeRobot
        files often lack q01/q99, older files q10/q50/q90) computed from the tabular data, or min/max for
        videos (whose q10/q50/q90 stay None when absent). Without a stats.json (v2.1) the tabular
        features' statistics are computed from the data."""
        path = self.root / fmt.STATS
        tree = fmt.read_json(path) if path.is_file() else {}
        computed: dict[str, FeatureStats] | None = None
        out = {}
        for key in self.features:
            entry = dict(tree.get(key, {}))
            if all(n in entry for n in STAT_NAMES):
                out.update(stats_from_json({key: entry}, source=str(path)))
                if key in self._cols and any(n not in entry for n in EXTRA_QUANTILES):
                    computed = computed or compute_stats({k: v for k, v in self._cols.items()})
                    for name in EXTRA_QUANTILES:
                        setattr(out[key], name, getattr(computed[key], name))
                continue
            if key in self.video_keys:
                if all(n in entry for n in ("mean", "std", "min", "max")):
                    entry.setdefault("q01", entry["min"])
                    entry.setdefault("q99", entry["max"])
                    out.update(stats_from_json({key: entry}, source=str(path)))
                continue
            if computed is None:
                computed = compute_stats({k: v for k, v in self._cols.items()})
            out[key] = computed[key]
        return out

    def video_problems(self, key: str) -> list[str]:
        """Every problem of video feature ``key``'s files, each naming the file: unreadable, fewer frames
        than the parquet rows of its episodes need, or a height and width other than the declared ones.
        Reads packet headers only (no decoding)."""
        if key not in self.video_keys:
            raise DatasetError(f"{self.root / fmt.INFO}: {key!r} is not a video feature")
        needed: dict[Path, int] = {}  # video file -> frames its episodes need
        for ep in range(self.num_episodes):
            path, start = self.video_path(ep, key)
            last = start + float(self._cols[keys.TIMESTAMP][self.episode_to[ep] - 1])
            needed[path] = max(needed.get(path, 0), round(last * self.fps) + 1)
        height, width = self.features[key]["shape"][:2]
        problems = []
        for path, need in needed.items():
            try:
                covered, h, w = self._decoder.duration(path)
            except DatasetError as err:
                problems.append(f"{err} (video {key!r})")
                continue
            have = round(covered * self.fps)
            if have < need:
                problems.append(
                    f"{path}: video {key!r} ends at {covered:.3f}s: it has {have} frames but the parquet "
                    f"rows of its episodes need {need}"
                )
            if (h, w) != (height, width):
                problems.append(f"{path}: video {key!r} is {h}x{w}, features declare {height}x{width}")
        return problems

    def verify_videos(self) -> None:
        """Check every video feature with :meth:`video_problems`. Raises DatasetError with the first."""
        for key in self.video_keys:
            problems = self.video_problems(key)
            if problems:
                raise DatasetError(problems[0])

    def close(self) -> None:
        self._decoder.close()
