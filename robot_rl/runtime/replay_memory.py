"""The learner's in-memory window of online episodes: FIFO over whole episodes, bounded in env steps.

Appends are amortised O(1): every key lives in a preallocated numpy array whose live rows are
``[lo, hi)``. Evicting the oldest episode only advances ``lo``. When an append does not fit behind
``hi``, the live rows move to the front of the same arrays (compaction) or into arrays twice the size
(growth, at most ``limit`` rows: ``capacity + capacity // 4``). At that limit a compaction moves at most
``capacity`` rows and leaves room for at least ``capacity // 4`` more, so an appended row is copied at
most 4 more times on average, whatever the number of episodes. Readers get views of the live rows, never
copies.
"""

from __future__ import annotations

import numpy as np

Spec = dict[str, tuple[tuple[int, ...], np.dtype]]
EPISODE = "_episode"  # per row: the episode's index in the disk buffer
LENGTH = "_length"  # per episode: its number of rows
_MIN_ROWS = 1024


def newest_window(episode_ends: np.ndarray, capacity: int) -> int:
    """The first of the newest episodes whose steps fit in ``capacity`` (0 = unbounded: all of them).

    Args:
        episode_ends: int (E,), each episode's exclusive end step, increasing.
        capacity: env steps.

    Returns the index of the oldest episode to keep; at least the newest episode is kept even when it
    alone is longer than ``capacity``. 0 when there are no episodes."""
    ends = np.asarray(episode_ends, np.int64)
    if not capacity or not len(ends):
        return 0
    starts = np.concatenate([[0], ends[:-1]])
    fits = np.flatnonzero(ends[-1] - starts <= capacity)  # a suffix: the steps left fall with the start
    return int(fits[0]) if len(fits) else len(ends) - 1


class Columns:
    """Equal-length numpy columns ``{key: (rows, *shape)}`` whose live rows are ``[lo, hi)``.

    Args:
        spec: ``{key: (per-row shape, dtype)}``.
        limit: the most rows to allocate (None = no limit); an append that needs more live rows than
            ``limit`` still gets them.

    ``reallocations`` counts the arrays allocated, ``moved`` the rows copied by compactions and growth
    (not by appends)."""

    def __init__(self, spec: Spec, limit: int | None) -> None:
        self.data = {k: np.empty((0, *shape), dtype) for k, (shape, dtype) in spec.items()}
        self.limit = limit
        self.lo = self.hi = 0
        self.reallocations = self.moved = 0

    def __len__(self) -> int:
        return self.hi - self.lo

    @property
    def allocated(self) -> int:
        """Rows allocated per key."""
        return len(next(iter(self.data.values())))

    def view(self, key: str) -> np.ndarray:
        """The live rows of ``key`` (a view)."""
        return self.data[key][self.lo : self.hi]

    def drop(self, n: int) -> None:
        """Forget the ``n`` oldest live rows."""
        if not 0 <= n <= len(self):
            raise ValueError(f"cannot drop {n} of {len(self)} rows")
        self.lo += n

    def append(self, values: dict, n: int) -> None:
        """Append ``n`` rows: ``values[key]`` broadcastable to (n, *shape) for every key."""
        self._reserve(n)
        for key, arr in self.data.items():
            arr[self.hi : self.hi + n] = values[key]
        self.hi += n

    def _reserve(self, n: int) -> None:
        allocated = self.allocated
        if self.hi + n <= allocated:
            return
        live = len(self)
        need = live + n
        size = max(2 * allocated, 2 * need, _MIN_ROWS)
        if self.limit is not None:
            size = max(min(size, self.limit), need)
        if size <= allocated or 2 * need <= allocated:  # room enough once the live rows are at the front
            for arr in self.data.values():
                _move_to_front(arr, self.lo, self.hi)
        else:
            for key, arr in self.data.items():
                grown = np.empty((size, *arr.shape[1:]), arr.dtype)
                grown[:live] = arr[self.lo : self.hi]
                self.data[key] = grown
            self.reallocations += 1
        self.moved += live
        self.lo, self.hi = 0, live


