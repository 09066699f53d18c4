"""Build a new LeRobot v3.0 dataset from a selection of episodes of one or more source datasets (v3.0 or
v2.1): the engine behind ``robot-rl dataset merge|split|filter|convert``.

The new dataset has the layout :class:`~robot_rl.data.lerobot.writer.LeRobotWriter` writes (LeRobot's
packed files, per-episode statistics in the episodes metadata), so the writer can append to it. Episodes
are re-indexed 0..n-1 in selection order, ``index`` runs 0..N-1, tasks are the union of the selected
episodes' tasks in order of first use, and the episodes' ``source`` tag is kept.

Each episode is first written to files of its own, then :func:`robot_rl.data.lerobot.packing.pack`
merges them into files of up to ``sizes`` MB (LeRobot's 100 / 200 MB by default). Video is never
re-encoded when that can be avoided (lossless and fast):

- an mp4 that holds only the episode (v2.1 files; v3.0 files of one episode) is hard-linked, or copied
  where a link is not possible;
- an episode inside a v3.0 mp4 of several episodes is remuxed (its packets copied, nothing decoded) when
  its first frame is a keyframe, as in files LeRobot concatenates;
- otherwise just that episode is decoded and re-encoded with the dataset's codec;

and packing copies packets too.

Everything is written to a hidden sibling folder that is renamed onto the destination at the end, so a
failure never leaves a partial dataset there.
"""

from __future__ import annotations

import copy
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot import layout as fmt
from robot_rl.data.lerobot.packing import FileSizes, pack
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.tools import VIDEO_STATS_FRAMES, evenly_spaced
from robot_rl.data.lerobot.video import available_encoders, codec_info_name, default_codec, encode_video
from robot_rl.data.lerobot.writer import EPISODES_PER_META_FILE, episodes_file_of
from robot_rl.data.normalize import FeatureStats, PooledStats, compute_stats

# A selection: (dataset root, episode indices in the order wanted, or None for every episode).
Selection = Sequence[tuple[str | Path, Sequence[int] | None]]
DEFAULT_SOURCE = "demo"  # ``source`` tag of episodes whose dataset has none (LeRobot datasets are demos)
_REORDER_WINDOW_S = 1.0  # packets this far past an episode's end cannot be reordered into it
# Image statistics sample frames at least this far apart (longer than the decoder's forward-decode window,
# so each sample is one seek plus a few decodes, not a decode of the whole episode), every 4th pixel.
_STATS_SPACING_S = 1.1
_STATS_PIXEL_STRIDE = 4
_TIME_TOLERANCE_S = 1e-4  # the reader's default tolerance for matching video frames to timestamps


def copy_episodes(
    selection: Selection,
    dst: str | Path,
    overwrite: bool = False,
    sizes: FileSizes | None = None,
    drop: Sequence[str] = (),
) -> Path:
    """Write the selected episodes as a new LeRobot v3.0 dataset at ``dst``.

    Args:
        selection: ``[(root, episodes), ...]``: each source dataset (v3.0 or v2.1) with the indices of the
            episodes to take, in the order wanted (``None``: all). An episode may be taken twice.
        dst: the new dataset's folder. Written to a hidden sibling folder, then renamed into place.
        overwrite: replace ``dst`` if it exists (only a LeRobot dataset, an empty folder, or a folder of
            LeRobot datasets is ever replaced). ``dst`` may be one of the sources: everything is read
            before the swap.
        sizes: target data and video file sizes (default: LeRobot's 100 / 200 MB).
        drop: feature keys left out of the copy (their columns, videos and statistics): e.g.
            ``observation.environment_state`` to merge tasks whose object states differ in size. Sources
            need to agree only on the features kept.
    Returns: ``dst``. Its info.json (robot type, feature names) follows the first source; episodes of a
    source without a ``source`` column are tagged ``DEFAULT_SOURCE`` when another source has one.
    Raises:
        DatasetError: a source cannot be read, sources differ in fps or features (naming both roots and
            the key), an episode index is out of range (naming the root), nothing is selected, or ``dst``
            exists, or a float feature holds NaN or inf (naming the root and key), or a ``drop`` key is a
            LeRobot index column or in no source. On any error ``dst`` is left as it was.
    """
    with fmt.staged_destination(dst, overwrite) as tmp:
        write_episodes(selection, tmp, sizes, drop)
    return Path(dst)


