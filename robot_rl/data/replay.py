"""Disk-backed, append-only replay buffer on zarr 3 (docs/design.md §4: the replay buffer persists to zarr).

Layout under ``path`` (a zarr v3 group): one array per per-frame key, shape (capacity, *shape), chunked
along frames; ``_episode_ends`` int64 (episode capacity,) with each episode's exclusive end frame;
``_episode_source`` int8 with each episode's source code (index into ``robot_rl.keys.SOURCES``); and one
array per per-episode key (``episode_spec``, e.g. the final observation), shape (episode capacity, *shape).
A chunk holds at most ``chunk_frames`` frames and about ``CHUNK_BYTES`` of one key: zarr rewrites a whole
chunk on every append into it and decodes a whole chunk to read one frame, so a 480x640 camera key in
1,024-frame chunks (943 MB each) cost 15.5 s per 100-frame episode append and 1.4 s per frame read; in
4-frame chunks 0.58 s and 5.5 ms (benchmarks/README "Replay chunking", bench_replay_chunks.py).
The group attribute ``committed = {"frames": n, "episodes": e}`` is written last by every
:meth:`ZarrReplayBuffer.add_episode`; everything beyond it is ignored on reopen and overwritten by the
next append. zarr 3's LocalStore replaces each chunk and metadata file atomically, so a process killed
with SIGKILL at any point leaves every episode whose ``add_episode`` returned and no partial episode.
One writer per path; readers may open the same path read-only meanwhile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import zarr

from robot_rl import keys
from robot_rl.data.errors import DatasetError

Spec = dict[str, tuple[tuple[int, ...], np.dtype]]
_ENDS = "_episode_ends"
_SOURCE = "_episode_source"
_MIN_CAPACITY = 1024
CHUNK_BYTES = 4 << 20  # the uncompressed size a chunk of one key aims at (zarr's docs: 1 MB and up)


def chunk_frames_for(shape: tuple[int, ...], dtype: np.dtype, most: int, chunk_bytes: int | None) -> int:
    """Frames per chunk for a key with per-frame ``shape`` and ``dtype``: as many as fit in
    ``chunk_bytes`` (None: no byte limit), at least 1 and at most ``most``."""
    if chunk_bytes is None:
        return most
    frame_bytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return max(1, min(most, chunk_bytes // max(1, frame_bytes)))


class ZarrReplayBuffer:
    """Append-only episode storage.

    Args:
        path: folder of the zarr group; created if absent, resumed if present.
        spec: ``{key: (per-frame shape, dtype)}`` such as ``{"observation.state": ((S,), np.float32),
            "action": ((d,), np.float32), "next.reward": ((), np.float32), "next.done": ((), np.bool_),
            "complementary_info.is_intervention": ((), np.bool_)}``. Required when creating; when resuming it
            may be None or must equal the stored spec.
        episode_spec: ``{key: (per-episode shape, dtype)}`` of values stored once per episode (the final
            observation ``final.<key>``); same rules as ``spec``.
        chunk_frames: most frames per zarr chunk; a key whose frames are large gets fewer
            (:func:`chunk_frames_for`). Only used when creating; a resumed store keeps its chunks.
        chunk_bytes: the uncompressed bytes a chunk of one key aims at (None: ``chunk_frames`` for every
            key, the layout before 2026-11-24, kept for the benchmark).

    Raises DatasetError naming the path (and key) for a missing spec, a spec mismatch, or an unreadable
    store; OSError naming the array folder or ``zarr.json`` it was writing when creating it fails (a full
    disk).
    """

    def __init__(
        self,
        path: str | Path,
        spec: Spec | None = None,
        episode_spec: Spec | None = None,
        chunk_frames: int = 1024,
        chunk_bytes: int | None = CHUNK_BYTES,
    ) -> None:
        self.path = Path(path)
        if (self.path / "zarr.json").exists():
            try:
                self._group = zarr.open_group(str(self.path), mode="r+")
                stored = self._group.attrs["spec"]
                stored_episode = self._group.attrs.get("episode_spec", {})
                committed = self._group.attrs["committed"]
            except Exception as err:  # noqa: BLE001 - zarr raises several types for broken stores
                raise DatasetError(f"{self.path}: unreadable replay buffer: {err}") from err
            self.spec: Spec = self._decode(stored)
            self.episode_spec: Spec = self._decode(stored_episode)
            for name, given, have in (
                ("spec", spec, self.spec),
                ("episode_spec", episode_spec, self.episode_spec),
            ):
                if given is not None and self._normalise(given) != have:
                    raise DatasetError(
                        f"{self.path}: {name} {self._normalise(given)} differs from the stored {have}"
                    )
            self._frames, self._episodes = int(committed["frames"]), int(committed["episodes"])
        else:
            if spec is None:
                raise DatasetError(f"{self.path}: no replay buffer here and no spec to create one")
            self.spec, self.episode_spec = self._normalise(spec), self._normalise(episode_spec or {})
            with self._naming("zarr.json"):
                self._group = zarr.open_group(str(self.path), mode="w")
            arrays = [
                (k, (0, *shape), (chunk_frames_for(shape, dtype, chunk_frames, chunk_bytes), *shape), dtype)
                for k, (shape, dtype) in self.spec.items()
            ]
            arrays += [
                (k, (0, *shape), (chunk_frames_for(shape, dtype, 256, chunk_bytes), *shape), dtype)
                for k, (shape, dtype) in self.episode_spec.items()
            ]
            arrays += [(_ENDS, (0,), (4096,), np.int64), (_SOURCE, (0,), (4096,), np.int8)]
            for key, shape, chunks, dtype in arrays:
                with self._naming(key):
                    self._group.create_array(key, shape=shape, chunks=chunks, dtype=dtype)
            self._frames = self._episodes = 0
            with self._naming("zarr.json"):
                self._group.attrs["spec"] = self._encode(self.spec)
                self._group.attrs["episode_spec"] = self._encode(self.episode_spec)
                self._commit()
        names = (*self.spec, *self.episode_spec, _ENDS, _SOURCE)
        self._arrays = {key: self._group[key] for key in names}

    @staticmethod
    def _normalise(spec: Spec) -> Spec:
        return {k: (tuple(int(d) for d in shape), np.dtype(dtype)) for k, (shape, dtype) in spec.items()}

    @staticmethod
    def _encode(spec: Spec) -> dict:
        return {k: {"shape": list(s), "dtype": d.str} for k, (s, d) in spec.items()}

    @staticmethod
    def _decode(stored: dict) -> Spec:
        return {k: (tuple(v["shape"]), np.dtype(v["dtype"])) for k, v in stored.items()}

    def _commit(self) -> None:
        self._group.attrs["committed"] = {"frames": self._frames, "episodes": self._episodes}

    @staticmethod
    def _reserve(arr: zarr.Array, size: int) -> None:
        if arr.shape[0] < size:
            arr.resize((max(size, 2 * arr.shape[0], _MIN_CAPACITY), *arr.shape[1:]))

    def add_episode(self, frames: dict[str, np.ndarray], source: str | int = "online") -> int:
        """Append one episode of T frames: ``frames[key]`` (T, *shape) for every spec key and
        ``frames[key]`` (*shape) for every ``episode_spec`` key (extra keys are an error). ``source`` is a
        name in ``robot_rl.keys.SOURCES`` or its index. Durable on return.

        Returns the episode index. Raises DatasetError naming the key for a missing, extra or mis-shaped
        key, inconsistent T, or NaN/inf in a float key (nothing is written then), and OSError naming the
        array folder or ``zarr.json`` it was writing when the disk fails (full, read-only); the episode is
        then not committed."""
        code = (
            source
            if isinstance(source, int)
            else (keys.SOURCES.index(source) if source in keys.SOURCES else -1)
        )
        if not 0 <= code < len(keys.SOURCES):
            raise DatasetError(f"{self.path}: episode source {source!r} is not one of {keys.SOURCES}")
        extra = sorted(set(frames) - set(self.spec) - set(self.episode_spec))
        if extra:
            raise DatasetError(f"{self.path}: frames carry keys not in the buffer spec: {extra}")
        length, data = None, {}
        for key, (shape, dtype) in self.spec.items():
            if key not in frames:
                raise DatasetError(f"{self.path}: episode frames lack key {key!r}")
            arr = np.asarray(frames[key])
            if arr.ndim == 0 or arr.shape[1:] != shape:
                raise DatasetError(f"{self.path}: key {key!r} expects (T, *{shape}), got {arr.shape}")
            if length is None:
                length = arr.shape[0]
            if arr.shape[0] != length:
                raise DatasetError(f"{self.path}: key {key!r} has {arr.shape[0]} frames, others {length}")
            if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
                raise DatasetError(f"{self.path}: key {key!r} contains NaN or inf; episode not written")
            data[key] = arr.astype(dtype, copy=False)
        if not length:
            raise DatasetError(f"{self.path}: an episode needs at least one frame")
        once = {}
        for key, (shape, dtype) in self.episode_spec.items():
            if key not in frames:
                raise DatasetError(f"{self.path}: episode lacks per-episode key {key!r}")
            arr = np.asarray(frames[key])
            if arr.shape != shape:
                raise DatasetError(f"{self.path}: per-episode key {key!r} expects {shape}, got {arr.shape}")
            if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
                raise DatasetError(f"{self.path}: key {key!r} contains NaN or inf; episode not written")
            once[key] = arr.astype(dtype, copy=False)
        start, end, ep = self._frames, self._frames + length, self._episodes
        writes = [(key, slice(start, end), arr) for key, arr in data.items()]
        writes += [(key, slice(ep, ep + 1), arr[None]) for key, arr in once.items()]
        writes += [(_ENDS, slice(ep, ep + 1), [end]), (_SOURCE, slice(ep, ep + 1), [code])]
        for key, rows, value in writes:
            with self._naming(key):
                self._reserve(self._arrays[key], rows.stop)
                self._arrays[key][rows] = value
        self._frames, self._episodes = end, ep + 1
        try:
            with self._naming("zarr.json"):
                self._commit()  # the commit point: written last
        except OSError:
            self._frames, self._episodes = start, ep  # not committed: the next append overwrites it
            raise
        return ep

    @contextlib.contextmanager
    def _naming(self, name: str) -> Iterator[None]:
        """Give an OSError from zarr's store (a full disk: it names no file) the path it was writing:
        ``<path>/<name>``, an array's folder or the group's ``zarr.json``."""
        try:
            yield
        except OSError as err:
            if err.filename is not None:
                raise
            raise OSError(err.errno, err.strerror, str(self.path / name)) from err

    def __len__(self) -> int:
        """Committed frames."""
        return self._frames

    @property
    def num_episodes(self) -> int:
        return self._episodes

    @property
    def episode_ends(self) -> np.ndarray:
        """int64 (E,): exclusive end frame of each committed episode."""
        return self._arrays[_ENDS][: self._episodes] if self._episodes else np.zeros(0, np.int64)

    @property
    def episode_sources(self) -> np.ndarray:
        """int8 (E,): source code of each episode, an index into ``robot_rl.keys.SOURCES``."""
        return self._arrays[_SOURCE][: self._episodes] if self._episodes else np.zeros(0, np.int8)

    @property
    def episode_index(self) -> np.ndarray:
        """int64 (N,): the episode of each committed frame."""
        ends = self.episode_ends
        return np.repeat(np.arange(len(ends), dtype=np.int64), np.diff(ends, prepend=0))

    def arrays(self, start: int = 0) -> dict[str, np.ndarray]:
        """Committed frames from frame ``start`` on, read into memory: ``{key: (N - start, *shape)}`` for
        every spec key."""
        return {key: self._arrays[key][start : self._frames] for key in self.spec}

    def episode_arrays(self, start: int = 0) -> dict[str, np.ndarray]:
        """Committed per-episode values from episode ``start`` on, read into memory:
        ``{key: (E - start, *shape)}`` for every episode_spec key."""
        return {key: self._arrays[key][start : self._episodes] for key in self.episode_spec}

    def episode(self, index: int) -> dict[str, np.ndarray]:
        """Committed episode ``index``: ``{key: (T, *shape)}`` for every spec key and ``{key: (*shape)}``
        for every episode_spec key (the form :meth:`add_episode` takes).

        Raises IndexError when ``index`` is not a committed episode."""
        if not 0 <= index < self._episodes:
            raise IndexError(f"{self.path}: episode {index} is not one of the {self._episodes} committed")
        end = int(self._arrays[_ENDS][index])
        start = int(self._arrays[_ENDS][index - 1]) if index else 0
        out = {key: self._arrays[key][start:end] for key in self.spec}
        out.update({key: self._arrays[key][index] for key in self.episode_spec})
        return out

    def zarr_arrays(self) -> dict[str, zarr.Array]:
        """The underlying zarr arrays (length is the capacity; only the first ``len(self)`` rows count)."""
        return {key: self._arrays[key] for key in self.spec}
