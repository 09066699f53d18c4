"""A LeRobot dataset made ready for chunked training: tabular columns in memory, camera frames from a frame
store, a train/validation split by episode, normalisation statistics from the training episodes only, and
the action horizon mapped from seconds to frames.

Batches follow docs/algorithms.md §1 (see :class:`robot_rl.data.training.sampler.ChunkSampler`); camera frames
at t and at the next-observation row are fetched from the store for exactly the rows in the batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import numpy as np

from robot_rl import keys
from robot_rl.config import ConfigError, DataConfig, DataReward, FrameCache
from robot_rl.data.errors import DatasetError
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.normalize import FeatureStats, compute_stats
from robot_rl.data.prev_action import chunk_reference, previous_actions, start_actions
from robot_rl.data.reward_labels import match_learner_gamma
from robot_rl.data.training.features import FeatureUse, as_input_column, extra_inputs
from robot_rl.data.training.frames import MemoryFrames, VideoFrames, ZarrFrameCache
from robot_rl.data.training.sampler import ChunkSampler

REWARD_MODES: tuple[str, ...] = get_args(DataReward)
FRAME_CACHES: tuple[str, ...] = get_args(FrameCache)


def horizon_from_seconds(horizon_s: float, fps: int, default: int, tolerance_s: float = 1e-4) -> int:
    """Chunk length in frames: ``horizon_s * fps`` when ``horizon_s > 0``, else ``default``.

    Raises ConfigError naming ``data.horizon_s`` when it is not a whole number (>= 1) of frames at ``fps``.
    """
    if horizon_s <= 0:
        return default
    steps = horizon_s * fps
    h = round(steps)
    if h < 1 or abs(steps - h) / fps > tolerance_s:
        raise ConfigError(
            f"data.horizon_s={horizon_s} is {steps:.3f} frames at {fps} fps; it must be a whole number of "
            f"frames (a multiple of {1 / fps:.6f} s)"
        )
    return h


@dataclass
class Split:
    """One side of the split: a chunk sampler over its frames and their dataset rows (N,) int64."""

    sampler: ChunkSampler
    rows: np.ndarray
    episodes: list[int]


class TrainingSet:
    """Chunked training data from a LeRobot dataset at ``root``.

    Args:
        root: dataset folder (meta/info.json).
        cfg: :class:`robot_rl.config.DataConfig` (cameras, image size, horizon in seconds, validation
            episodes, reward mode, frame cache).
        horizon: default chunk length h when ``cfg.horizon_s`` is 0.
        gamma: discount for the chunked reward (docs/algorithms.md §1), the learner's. Critic-labelled rewards
            (``robot-rl label``) shaped with another discount are reshaped with it when ``for_rl``
            (:func:`robot_rl.data.reward_labels.match_learner_gamma`).
        cache_dir: folder for the zarr frame cache when ``cfg.cache_dir`` is empty.
        for_rl: offline RL needs rewards and next-observation frames; BC needs neither, so without it the
            reward columns may be absent (zeros are used) and camera frames at t + h are not fetched.
        action_reference: empty, or the observation key relative actions are taken to
            (``policy.action_reference``); the ``action`` statistics are then those of the relative chunk
            actions a[t+k] − obs[t], per chunk step k (shape (h, d)).
        reference_velocity: the reference continues the last change of ``observation.prev_action``
            (``policy.action_reference_velocity``): a[t+k] − (a[t−1] + (k + 1)(a[t−1] − a[t−2])).
        gamma_key: the config key ``gamma`` comes from (named in messages).

    Attributes: ``obs_keys`` (vector keys then camera keys, sorted; the vectors are every
    ``observation.*`` column plus the columns ``cfg.features`` adds), ``obs_shapes`` (per-sample shapes;
    cameras (H, W, 3) at the training size), ``action_dim``, ``horizon``, ``fps``, ``stats`` (training
    episodes only; no image statistics: the encoder scales pixels to [0, 1]), ``train`` and ``val``
    (:class:`Split`; ``val`` is None without validation episodes), ``tasks``, ``feature_use``
    (:class:`robot_rl.data.training.features.FeatureUse`: inputs, targets and ignored columns).

    Raises:
        DatasetError: the dataset is unreadable (names the file), lacks ``action``, or lacks
            ``next.reward``/``next.done`` with ``reward='dataset'`` and ``for_rl``.
        ConfigError: unknown camera, validation episode out of range or covering every episode, unknown
            reward mode or frame cache, a horizon that is not a whole number of frames, a
            ``data.prev_action_start`` that is not 'zeros' or a vector observation of the action's shape, a
            ``data.features`` entry that is not a numeric non-camera column of the dataset, an
            ``action_reference`` that is not a vector observation of the action's shape (or
            ``observation.prev_action`` with ``data.prev_action_steps`` commands), ``reference_velocity``
            without ``observation.prev_action`` of at least 2 commands as the reference.
    """

    def __init__(
        self,
        root: str | Path,
        cfg: DataConfig,
        horizon: int,
        gamma: float,
        cache_dir: str | Path,
        for_rl: bool = False,
        action_reference: str = "",
        reference_velocity: bool = False,
        gamma_key: str = "offline.gamma",
    ) -> None:
        if cfg.reward not in REWARD_MODES:
            raise ConfigError(f"data.reward={cfg.reward!r}; expected one of {REWARD_MODES}")
        if cfg.frame_cache not in FRAME_CACHES:
            raise ConfigError(f"data.frame_cache={cfg.frame_cache!r}; expected one of {FRAME_CACHES}")
        if cfg.decode_threads < 0:
            raise ConfigError(f"data.decode_threads={cfg.decode_threads}; expected >= 0 (0 = automatic)")
        self.dataset = ds = LeRobotDataset(root, decode_threads=cfg.decode_threads)
        self.fps, self.tasks = ds.fps, ds.tasks
        self.horizon = horizon_from_seconds(cfg.horizon_s, ds.fps, horizon)
        table = ds.load_tabular()
        self._task_index = np.asarray(table[keys.TASK_INDEX]).reshape(-1)
        if keys.ACTION not in table:
            raise DatasetError(f"{ds.root / 'meta/info.json'}: no {keys.ACTION!r} feature to train on")
        if cfg.prev_action:
            table[keys.PREV_ACTION] = self._previous_actions(
                table, cfg.prev_action_start, cfg.prev_action_steps
            )
        self.camera_keys = self._cameras(ds, cfg.cameras) if cfg.images else []
        extra = extra_inputs(cfg.features, ds.features, ds.video_keys, ds.root)
        for key in extra:
            table[key] = as_input_column(table[key])
        vector_keys = sorted(k for k in table if k.startswith("observation.") or k in extra)
        self.obs_keys = vector_keys + self.camera_keys
        if not self.obs_keys:
            raise DatasetError(f"{ds.root / 'meta/info.json'}: no observation.* feature to condition on")
        val_eps = self._val_episodes(ds, cfg.val_episodes)
        self.for_rl = for_rl
        if for_rl and cfg.reward == "dataset":  # critic-labelled rewards: shaped with the learner's gamma
            match_learner_gamma(ds.root, table, gamma, gamma_key)
        self._add_reward(table, cfg.reward, for_rl)
        size = tuple(cfg.image_size) if cfg.image_size else None
        if size is not None and (len(size) != 2 or min(size) < 8):
            raise ConfigError(f"data.image_size={list(size)}: expected [H, W] with H, W >= 8")
        video = VideoFrames(ds, size)
        self.store = self._store(cfg, video, Path(cfg.cache_dir or cache_dir))
        self.obs_shapes = {k: tuple(ds.features[k]["shape"]) for k in vector_keys if k != keys.PREV_ACTION}
        self.obs_shapes.update({k: tuple(table[k].shape[1:]) for k in extra})
        if cfg.prev_action:
            self.obs_shapes[keys.PREV_ACTION] = tuple(table[keys.PREV_ACTION].shape[1:])
        for key in self.camera_keys:
            self.obs_shapes[key] = video.shape(key)
        self.action_dim = int(np.asarray(table[keys.ACTION]).reshape(len(table[keys.ACTION]), -1).shape[1])
        train_eps = [e for e in range(ds.num_episodes) if e not in val_eps]
        self.train = self._split(table, train_eps, vector_keys, gamma)
        self.val = self._split(table, val_eps, vector_keys, gamma) if val_eps else None
        self.stats: dict[str, FeatureStats] = compute_stats(
            {k: table[k][self.train.rows] for k in vector_keys}
        )
        self.stats[keys.ACTION] = self._action_stats(action_reference, reference_velocity)
        self.feature_use = FeatureUse.build(
            ds.features, self.obs_shapes, ds.video_keys, cfg.images, for_rl, len(self.tasks) > 1
        )

    # -- construction --------------------------------------------------------------------------------
    def _action_stats(self, reference: str, velocity: bool, max_chunks: int = 20000) -> FeatureStats:
        """Statistics of the training actions, (d,) each; with ``reference``, of the relative chunk actions
        a[t+k] − obs[t] (``velocity``: minus the constant-velocity reference) per chunk step k, (h, d) each,
        over up to ``max_chunks`` evenly spaced whole chunks (a step k relative to t moves about k times as
        far as the first, so each step gets its own scale)."""
        sampler = self.train.sampler
        if velocity and reference != keys.PREV_ACTION:
            raise ConfigError(
                f"policy.action_reference_velocity needs policy.action_reference={keys.PREV_ACTION!r} "
                f"(got {reference!r})"
            )
        if not reference:
            return FeatureStats.from_array(sampler.actions.reshape(len(sampler), -1))
        shape = self.obs_shapes.get(reference) or ()
        history = reference == keys.PREV_ACTION and len(shape) == 1 and shape[0] % self.action_dim == 0
        if shape != (self.action_dim,) and not history:
            raise ConfigError(
                f"policy.action_reference={reference!r}: relative actions need a vector observation of the "
                f"action's shape ({self.action_dim},) (or {keys.PREV_ACTION!r}, whose first "
                f"{self.action_dim} values are the last command); the dataset's are "
                f"{ {k: v for k, v in self.obs_shapes.items() if k in sampler.obs} }"
            )
        whole = np.flatnonzero(sampler.all_indices() + self.horizon <= sampler.episode_end)
        if len(whole) == 0:
            raise DatasetError(
                f"{self.dataset.root}: no training episode is as long as a chunk ({self.horizon})"
            )
        chunks = sampler.get(whole[np.unique(np.linspace(0, len(whole) - 1, max_chunks).astype(np.int64))])
        try:
            ref = chunk_reference(chunks["observations"][reference], self.action_dim, self.horizon, velocity)
        except ValueError as err:
            raise ConfigError(str(err)) from err
        return FeatureStats.from_array(chunks["actions"] - ref)

    @staticmethod
    def _previous_actions(table: dict[str, np.ndarray], start: str, steps: int) -> np.ndarray:
        action = np.asarray(table[keys.ACTION]).reshape(len(table[keys.ACTION]), -1)
        try:
            starts = start_actions(start, table, len(action), action.shape[1])
        except (KeyError, ValueError) as err:
            raise ConfigError(str(err)) from err
        return previous_actions(action, table[keys.EPISODE_INDEX], starts, steps)

    @staticmethod
    def _cameras(ds: LeRobotDataset, names: list[str]) -> list[str]:
        if not names:
            return sorted(ds.video_keys)
        wanted = [keys.image_key(n) for n in names]
        unknown = [k for k in wanted if k not in ds.video_keys]
        if unknown:
            raise ConfigError(
                f"data.cameras: {unknown[0]!r} is not a video feature of {ds.root}; it has {ds.video_keys}"
            )
        return sorted(wanted)

    @staticmethod
    def _add_reward(table: dict[str, np.ndarray], mode: str, need_reward: bool) -> None:
        n = len(table[keys.ACTION])
        if mode == "episode_end":
            ep = np.asarray(table[keys.EPISODE_INDEX]).reshape(n)
            last = np.append(ep[1:] != ep[:-1], True)
            table[keys.REWARD], table[keys.DONE] = last.astype(np.float32), last
            return
        missing = [k for k in (keys.REWARD, keys.DONE) if k not in table]
        if missing and need_reward:
            raise DatasetError(
                f"dataset has no {missing[0]!r} column, which offline RL needs: set "
                "--data.reward=episode_end (reward 1 at each episode's last frame, for datasets of "
                "successful demos) or label the dataset with rewards first"
            )
        for key in missing:  # BC never reads rewards; the sampler still wants the columns
            table[key] = np.zeros(n, dtype=np.float32)

    @staticmethod
    def _val_episodes(ds: LeRobotDataset, episodes: list[int]) -> list[int]:
        bad = [e for e in episodes if not 0 <= e < ds.num_episodes]
        if bad:
            raise ConfigError(
                f"data.val_episodes: {bad[0]} is outside the {ds.num_episodes} episodes of {ds.root}"
            )
        if len(set(episodes)) >= ds.num_episodes:
            raise ConfigError(f"data.val_episodes holds every episode of {ds.root}; none is left to train on")
        return sorted(set(episodes))

    def _split(self, table: dict, episodes: list[int], vector_keys: list[str], gamma: float) -> Split:
        ds = self.dataset
        rows = np.concatenate([np.arange(ds.episode_from[e], ds.episode_to[e]) for e in episodes])
        sub = {k: np.asarray(v)[rows] for k, v in table.items()}
        sampler = ChunkSampler(sub, sub[keys.EPISODE_INDEX], vector_keys, self.horizon, gamma)
        return Split(sampler, rows, episodes)

    def _store(self, cfg: DataConfig, video: VideoFrames, cache_dir: Path):
        if not self.camera_keys:
            return None
        mode = cfg.frame_cache
        if mode == "auto":
            frame_bytes = sum(int(np.prod(video.shape(k))) for k in self.camera_keys)
            decoded_gb = self.dataset.num_frames * frame_bytes / 1e9
            mode = "memory" if decoded_gb <= cfg.memory_limit_gb else "zarr"
        if mode == "memory":
            return MemoryFrames.decode(video, self.camera_keys)
        if mode == "zarr":
            size = "native" if video.size is None else f"{video.size[0]}x{video.size[1]}"
            return ZarrFrameCache.open_or_build(cache_dir / f"frames_{size}", video, self.camera_keys)
        return video

    # -- batches -------------------------------------------------------------------------------------
    @property
    def in_memory(self) -> bool:
        """True when no frame needs decoding or disk reads at batch time (DataLoader workers add nothing)."""
        return self.store is None or isinstance(self.store, MemoryFrames)

    def batch(self, split: Split, indices: np.ndarray) -> dict:
        """Chunked transitions at ``indices`` (B,) of ``split`` (docs/algorithms.md §1): the sampler's numpy
        batch
        with each camera's frames (B, H, W, 3) uint8 added to ``observations``, and to ``next_observations``
        when ``for_rl`` (for BC the camera keys of ``next_observations`` are absent). A multi-task dataset
        adds ``task`` (B,) object array of instruction strings to both. ``index`` (B,) int64 is ``indices``
        (each chunk's start within the split; RECAP looks its advantage label up by it)."""
        out = split.sampler.get(indices)
        out["index"] = np.asarray(indices, dtype=np.int64)
        if len(self.tasks) > 1:  # multi-task: the policy is conditioned on each frame's instruction
            task = np.asarray(self.tasks, dtype=object)[self._task_index[split.rows[indices]]]
            out["observations"][keys.TASK] = out["next_observations"][keys.TASK] = task
            if "prefix_observations" in out:  # CO-RFT: s[t + k], k = 1..h
                out["prefix_observations"][keys.TASK] = np.repeat(task[:, None], self.horizon, 1)
        if self.store is not None:
            now = split.rows[indices]
            nxt = split.rows[split.sampler.next_indices(indices)]
            rows = np.concatenate([now, nxt]) if self.for_rl else now  # one request per camera
            for key in self.camera_keys:
                frames = self.store.frames(key, rows)
                out["observations"][key] = frames[: len(now)]
                if self.for_rl:
                    out["next_observations"][key] = frames[len(now) :]
            if "prefix_observations" in out:
                pre = split.rows[split.sampler.prefix_indices(indices)]  # (B, h)
                for key in self.camera_keys:
                    frames = self.store.frames(key, pre.reshape(-1))
                    out["prefix_observations"][key] = frames.reshape(*pre.shape, *frames.shape[1:])
        return out

    def sample(self, batch_size: int, seed: int, step: int) -> dict:
        """The training batch of ``step``: indices drawn from ``default_rng([seed, step])``, so a batch
        depends only on (seed, step), whatever the worker count and whether the run was resumed."""
        rng = np.random.default_rng([seed, step])
        return self.batch(self.train, rng.integers(0, len(self.train.rows), size=batch_size))