def write_episodes(
    selection: Selection, folder: str | Path, sizes: FileSizes | None = None, drop: Sequence[str] = ()
) -> None:
    """Write the selected episodes as a LeRobot v3.0 dataset into ``folder`` (new or empty), in place.

    The non-staged core of :func:`copy_episodes` (same arguments and errors), for callers that stage
    several datasets at once (``split``). A failure leaves ``folder`` partly written.
    """
    folder = Path(folder)
    sources = _open(selection)
    try:
        if not any(eps for _, eps in sources):
            raise DatasetError(f"{folder}: no episodes selected")
        datasets = [ds for ds, _ in sources]
        _check_droppable(datasets, drop)
        _check_compatible(datasets, set(drop))
        _Builder(folder, sources, sizes or FileSizes(), set(drop)).run()
    finally:
        for ds, _ in sources:
            ds.close()


def _open(selection: Selection) -> list[tuple[LeRobotDataset, list[int]]]:
    opened: list[tuple[LeRobotDataset, list[int]]] = []
    try:
        for root, episodes in selection:
            ds = LeRobotDataset(root)
            opened.append((ds, []))
            eps = range(ds.num_episodes) if episodes is None else episodes
            opened[-1] = (ds, fmt.check_episode_ids(ds.root, eps, ds.num_episodes))
    except BaseException:
        for ds, _ in opened:
            ds.close()
        raise
    return opened


def _signature(feat: dict) -> tuple:
    codec = (feat.get("info") or {}).get("video.codec") if feat.get("dtype") == "video" else None
    return feat.get("dtype"), list(feat.get("shape", [])), codec


def _check_droppable(datasets: list[LeRobotDataset], drop: Sequence[str]) -> None:
    for key in drop:
        if key in fmt.DEFAULT_FEATURES:
            raise DatasetError(
                f"cannot drop {key!r}: every LeRobot dataset has it ({sorted(fmt.DEFAULT_FEATURES)})"
            )
        if not any(key in ds.features for ds in datasets):
            roots = ", ".join(str(ds.root) for ds in datasets)
            raise DatasetError(f"cannot drop {key!r}: no source has it ({roots})")


def _kept(features: dict[str, dict], drop: set[str]) -> dict[str, dict]:
    return {k: v for k, v in features.items() if k not in drop}


def _check_compatible(datasets: list[LeRobotDataset], drop: set[str]) -> None:
    """Every source must have the first one's fps and feature keys, dtypes, shapes and video codecs, the
    ``drop`` keys aside."""
    first = datasets[0]
    first_info = first.root / fmt.INFO
    first_features = _kept(first.features, drop)
    for key, feat in first_features.items():
        if feat.get("dtype") not in fmt.DTYPES or feat.get("dtype") == "image":
            raise DatasetError(f"{first_info}: feature {key!r} has dtype {feat.get('dtype')!r}, not copyable")
    for ds in datasets[1:]:
        info = ds.root / fmt.INFO
        if ds.fps != first.fps:
            raise DatasetError(f"{first_info} has fps {first.fps} but {info} has fps {ds.fps}")
        features = _kept(ds.features, drop)
        for key in sorted(set(first_features) | set(features)):
            if key not in features or key not in first_features:
                has, lacks = (first_info, info) if key in first_features else (info, first_info)
                raise DatasetError(f"feature {key!r} is in {has} but not in {lacks}")
            a, b = _signature(first_features[key]), _signature(features[key])
            if a != b:
                raise DatasetError(
                    f"feature {key!r} differs: (dtype, shape, codec) {a} in {first_info} but {b} in {info}"
                )


