"""Camera frames for training, by dataset row: decoded from the dataset's videos, held in memory, or read
from a decoded-frame cache in zarr.

Every store answers ``frames(key, rows) -> (len(rows), H, W, 3) uint8`` at the training resolution
``size = (H, W)`` for any rows of the dataset (several episodes, any order). Video decoding reads only the
frames asked for (seek to the nearest keyframe, decode forward, scale in swscale); the zarr cache is
decoded once and reused by later runs, so the decode cost is paid once per dataset and resolution.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import zarr

from robot_rl.data.lerobot.reader import LeRobotDataset

CACHE_CHUNK_FRAMES = 8  # zarr chunk along time: random batches touch few frames per chunk


class VideoFrames:
    """Decode the requested rows from the dataset's mp4 files, scaled to ``size`` (H, W) or native.

    Picklable: DataLoader workers reopen their own containers.
    """

    def __init__(self, dataset: LeRobotDataset, size: tuple[int, int] | None) -> None:
        self.dataset = dataset
        self.size = size

    def shape(self, key: str) -> tuple[int, int, int]:
        """Per-frame shape (H, W, 3) of camera ``key`` as this store returns it."""
        h, w, c = self.dataset.features[key]["shape"]
        return (*self.size, c) if self.size else (h, w, c)

    def frames(self, key: str, rows: np.ndarray) -> np.ndarray:
        """(len(rows),) int dataset rows -> (len(rows), H, W, 3) uint8; DatasetError names the video file."""
        return self.dataset.video_frames(key, np.asarray(rows, dtype=np.int64), size=self.size)


class MemoryFrames:
    """Every frame of each camera decoded once into RAM: ``{key: (N, H, W, 3) uint8}``."""

    def __init__(self, arrays: dict[str, np.ndarray]) -> None:
        self.arrays = arrays

    @classmethod
    def decode(cls, source: VideoFrames, video_keys: list[str]) -> MemoryFrames:
        """Decode every frame of ``video_keys`` episode by episode (sequential decoding, no seeks)."""
        ds = source.dataset
        return cls(
            {
                key: np.concatenate([ds.episode_video(ep, key, source.size) for ep in range(ds.num_episodes)])
                for key in video_keys
            }
        )

    def frames(self, key: str, rows: np.ndarray) -> np.ndarray:
        return self.arrays[key][rows]


class ZarrFrameCache:
    """A decoded-frame cache: one zarr array (N, H, W, 3) uint8 per camera under ``path``, chunked
    ``CACHE_CHUNK_FRAMES`` frames along time, Blosc-compressed (zarr's default codec).

    The cache records what it was built from (dataset root, frame count, video file sizes and mtimes, size)
    and :meth:`open_or_build` rebuilds it when any of that changed. It is built under ``<path>.tmp`` and
    renamed into place, so a killed build never leaves a cache that looks complete.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._group = None

    @staticmethod
    def fingerprint(dataset: LeRobotDataset, size: tuple[int, int] | None) -> dict:
        """What the cache depends on: the dataset, its video files (size, mtime) and the training size."""
        videos = sorted(
            {
                str(dataset.video_path(ep, k)[0])
                for k in dataset.video_keys
                for ep in range(dataset.num_episodes)
            }
        )
        return {
            "root": str(dataset.root.resolve()),
            "num_frames": dataset.num_frames,
            "size": list(size) if size else None,
            "videos": {v: [Path(v).stat().st_size, Path(v).stat().st_mtime_ns] for v in videos},
        }

    @classmethod
    def open_or_build(cls, path: str | Path, source: VideoFrames, video_keys: list[str]) -> ZarrFrameCache:
        """Open the cache at ``path`` if it matches ``source``'s dataset and size, else (re)build it by
        decoding every frame once, episode by episode. Raises DatasetError naming a bad video file."""
        path = Path(path)
        want = cls.fingerprint(source.dataset, source.size)
        meta = path / "cache.json"
        if meta.is_file() and json.loads(meta.read_text()) == {**want, "keys": video_keys}:
            return cls(path)
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        ds = source.dataset
        try:
            group = zarr.open_group(str(tmp), mode="w")
            for key in video_keys:
                shape = source.shape(key)
                arr = group.create_array(
                    key, shape=(ds.num_frames, *shape), chunks=(CACHE_CHUNK_FRAMES, *shape), dtype="uint8"
                )
                for ep in range(ds.num_episodes):
                    arr[ds.episode_from[ep] : ds.episode_to[ep]] = ds.episode_video(ep, key, source.size)
            (tmp / "cache.json").write_text(json.dumps({**want, "keys": video_keys}))
        except OSError as err:  # a full disk: leave no half-built cache behind
            shutil.rmtree(tmp, ignore_errors=True)
            raise OSError(err.errno, err.strerror, str(path)) from err
        shutil.rmtree(path, ignore_errors=True)
        tmp.rename(path)
        return cls(path)

    def frames(self, key: str, rows: np.ndarray) -> np.ndarray:
        """(len(rows),) int rows -> (len(rows), H, W, 3) uint8, read with one orthogonal selection."""
        if self._group is None:  # opened lazily, so each DataLoader worker opens its own handle
            self._group = zarr.open_group(str(self.path), mode="r")
        uniq, inverse = np.unique(np.asarray(rows, dtype=np.int64), return_inverse=True)
        return self._group[key].get_orthogonal_selection((uniq,))[inverse]

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])