def _move_to_front(arr: np.ndarray, lo: int, hi: int) -> None:
    """``arr[: hi - lo] = arr[lo:hi]`` in blocks of at most ``lo`` rows, so that no block overlaps its
    destination and numpy needs no temporary copy of the rows."""
    if lo == 0:
        return
    for start in range(lo, hi, lo):
        stop = min(start + lo, hi)
        arr[start - lo : stop - lo] = arr[start:stop]


class EpisodeMemory:
    """Whole episodes in arrival order, at most ``capacity`` env steps of them (0 = unbounded).

    Args:
        frame_spec: ``{key: (per-frame shape, dtype)}``.
        episode_spec: ``{key: (per-episode shape, dtype)}`` (the final observations).
        capacity: env steps held; appending past it evicts the oldest whole episodes first (FIFO). The
            newest episode is always held, even when it alone is longer.

    Raises ValueError for a negative capacity."""

    def __init__(self, frame_spec: Spec, episode_spec: Spec, capacity: int) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0 env steps (0 = unbounded), got {capacity}")
        self.capacity = int(capacity)
        self.frame_keys, self.episode_keys = list(frame_spec), list(episode_spec)
        limit = self.capacity + self.capacity // 4 if self.capacity else None
        self.rows = Columns({**frame_spec, EPISODE: ((), np.int64)}, limit)
        self.episodes = Columns({**episode_spec, LENGTH: ((), np.int64)}, limit)  # an episode has >= 1 row

    @property
    def num_steps(self) -> int:
        """Env steps held."""
        return len(self.rows)

    @property
    def num_episodes(self) -> int:
        """Episodes held."""
        return len(self.episodes)

    def extend(self, frames: dict, finals: dict, lengths: np.ndarray, first_episode: int) -> None:
        """Append consecutive episodes ``first_episode, first_episode + 1, ...`` of ``lengths`` (E,) steps.

        Args:
            frames: ``{key: (sum(lengths), *shape)}`` for every frame key.
            finals: ``{key: (E, *shape)}`` for every episode key.

        Raises ValueError when several episodes together exceed the capacity (pass only those of
        :func:`newest_window`) or a length is < 1."""
        lengths = np.asarray(lengths, np.int64).reshape(-1)
        total = int(lengths.sum())
        if len(lengths) and lengths.min() < 1:
            raise ValueError("every episode needs at least one step")
        if self.capacity and len(lengths) > 1 and total > self.capacity:
            raise ValueError(f"{len(lengths)} episodes of {total} steps exceed the capacity {self.capacity}")
        while self.capacity and len(self.episodes) and len(self.rows) + total > self.capacity:
            self.rows.drop(int(self.episodes.data[LENGTH][self.episodes.lo]))
            self.episodes.drop(1)
        ids = np.repeat(np.arange(first_episode, first_episode + len(lengths), dtype=np.int64), lengths)
        self.rows.append({**{k: frames[k] for k in self.frame_keys}, EPISODE: ids}, total)
        self.episodes.append({**{k: finals[k] for k in self.episode_keys}, LENGTH: lengths}, len(lengths))

    def append(self, frames: dict, finals: dict, episode: int) -> None:
        """Append one episode: ``frames[key]`` (T, *shape), ``finals[key]`` (*shape); evicts first."""
        length = len(frames[self.frame_keys[0]])
        self.extend(frames, {k: np.asarray(finals[k])[None] for k in self.episode_keys}, [length], episode)

    def frames(self) -> dict[str, np.ndarray]:
        """Views ``{key: (N, *shape)}`` of the held steps, oldest first."""
        return {k: self.rows.view(k) for k in self.frame_keys}

    def episode_index(self) -> np.ndarray:
        """View int64 (N,): each held step's episode index in the disk buffer (non-decreasing)."""
        return self.rows.view(EPISODE)

    def episode_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """``(disk, end)``: int64 (E,) each held episode's index in the disk buffer and its exclusive end
        row in :meth:`frames`, oldest first."""
        ends = np.cumsum(self.episodes.view(LENGTH))
        return (self.episode_index()[ends - 1] if len(ends) else ends), ends

    def finals(self) -> dict[str, np.ndarray]:
        """Views ``{key: (E, *shape)}`` of the held episodes' per-episode values, in the order of
        :meth:`episode_index`."""
        return {k: self.episodes.view(k) for k in self.episode_keys}