class _Builder:
    """Writes the data, videos and metadata of the selected episodes into a fresh folder."""

    def __init__(
        self, folder: Path, sources: list[tuple[LeRobotDataset, list[int]]], sizes: FileSizes, drop: set[str]
    ) -> None:
        self.folder = folder
        self.sizes = sizes
        self.sources = sources
        self.first = sources[0][0]
        self.features = copy.deepcopy(_kept(self.first.features, drop))
        for feat in self.features.values():
            if feat["dtype"] != "video":
                feat["fps"] = self.first.fps
        self.video_keys = [k for k in self.first.video_keys if k not in drop]
        self.tabular = [k for k in self.features if k not in self.video_keys]
        self.has_source = any(ds.episode_sources is not None for ds, _ in sources)
        self.tasks: list[str] = []
        self.rows: list[dict[str, Any]] = []
        self.pooled = PooledStats()
        self.frames = 0

    def run(self) -> None:
        """Write every selected episode to files of its own, pack them, then write the metadata."""
        for ds, eps in self.sources:
            columns = ds.load_tabular()
            whole_files = {key: _single_episode_files(ds, key) for key in self.video_keys}
            for ep in eps:
                self._episode(ds, ep, columns, whole_files)
        pack(self.folder, self.rows, self.video_keys, self.sizes, lambda _: None, everything=True)
        self._write_meta()

    def _episode(
        self, ds: LeRobotDataset, ep: int, columns: dict[str, np.ndarray], whole_files: dict[str, set[Path]]
    ) -> None:
        lo, hi = int(ds.episode_from[ep]), int(ds.episode_to[ep])
        length, new_ep = hi - lo, len(self.rows)
        arrays = {k: columns[k][lo:hi] for k in self.tabular}
        ep_tasks, arrays[keys.TASK_INDEX] = self._renumber_tasks(ds, arrays[keys.TASK_INDEX])
        arrays[keys.EPISODE_INDEX] = np.full(length, new_ep, dtype=np.int64)
        arrays[keys.INDEX] = np.arange(self.frames, self.frames + length, dtype=np.int64)
        chunk, file = divmod(new_ep, fmt.CHUNKS_SIZE)
        meta_chunk, meta_file = episodes_file_of(new_ep)
        row: dict[str, Any] = {
            "episode_index": new_ep,
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": self.frames,
            "dataset_to_index": self.frames + length,
        }
        for key, arr in arrays.items():
            if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
                raise DatasetError(f"{ds.root}: episode {ep}: feature {key!r} holds NaN or inf")
        stats = compute_stats(arrays)
        for key in self.video_keys:
            out = self.folder / fmt.VIDEO_PATH_V30.format(video_key=key, chunk_index=chunk, file_index=file)
            _write_video(ds, ep, key, out, whole_files[key], arrays[keys.TIMESTAMP].astype(np.float64))
            frames = ds.video_frames(key, _stats_rows(lo, hi, ds.fps))
            stats.update(compute_stats({key: frames[:, ::_STATS_PIXEL_STRIDE, ::_STATS_PIXEL_STRIDE]}))
            row.update(fmt.video_columns(key, chunk, file, length, ds.fps))
        table = pa.table({k: fmt.arrow_column(arrays[k], self.features[k]) for k in self.tabular})
        fmt.atomic_write_parquet(
            self.folder / fmt.DATA_PATH_V30.format(chunk_index=chunk, file_index=file), table
        )
        row.update(
            {
                "tasks": ep_tasks,
                "length": length,
                "meta/episodes/chunk_index": meta_chunk,
                "meta/episodes/file_index": meta_file,
            }
        )
        if self.has_source:
            row[fmt.SOURCE_COLUMN] = ds.episode_sources[ep] if ds.episode_sources else DEFAULT_SOURCE
        self._add_stats(row, stats, length)
        self.rows.append(row)
        self.frames += length

    def _renumber_tasks(self, ds: LeRobotDataset, task_ids: np.ndarray) -> tuple[list[str], np.ndarray]:
        """An episode's tasks in order of first use, appended to ``self.tasks`` when new, and its
        ``task_index`` column (int64) renumbered from ``ds.tasks`` to ``self.tasks``."""
        _, first_use = np.unique(task_ids, return_index=True)
        ep_tasks = [ds.tasks[int(t)] for t in task_ids[np.sort(first_use)]]
        self.tasks += [t for t in ep_tasks if t not in self.tasks]
        new_id = {i: self.tasks.index(t) for i, t in enumerate(ds.tasks) if t in self.tasks}
        return ep_tasks, np.array([new_id[int(t)] for t in task_ids], dtype=np.int64)

    def _add_stats(self, row: dict[str, Any], stats: dict[str, FeatureStats], length: int) -> None:
        stats = {k: stats[k] for k in self.features}
        row.update(fmt.stats_columns(stats, length))
        self.pooled.add(stats, length)

    def _write_meta(self) -> None:
        """Episodes metadata (a new file every EPISODES_PER_META_FILE episodes), tasks, stats, info."""
        for start in range(0, len(self.rows), EPISODES_PER_META_FILE):
            chunk, file = episodes_file_of(start)
            fmt.atomic_write_parquet(
                self.folder / fmt.EPISODES_PATH_V30.format(chunk_index=chunk, file_index=file),
                pa.Table.from_pylist(self.rows[start : start + EPISODES_PER_META_FILE]),
            )
        fmt.atomic_write_parquet(self.folder / fmt.TASKS_V30, fmt.tasks_table(self.tasks))
        fmt.write_stats_json(self.folder / fmt.STATS, self.pooled.result(), self.pooled.count)
        robot_type = self.first.info.get("robot_type", "")
        info = fmt.info_v30(
            self.features,
            self.first.fps,
            robot_type,
            len(self.rows),
            self.frames,
            len(self.tasks),
            self.sizes.data_mb,
            self.sizes.video_mb,
        )
        fmt.atomic_write_json(self.folder / fmt.INFO, info)


