"""Write robot_rl episodes as a LeRobot v3.0 dataset (parquet + mp4), durably, in LeRobot's packed layout.

Layout: ``meta/info.json``, ``meta/stats.json``, ``meta/tasks.parquet``,
``meta/episodes/chunk-CCC/file-FFF.parquet``, ``data/chunk-CCC/file-FFF.parquet`` and
``videos/<key>/chunk-CCC/file-FFF.mp4``, many episodes per file up to ``data_files_size_in_mb`` /
``video_files_size_in_mb`` (100 / 200 MB, LeRobot's defaults; see :mod:`robot_rl.data.lerobot.packing`).

Durability: :meth:`LeRobotWriter.add_episode` writes the episode's videos and data as files of their own,
then rewrites the newest episodes metadata file, tasks, stats and finally info.json, each through a
temporary file and ``os.replace``. Every ``pack_every`` episodes, and on :meth:`~LeRobotWriter.close`, the
episodes written one per file are packed into the dataset's big files (packets copied, never re-encoded),
a step that also keeps every committed episode readable at each instant. A process killed at any point
leaves a readable dataset holding every episode whose ``add_episode`` returned, plus at most files that no
metadata points at; reopening the root with a new writer deletes them and carries on (resume).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.packing import FileSizes, Stream, next_number, pack, remove_unreferenced
from robot_rl.data.lerobot.tools import evenly_spaced
from robot_rl.data.lerobot.video import codec_info_name, default_codec, encode_video
from robot_rl.data.normalize import EXTRA_QUANTILES, STAT_NAMES, FeatureStats, PooledStats, compute_stats

_IMAGE_STATS_FRAMES = 50  # frames sampled per episode for image statistics
_IMAGE_STATS_STRIDE = 4  # pixel stride within a sampled frame
EPISODES_PER_META_FILE = 1000  # episodes metadata rolls to a new file here, so each append is O(1)
PACK_EVERY = 10  # episodes written one per file before they are packed into the big files


def episodes_file_of(episode_index: int) -> tuple[int, int]:
    """(chunk, file) of the episodes metadata file that holds ``episode_index``."""
    return divmod(episode_index // EPISODES_PER_META_FILE, fmt.CHUNKS_SIZE)


class LeRobotWriter:
    """Appends episodes to a LeRobot v3.0 dataset at ``root``.

    Args:
        root: dataset folder. If it already holds ``meta/info.json`` the writer resumes it (fps and
            features must match, else DatasetError).
        fps: frames per second of every episode.
        features: info.json-style ``{key: {"dtype": "float32"|"float64"|"int64"|"bool"|"video",
            "shape": [...], "names": ...}}`` for the per-frame keys the caller supplies (video shape
            (H, W, 3)). timestamp/frame_index/episode_index/index/task_index are added by the writer.
        robot_type: stored in info.json.
        video_codec: PyAV encoder name; default
            :func:`robot_rl.data.lerobot.video.default_codec` (libsvtav1 AV1 when available, as LeRobot).
        file_sizes: target data and video file sizes (MB), recorded in info.json; default: a resumed
            dataset's own, else LeRobot's 100 / 200 MB. ``FileSizes(0, 0)`` keeps one file per episode.
        pack_every: pack after this many episodes written one per file (at least 1).

    Raises DatasetError naming the root/file and key on any bad feature spec or input.
    """

    def __init__(
        self,
        root: str | Path,
        fps: int,
        features: dict[str, dict],
        robot_type: str = "",
        video_codec: str | None = None,
        file_sizes: FileSizes | None = None,
        pack_every: int = PACK_EVERY,
    ) -> None:
        self.root = Path(root)
        if pack_every < 1:
            raise DatasetError(f"{self.root}: pack_every must be at least 1, got {pack_every}")
        self.pack_every = pack_every
        self.sizes = file_sizes or FileSizes()
        self.fps = int(fps)
        self.robot_type = robot_type
        self.video_codec = video_codec or default_codec()
        self.user_features = self._check_features(features)
        self.features = self._full_features(self.user_features)
        self.video_keys = [k for k, f in self.user_features.items() if f["dtype"] == "video"]
        self.episodes: list[dict[str, Any]] = []
        self.tasks: list[str] = []
        self._pooled = PooledStats()
        self._closed = False
        self._since_pack = 0  # episodes added since the last pack
        if (self.root / fmt.INFO).exists():
            self._resume(explicit_sizes=file_sizes is not None)

    # -- setup ---------------------------------------------------------------------------------------
    def _check_features(self, features: dict[str, dict]) -> dict[str, dict]:
        out = {}
        for key, feat in features.items():
            if key in fmt.DEFAULT_FEATURES:
                continue
            if not isinstance(feat, dict) or "dtype" not in feat or "shape" not in feat:
                raise DatasetError(f"{self.root}: feature {key!r} needs 'dtype' and 'shape'")
            if feat["dtype"] not in fmt.DTYPES or feat["dtype"] == "image":
                raise DatasetError(f"{self.root}: feature {key!r} has unsupported dtype {feat['dtype']!r}")
            shape = [int(d) for d in feat["shape"]]
            if feat["dtype"] == "video" and (len(shape) != 3 or shape[2] != 3):
                raise DatasetError(f"{self.root}: video feature {key!r} needs shape [H, W, 3], got {shape}")
            if feat["dtype"] == "video" and (shape[0] % 2 or shape[1] % 2):
                raise DatasetError(
                    f"{self.root}: video feature {key!r} needs even H and W (yuv420p), got {shape}"
                )
            out[key] = {"dtype": feat["dtype"], "shape": shape, "names": feat.get("names")}
        return out

    def _full_features(self, user: dict[str, dict]) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for key, feat in {**user, **copy.deepcopy(fmt.DEFAULT_FEATURES)}.items():
            feat = dict(feat)
            if feat["dtype"] == "video":
                h, w, c = feat["shape"]
                feat["names"] = feat.get("names") or ["height", "width", "channel"]
                feat["info"] = {
                    "video.height": h,
                    "video.width": w,
                    "video.codec": codec_info_name(self.video_codec),
                    "video.pix_fmt": "yuv420p",
                    "video.is_depth_map": False,
                    "video.fps": self.fps,
                    "video.channels": c,
                    "has_audio": False,
                }
            else:
                feat["fps"] = self.fps
            out[key] = feat
        return out

    def _resume(self, explicit_sizes: bool) -> None:
        """Load an existing dataset's metadata (the episodes files are the source of truth), delete the
        files no episode references (left by a kill)."""
        info_path = self.root / fmt.INFO
        info = fmt.read_json(info_path)
        if info.get("codebase_version") != fmt.V30:
            raise DatasetError(
                f"{info_path}: can only append to a {fmt.V30} dataset, found {info.get('codebase_version')!r}"
            )
        if int(info.get("fps", -1)) != self.fps:
            raise DatasetError(f"{info_path}: fps {info.get('fps')} differs from the writer's {self.fps}")
        existing = {k: (f["dtype"], list(f["shape"])) for k, f in info.get("features", {}).items()}
        wanted = {k: (f["dtype"], list(f["shape"])) for k, f in self.features.items()}
        if existing != wanted:
            raise DatasetError(f"{info_path}: features {existing} differ from the writer's {wanted}")
        self.robot_type = self.robot_type or info.get("robot_type", "")
        if not explicit_sizes:
            self.sizes = FileSizes(
                float(info.get("data_files_size_in_mb", fmt.DATA_FILES_SIZE_MB)),
                float(info.get("video_files_size_in_mb", fmt.VIDEO_FILES_SIZE_MB)),
            )
        tasks_path = self.root / fmt.TASKS_V30
        self.tasks = (
            fmt.tasks_from_table(fmt.read_parquet(tasks_path), tasks_path) if tasks_path.exists() else []
        )
        for ep_path in sorted((self.root / fmt.EPISODES_DIR_V30).glob("chunk-*/file-*.parquet")):
            rows = fmt.read_parquet(ep_path).to_pylist()
            for ep in rows:
                self._pooled.add(self._stats_from_row(ep, ep_path), int(ep["length"]))
            self.episodes += rows
        self.episodes.sort(key=lambda ep: int(ep["episode_index"]))
        remove_unreferenced(self.root, self.episodes, self.video_keys)
        self._write_meta(len(self.episodes) - 1)  # repairs info.json if a kill fell before it

    def _stats_from_row(self, row: dict, path: Path) -> dict[str, FeatureStats]:
        out = {}
        for key in self.features:
            try:
                values = {n: np.asarray(row[f"stats/{key}/{n}"], np.float32) for n in STAT_NAMES}
                values |= {  # q10/q50/q90: absent from episodes written before they were recorded
                    n: np.asarray(row[f"stats/{key}/{n}"], np.float32)
                    for n in EXTRA_QUANTILES
                    if row.get(f"stats/{key}/{n}") is not None
                }
            except KeyError as err:
                raise DatasetError(
                    f"{path}: episode {row.get('episode_index')} lacks statistics {err}; appending is only "
                    "supported to datasets written by LeRobotWriter"
                ) from err
            out[key] = FeatureStats(**values)
        return out

    # -- writing -------------------------------------------------------------------------------------
    @property
    def num_episodes(self) -> int:
        """Episodes in the dataset, those of a resumed dataset included."""
        return len(self.episodes)

    @property
    def num_frames(self) -> int:
        """Frames in the dataset (the next episode's first ``index``)."""
        return int(self.episodes[-1]["dataset_to_index"]) if self.episodes else 0

    def _validate(self, frames: dict[str, np.ndarray], task: str, source: str) -> tuple[dict, int]:
        if self._closed:
            raise DatasetError(f"{self.root}: writer is closed")
        if source not in keys.SOURCES:
            raise DatasetError(f"{self.root}: episode source {source!r} is not one of {keys.SOURCES}")
        if not isinstance(task, str) or not task:
            raise DatasetError(f"{self.root}: task must be a non-empty string, got {task!r}")
        extra = sorted(set(frames) - set(self.user_features) - set(fmt.DEFAULT_FEATURES))
        if extra:
            raise DatasetError(f"{self.root}: frames carry keys not declared in features: {extra}")
        out, length = {}, None
        for key, feat in self.user_features.items():
            if key not in frames:
                raise DatasetError(f"{self.root}: episode frames lack feature {key!r}")
            arr = np.asarray(frames[key])
            shape = tuple(feat["shape"])
            ok = arr.ndim >= 1 and (arr.shape[1:] == shape or (shape == (1,) and arr.ndim == 1))
            if not ok:
                raise DatasetError(
                    f"{self.root}: feature {key!r} expects (T, {', '.join(map(str, shape))}), "
                    f"got shape {arr.shape}"
                )
            if length is None:
                length = arr.shape[0]
            elif arr.shape[0] != length:
                raise DatasetError(f"{self.root}: feature {key!r} has {arr.shape[0]} frames, others {length}")
            if feat["dtype"] == "video":
                if arr.dtype != np.uint8:
                    raise DatasetError(f"{self.root}: video feature {key!r} must be uint8, got {arr.dtype}")
            else:
                if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
                    raise DatasetError(
                        f"{self.root}: feature {key!r} contains NaN or inf; episode not written"
                    )
                arr = arr.astype(feat["dtype"] if feat["dtype"] != "bool" else np.bool_, copy=False)
            out[key] = arr
        if not length:
            raise DatasetError(f"{self.root}: an episode needs at least one frame and one feature")
        return out, length

    def add_episode(self, frames: dict[str, np.ndarray], task: str, source: str = "demo") -> int:
        """Append one episode and make it durable before returning.

        Args:
            frames: per-key arrays (T, *shape) for every declared feature; videos (T, H, W, 3) uint8 RGB;
                shape-[1] features may be (T,) or (T, 1). NaN/inf in float features is rejected.
            task: language instruction; new tasks get the next task_index.
            source: one of ``robot_rl.keys.SOURCES``, stored in the episodes metadata column ``source``.
        Returns: the new episode's index.
        Raises: DatasetError naming the root and key on a missing/extra/mis-shaped/non-finite feature.
        """
        arrays, length = self._validate(frames, task, source)
        ep = len(self.episodes)
        start = self.num_frames
        task_index = self.tasks.index(task) if task in self.tasks else len(self.tasks)
        arrays[keys.TIMESTAMP] = (np.arange(length, dtype=np.float64) / self.fps).astype(np.float32)
        arrays[keys.FRAME_INDEX] = np.arange(length, dtype=np.int64)
        arrays[keys.EPISODE_INDEX] = np.full(length, ep, dtype=np.int64)
        arrays[keys.INDEX] = np.arange(start, start + length, dtype=np.int64)
        arrays[keys.TASK_INDEX] = np.full(length, task_index, dtype=np.int64)
        meta_chunk, meta_file = episodes_file_of(ep)
        data = Stream()
        number = next_number(data, self.episodes)
        chunk, file = divmod(number, fmt.CHUNKS_SIZE)
        row: dict[str, Any] = {
            "episode_index": ep,
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": start,
            "dataset_to_index": start + length,
        }
        for key in self.video_keys:
            video = Stream(key)
            number = next_number(video, self.episodes)
            encode_video(video.path(self.root, number), arrays[key], self.fps, self.video_codec)
            row.update(fmt.video_columns(key, *divmod(number, fmt.CHUNKS_SIZE), length, self.fps))
        table = pa.table(
            {k: fmt.arrow_column(arrays[k], f) for k, f in self.features.items() if f["dtype"] != "video"}
        )
        fmt.atomic_write_parquet(data.path(self.root, next_number(data, self.episodes)), table)
        stats = self._stats(arrays)
        row.update(
            {
                "tasks": [task],
                "length": length,
                fmt.SOURCE_COLUMN: source,
                "meta/episodes/chunk_index": meta_chunk,
                "meta/episodes/file_index": meta_file,
            }
        )
        row.update(fmt.stats_columns(stats, length))
        if task_index == len(self.tasks):
            self.tasks.append(task)
        self.episodes.append(row)
        self._pooled.add(stats, length)
        self._write_meta(ep)
        self._since_pack += 1
        if self._since_pack >= self.pack_every:
            self.pack(final=False)
        return ep

    def pack(self, final: bool = True) -> None:
        """Pack the last files into bigger ones now (see :func:`robot_rl.data.lerobot.packing.pack`):
        ``add_episode`` does so every ``pack_every`` episodes (``final`` False: files merge when of similar
        size, so the cost per episode stays O(log n)), ``close`` at the end (greedily, as LeRobot fills
        files). Raises DatasetError naming a file that cannot be read or written; the dataset stays
        readable."""
        pack(self.root, self.episodes, self.video_keys, self.sizes, self._write_meta, final=final)
        self._since_pack = 0

    def _stats(self, arrays: dict[str, np.ndarray]) -> dict[str, FeatureStats]:
        sub = {}
        for key, arr in arrays.items():
            if key in self.video_keys:
                pick = evenly_spaced(0, len(arr), _IMAGE_STATS_FRAMES)
                sub[key] = np.ascontiguousarray(arr[pick, ::_IMAGE_STATS_STRIDE, ::_IMAGE_STATS_STRIDE])
            else:
                sub[key] = arr
        return compute_stats(sub)

    def _write_meta(self, changed: int) -> None:
        """The episodes files holding episodes ``changed`` and later, tasks, stats, then info.json (the
        commit point), each atomically. Earlier episodes files are full and unchanged."""
        if self.episodes:
            changed = max(0, min(changed, len(self.episodes) - 1))
            start = changed - changed % EPISODES_PER_META_FILE
            for first in range(start, len(self.episodes), EPISODES_PER_META_FILE):
                chunk, file = episodes_file_of(first)
                fmt.atomic_write_parquet(
                    self.root / fmt.EPISODES_PATH_V30.format(chunk_index=chunk, file_index=file),
                    pa.Table.from_pylist(self.episodes[first : first + EPISODES_PER_META_FILE]),
                )
        fmt.atomic_write_parquet(self.root / fmt.TASKS_V30, fmt.tasks_table(self.tasks))
        if self._pooled.count:
            fmt.write_stats_json(self.root / fmt.STATS, self._pooled.result(), self._pooled.count)
        info = fmt.info_v30(
            self.features,
            self.fps,
            self.robot_type,
            len(self.episodes),
            self.num_frames,
            len(self.tasks),
            self.sizes.data_mb,
            self.sizes.video_mb,
        )
        fmt.atomic_write_json(self.root / fmt.INFO, info)

    def close(self) -> None:
        """Finalise: pack the episodes still one per file and rewrite the metadata (stats.json included).
        Further add_episode calls raise."""
        if not self._closed:
            self.pack()
            self._write_meta(len(self.episodes) - 1)
            self._closed = True

    def __enter__(self) -> LeRobotWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