def _stats_rows(lo: int, hi: int, fps: int) -> np.ndarray:
    """Dataset rows sampled for the image statistics of the episode at rows [lo, hi): evenly spaced, at
    most VIDEO_STATS_FRAMES, at least _STATS_SPACING_S apart, at least one."""
    return evenly_spaced(lo, hi, min(VIDEO_STATS_FRAMES, int((hi - lo) / (fps * _STATS_SPACING_S)) + 1))


def _single_episode_files(ds: LeRobotDataset, key: str) -> set[Path]:
    """Video files of ``key`` that hold exactly one episode, starting at time 0 (copied whole)."""
    users: dict[Path, list[float]] = {}
    for ep in range(ds.num_episodes):
        path, start = ds.video_path(ep, key)
        users.setdefault(path, []).append(start)
    return {path for path, starts in users.items() if starts == [0.0]}


def _write_video(
    ds: LeRobotDataset, ep: int, key: str, dst: Path, whole_files: set[Path], timestamps: np.ndarray
) -> None:
    """Episode ``ep``'s video ``key`` as ``dst``, its frames at the episode's ``timestamps`` (s): linked or
    copied, else remuxed, else re-encoded (see the module docstring). Raises DatasetError naming the
    source file."""
    src, start = ds.video_path(ep, key)
    if not src.is_file():
        raise DatasetError(f"{src}: video file not found (episode {ep}, video {key!r})")
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src in whole_files:
        try:
            os.link(src, dst)
        except OSError:  # another filesystem, or links to files we do not own are not allowed
            shutil.copyfile(src, dst)
        return
    if _remux(src, start, timestamps, ds.fps, dst):
        return
    codec = (ds.features[key].get("info") or {}).get("video.codec")
    frames = ds.video_frames(key, np.arange(ds.episode_from[ep], ds.episode_to[ep]))
    encode_video(dst, frames, ds.fps, _encoder_for(codec, src, key))


def _remux(src: Path, start_s: float, timestamps: np.ndarray, fps: int, dst: Path) -> bool:
    """Copy the packets of the frames at ``start_s + timestamps`` (s) of ``src`` into ``dst``, shifted so
    they play at ``timestamps``, without decoding. Returns False and writes nothing when the first of them
    is not a keyframe, they are not contiguous in decode order, their count differs from
    ``len(timestamps)``, or the copy's frame times do not match."""
    half = 0.5 / fps
    lo, hi = start_s + timestamps[0] - half, start_s + timestamps[-1] + half
    tmp = dst.with_name(f".{dst.name}.tmp{os.getpid()}.mp4")
    try:
        with av.open(str(src)) as inp:
            stream = inp.streams.video[0]
            base = round(start_s / stream.time_base)
            inp.seek(max(int(lo / stream.time_base), 0), stream=stream, backward=True, any_frame=False)
            picked, positions = [], []
            for pos, packet in enumerate(inp.demux(stream)):
                if packet.pts is None:
                    continue
                t = float(packet.pts * stream.time_base)
                if lo <= t < hi:
                    picked.append(packet)
                    positions.append(pos)
                elif t >= hi + _REORDER_WINDOW_S:
                    break
            contiguous = bool(positions) and positions[-1] - positions[0] == len(positions) - 1
            if not contiguous or len(picked) != len(timestamps) or not picked[0].is_keyframe:
                return False
            with av.open(str(tmp), "w", format="mp4") as out:
                out_stream = out.add_stream_from_template(stream, opaque=True)
                for packet in picked:
                    packet.pts -= base
                    if packet.dts is not None:
                        packet.dts -= base
                    packet.stream = out_stream
                    out.mux(packet)
        times = _frame_times(tmp)
        if len(times) != len(timestamps) or np.abs(times - timestamps).max() > _TIME_TOLERANCE_S:
            tmp.unlink(missing_ok=True)
            return False
    except (av.FFmpegError, ValueError):
        tmp.unlink(missing_ok=True)
        return False
    os.replace(tmp, dst)
    return True


def _frame_times(path: Path) -> np.ndarray:
    """Sorted presentation times (s) of the video packets of ``path``, read from packet headers."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return np.sort(
            [float(p.pts * stream.time_base) for p in container.demux(stream) if p.pts is not None]
        )


def _encoder_for(codec: str | None, src: Path, key: str) -> str:
    """A PyAV encoder that writes ``codec`` (info.json's ``video.codec``; None: the default encoder)."""
    if codec is None:
        return default_codec()
    for name in available_encoders():
        if codec_info_name(name) == codec:
            return name
    raise DatasetError(
        f"{src}: video {key!r} must be re-encoded (an episode does not start on a keyframe) but PyAV has no "
        f"encoder for its codec {codec!r}"
    )
