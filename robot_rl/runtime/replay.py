"""The learner's replay: online episodes on disk (zarr) and RLPD symmetric sampling with the demos.

Every episode an actor records is appended once to a :class:`~robot_rl.data.replay.ZarrReplayBuffer`
with two extra per-frame keys, ``runtime.actor`` and ``runtime.actor_episode``. Because a buffer append
is atomic, what the learner has acknowledged to each actor is read back from the buffer itself after a
crash: an episode is either in the buffer and acknowledged, or neither, so a resent episode is never
stored twice and none is lost (docs/design.md §4).

Sampling follows RLPD (Ball et al. 2023, "Efficient Online RL with Offline Data"; docs/algorithms.md §5):
each batch takes ``demo_fraction`` of its chunks from the prior buffer (the demonstration dataset plus
every held online step a human drove) and the rest from all held online steps: the newest
``online.replay_capacity`` env steps, kept in memory by :mod:`robot_rl.runtime.replay_memory`. Chunks
are the chunked transitions of docs/algorithms.md §1.

Operators' recorded edits (:mod:`robot_rl.runtime.episode_edits`) are applied to the held steps, never to
the disk: a relabelled episode's last step carries the label's ``next.success`` / ``next.done`` /
``next.reward``, and an excluded episode's steps are never drawn. New edits are picked up by
:meth:`OnlineReplay.refresh_edits` (the learner calls it between updates) and on every reopen.

Two ledgers (:mod:`robot_rl.runtime.episode_ledger`) beside the buffer record what the learner did with
episodes besides storing them: ``rejected.jsonl`` (refused at push, never stored, yet acknowledged, so
the actor moves on and a resend is answered the same) and ``quarantine.jsonl`` (stored, never drawn:
training diverged after they came in).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from robot_rl import keys
from robot_rl.data.errors import DatasetError
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.data.training.sampler import ChunkSampler
from robot_rl.runtime.episode_edits import LABEL_KEYS, EditLogError, RunEdits, edited_frames, label_values
from robot_rl.runtime.episode_ledger import EpisodeLedger
from robot_rl.runtime.replay_memory import EpisodeMemory, newest_window

ACTOR_KEY = "runtime.actor"
ACTOR_EPISODE_KEY = "runtime.actor_episode"
log = logging.getLogger(__name__)


def episode_spec(obs_shapes: dict[str, tuple[int, ...]], action_dim: int) -> dict:
    """Per-frame spec of a recorded online episode: observations (images uint8, vectors float32), the
    episode's instruction as ``task_index`` (int64: its index in the policy's ``policy.tasks``, 0 for a
    policy conditioned on no instruction), the executed ``action`` (d,), ``next.reward``, ``next.done``,
    ``next.success`` and ``complementary_info.is_intervention``."""
    spec: dict = {
        k: (tuple(s), np.uint8 if keys.is_image_key(k) else np.float32) for k, s in obs_shapes.items()
    }
    spec[keys.TASK_INDEX] = ((), np.int64)
    spec[keys.ACTION] = ((action_dim,), np.float32)
    spec[keys.REWARD] = ((), np.float32)
    for key in (keys.DONE, keys.SUCCESS, keys.INTERVENTION):
        spec[key] = ((), np.bool_)
    return spec


def final_spec(obs_shapes: dict[str, tuple[int, ...]]) -> dict:
    """Per-episode spec of a recorded online episode: the final observation ``final.<key>`` (the state
    after the last step) of every observation key, which a chunk reaching a time-limit end bootstraps
    from (docs/algorithms.md §1)."""
    return {
        keys.final_key(k): (tuple(s), np.uint8 if keys.is_image_key(k) else np.float32)
        for k, s in obs_shapes.items()
    }


SOURCE_KEYS = ("index",)
"""Batch keys that locate rows in one source (a training split's chunk starts, read by RECAP), meaningless
in a batch mixed from several sources: :func:`concat_batches` leaves them out."""


def concat_batches(parts: list[dict]) -> dict:
    """Concatenate chunk batches along the batch axis (nested observation dicts included), without the
    per-source :data:`SOURCE_KEYS`."""
    parts = [p for p in parts if p]
    out = {}
    for key, value in parts[0].items():
        if key in SOURCE_KEYS:
            continue
        if isinstance(value, dict):
            out[key] = {k: np.concatenate([p[key][k] for p in parts]) for k in value}
        else:
            out[key] = np.concatenate([p[key] for p in parts])
    return out


class OnlineReplay:
    """Online episodes from every actor: all of them on disk, the newest ``capacity`` env steps in memory
    for sampling.

    The disk buffer is the durable record of every episode. The memory window
    (:class:`~robot_rl.runtime.replay_memory.EpisodeMemory`) is a FIFO over whole episodes: an add that
    would hold more than ``capacity`` steps evicts the oldest episodes first, and samples come only from
    the episodes held. On a restart only the newest episodes that fit are read back from disk.

    Args:
        path: folder of the zarr buffer (created, or resumed after a crash); its ledgers
            ``rejected.jsonl`` and ``quarantine.jsonl`` (module doc) live beside it.
        obs_shapes: observation key -> per-frame shape (images (H, W, 3)).
        action_dim: d.
        horizon: chunk length h of the sampled transitions.
        gamma: discount of the chunked reward.
        capacity: env steps held in memory (``online.replay_capacity``); 0 = every episode.
        edits_dir: the online run folder (``online/<name>_seed<k>``) whose ``actor<i>/edits.jsonl``
            edit the episodes (:mod:`robot_rl.runtime.episode_edits`); None = no edits.
        tasks: the policy's instruction vocabulary (``policy.tasks``); when non-empty, samples carry each
            chunk's instruction ``task`` (strings, from the frames' ``task_index``) in ``observations``
            and ``next_observations``, as the offline training set's do.

    Raises:
        DatasetError: the buffer on disk has a different spec (another task or policy) or is unreadable, or
            a ledger holds an invalid line.
        EditLogError: an edit log holds an invalid line (names the file and line).
        ValueError: a negative capacity.
    """

    def __init__(
        self,
        path: str | Path,
        obs_shapes: dict[str, tuple[int, ...]],
        action_dim: int,
        horizon: int,
        gamma: float,
        capacity: int = 0,
        edits_dir: str | Path | None = None,
        tasks: list[str] | None = None,
    ) -> None:
        self.obs_keys = sorted(obs_shapes)
        self.tasks = np.asarray(tasks or [], dtype=object)
        spec = episode_spec(obs_shapes, action_dim)
        finals = final_spec(obs_shapes)
        spec[ACTOR_KEY] = ((), np.int32)
        spec[ACTOR_EPISODE_KEY] = ((), np.int64)
        self.buffer = ZarrReplayBuffer(path, spec, finals)
        self.horizon, self.gamma = horizon, gamma
        sampled = (*self.obs_keys, keys.TASK_INDEX, keys.ACTION, *LABEL_KEYS, keys.INTERVENTION)
        self.memory = EpisodeMemory({k: spec[k] for k in sampled}, finals, capacity)
        self._sampler: ChunkSampler | None = None
        self._rows = self._prior_rows = np.zeros(0, np.int64)
        self.acked: dict[int, int] = {}
        self.edits = RunEdits(edits_dir) if edits_dir is not None else None
        self._edit_error = ""
        self._disk_of: dict[tuple[int, int], int] = {}  # (actor, actor episode) -> disk episode
        self._recorded: dict[int, dict] = {}  # disk episode -> its recorded last-step LABEL_KEYS values
        self._excluded: set[int] = set()  # held disk episodes never sampled
        folder = Path(path).parent
        self.rejected = EpisodeLedger(folder / "rejected.jsonl")
        self.quarantined = EpisodeLedger(folder / "quarantine.jsonl")
        for actor, ep in self.rejected.reasons:
            self.acked[actor] = max(self.acked.get(actor, 0), ep + 1)
        ends = self.buffer.episode_ends
        if len(ends):
            starts = np.concatenate([[0], ends[:-1]])
            stored = self.buffer.zarr_arrays()
            actors = stored[ACTOR_KEY].get_coordinate_selection(starts)
            episodes = stored[ACTOR_EPISODE_KEY].get_coordinate_selection(starts)
            for index, (actor, ep) in enumerate(zip(actors, episodes, strict=True)):
                self.acked[int(actor)] = max(self.acked.get(int(actor), 0), int(ep) + 1)
                self._disk_of[int(actor), int(ep)] = index
            first = newest_window(ends, capacity)
            self.memory.extend(
                self.buffer.arrays(int(starts[first])),
                self.buffer.episode_arrays(first),
                np.diff(ends[first:], prepend=starts[first]),
                first,
            )
            self._apply_edits()

    @property
    def num_steps(self) -> int:
        """Online env steps stored (on disk; memory holds at most ``capacity`` of them)."""
        return len(self.buffer)

    @property
    def num_episodes(self) -> int:
        """Online episodes stored (on disk)."""
        return self.buffer.num_episodes

    def add(self, actor: int, actor_episode: int, frames: dict[str, np.ndarray]) -> bool:
        """Store actor ``actor``'s episode number ``actor_episode``: T frames per key of the episode spec and
        the final observation per key of :func:`final_spec`. In memory it evicts the oldest episodes that
        no longer fit in the capacity.

        Returns False (and stores nothing) when that episode is already stored: a resend after a lost
        acknowledgement. Durable on return.

        Raises:
            DatasetError: an episode was skipped (``actor_episode`` beyond the next expected one), or the
                frames do not match the spec (names the key) or hold NaN/inf.
        """
        if not self._is_next(actor, actor_episode):
            return False
        length = len(frames[keys.ACTION])
        frames = {
            **frames,
            ACTOR_KEY: np.full(length, actor, np.int32),
            ACTOR_EPISODE_KEY: np.full(length, actor_episode, np.int64),
        }
        source = "intervention" if np.asarray(frames[keys.INTERVENTION]).any() else "online"
        ep = self.buffer.add_episode(frames, source=source)
        self.acked[actor] = actor_episode + 1
        self._disk_of[actor, actor_episode] = ep
        self.memory.append(frames, frames, ep)
        self._apply_edits()
        return True

    def _is_next(self, actor: int, actor_episode: int) -> bool:
        """Whether ``actor_episode`` is the next episode expected from ``actor`` (False: handled before).

        Raises:
            DatasetError: an episode was skipped.
        """
        expected = self.acked.get(actor, 0)
        if actor_episode > expected:
            raise DatasetError(
                f"{self.buffer.path}: actor {actor} sent episode {actor_episode} but episode {expected} "
                "is the next one expected; episodes must arrive in order"
            )
        return actor_episode == expected

    def reject(self, actor: int, actor_episode: int, reason: str) -> bool:
        """Record that actor ``actor``'s episode ``actor_episode`` was refused for ``reason`` (one line)
        instead of storing it: it counts as acknowledged, in memory and in ``rejected.jsonl`` (durable on
        return). Returns False (and records nothing) when the episode was handled before (a resend).

        Raises:
            DatasetError: an episode was skipped.
            OSError: the ledger cannot be written (names it); nothing is acknowledged then.
        """
        if not self._is_next(actor, actor_episode):
            return False
        self.rejected.add(actor, actor_episode, reason)
        self.acked[actor] = actor_episode + 1
        return True

    def quarantine(self, first: int, reason: str) -> list[tuple[int, int]]:
        """Exclude every stored episode from disk episode ``first`` on from sampling for good (recorded in
        ``quarantine.jsonl``; they stay on disk). Returns their ``(actor, actor episode)``, oldest first,
        those quarantined before left out.

        Raises:
            OSError: the ledger cannot be written (names it).
        """
        named = sorted(
            (key for key, ep in self._disk_of.items() if ep >= first and key not in self.quarantined.reasons),
            key=self._disk_of.__getitem__,
        )
        for actor, ep in named:
            self.quarantined.add(actor, ep, reason)
        self._sampler = None
        return named

    def refresh_edits(self) -> bool:
        """Apply the edit logs' new lines to the held episodes (cheap when no log changed: one stat per
        actor). Returns whether any log changed. An invalid line is logged (once per message) and the
        edits read before it stay applied: a running learner does not stop over a damaged log, while a
        new :class:`OnlineReplay` refuses it."""
        if self.edits is None:
            return False
        try:
            changed = self.edits.refresh()
        except EditLogError as err:
            if str(err) != self._edit_error:
                log.error("replay: edits not applied: %s", err)
                self._edit_error = str(err)
            return False
        self._edit_error = ""
        if changed:
            self._apply_edits()
        return changed

    def edited(self, actor: int, actor_episode: int) -> bool:
        """Whether an operator has edited actor ``actor``'s episode ``actor_episode`` (edits as last read)."""
        return self.edits is not None and self.edits.get(actor, actor_episode) is not None

    def edited_episodes(self) -> list[tuple[tuple[int, int], dict[str, np.ndarray]]]:
        """Every stored episode (on disk, oldest first) as its edits make it, excluded and quarantined
        ones left out:
        ``((actor, actor episode), columns)`` with the (T,) ``next.success``, ``next.done``,
        ``next.reward`` (relabel applied, :func:`~robot_rl.runtime.episode_edits.edited_frames`) and
        ``complementary_info.is_intervention`` of the episode. Reads only those scalar columns."""
        ends = self.buffer.episode_ends
        if not len(ends):
            return []
        stored = self.buffer.zarr_arrays()
        n = int(ends[-1])
        cols = {k: np.asarray(stored[k][:n]) for k in (*LABEL_KEYS, keys.INTERVENTION)}
        starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        actors = np.asarray(stored[ACTOR_KEY].get_coordinate_selection(starts))
        episodes = np.asarray(stored[ACTOR_EPISODE_KEY].get_coordinate_selection(starts))
        out = []
        for lo, hi, actor, ep in zip(
            starts.tolist(), ends.tolist(), actors.tolist(), episodes.tolist(), strict=True
        ):
            if (actor, ep) in self.quarantined.reasons:
                continue
            edits = self.edits.get(actor, ep) if self.edits is not None else None
            frames = edited_frames({k: v[lo:hi] for k, v in cols.items()}, edits)
            if frames is not None:
                out.append(((actor, ep), frames))
        return out

    def _apply_edits(self) -> None:
        """Set each held episode's last step to its label (or back to what was recorded) and collect the
        excluded episodes; the sampler is rebuilt on the next draw."""
        self._sampler = None
        if self.edits is None:
            return
        disk, ends = self.memory.episode_ends()
        last_row = dict(zip(disk.tolist(), (ends - 1).tolist(), strict=True))
        labels: dict[int, str] = {}
        self._excluded = set()
        for key, edit in self.edits.edits.items():
            ep = self._disk_of.get(key)
            if ep not in last_row:
                continue
            if edit.label is not None:
                labels[ep] = edit.label
            if edit.exclude:
                self._excluded.add(ep)
        held = self.memory.frames()
        for ep in set(labels) | set(self._recorded):
            if ep not in last_row:
                self._recorded.pop(ep)  # evicted
                continue
            row = last_row[ep]
            if ep in labels:
                self._recorded.setdefault(ep, {k: held[k][row].copy() for k in LABEL_KEYS})
                values = label_values(labels[ep])
            else:  # the label was cleared: back to what was recorded
                values = self._recorded.pop(ep)
            for k in LABEL_KEYS:
                held[k][row] = values[k]

    def _build(self) -> ChunkSampler | None:
        """The sampler over views of the held steps (no copy of the observations)."""
        if self._sampler is None and self.memory.num_steps:
            arrays, finals = self.memory.frames(), self.memory.finals()
            final_obs = {k: finals[keys.final_key(k)] for k in self.obs_keys}
            self._sampler = ChunkSampler(
                arrays,
                self.memory.episode_index(),
                self.obs_keys,
                self.horizon,
                self.gamma,
                final_obs=final_obs,
            )
            quarantined = {self._disk_of[k] for k in self.quarantined.reasons if k in self._disk_of}
            kept = ~np.isin(self.memory.episode_index(), list(self._excluded | quarantined))
            self._rows = np.flatnonzero(kept)
            self._prior_rows = np.flatnonzero(arrays[keys.INTERVENTION] & kept)
        return self._sampler

    @property
    def sampled_steps(self) -> int:
        """Held online steps that may be drawn (those of excluded or quarantined episodes are not)."""
        self._build()
        return len(self._rows) if self._sampler is not None else 0

    @property
    def intervention_steps(self) -> int:
        """Held online steps a human drove, excluded episodes left out (they also belong to the prior
        buffer)."""
        self._build()
        return len(self._prior_rows)

    def sample_online(self, n: int, rng: np.random.Generator) -> dict:
        """``n`` chunks starting at uniformly drawn held online steps of episodes not excluded ({} when
        n == 0 or there are none)."""
        if n <= 0 or self._build() is None or not len(self._rows):
            return {}
        return self._get(self._rows[rng.integers(0, len(self._rows), size=n)])

    def sample_interventions(self, n: int, rng: np.random.Generator) -> dict:
        """``n`` chunks starting at uniformly drawn held human-driven online steps ({} if there are none)."""
        if n <= 0 or self._build() is None or not len(self._prior_rows):
            return {}
        return self._get(self._prior_rows[rng.integers(0, len(self._prior_rows), size=n)])

    def _get(self, rows: np.ndarray) -> dict:
        """The chunks starting at held rows ``rows``, with their instruction when the policy has several."""
        out = self._sampler.get(rows)
        if len(self.tasks):
            task = self.tasks[self.memory.frames()[keys.TASK_INDEX][rows]]  # one per episode: both ends
            out["observations"][keys.TASK] = out["next_observations"][keys.TASK] = task
        return out


class PriorData:
    """The demonstration side of RLPD sampling: a :class:`~robot_rl.data.training.training_set.TrainingSet`'s
    training split. ``keys`` are the observation keys the learner uses (the env's); ``tasks`` the policy's
    instruction vocabulary: when non-empty, samples carry each chunk's instruction ``task`` (the dataset's
    per-frame one, or its only one).

    Raises:
        DatasetError: the dataset lacks an observation key, or holds an instruction outside ``tasks``.
    """

    def __init__(self, data, obs_keys: list[str], tasks: list[str] | None = None) -> None:
        missing = [k for k in obs_keys if k not in data.obs_keys]
        if missing:
            raise DatasetError(
                f"{data.dataset.root}: the demo dataset lacks the env's observation key {missing[0]!r}; it "
                f"has {data.obs_keys}"
            )
        unknown = [t for t in data.tasks if tasks and t not in tasks]
        if unknown:
            raise DatasetError(
                f"{data.dataset.root}: the demo instruction {unknown[0]!r} is not one the policy was trained "
                f"on (policy.tasks: {tasks})"
            )
        self.data, self.obs_keys, self.tasks = data, obs_keys, tasks or []

    def sample(self, n: int, rng: np.random.Generator) -> dict:
        if n <= 0:
            return {}
        out = self.data.batch(self.data.train, rng.integers(0, len(self.data.train.rows), size=n))
        for side in ("observations", "next_observations"):
            kept = {k: out[side][k] for k in self.obs_keys}
            if self.tasks:  # a one-instruction dataset's batches carry none: its only one
                kept[keys.TASK] = out[side].get(keys.TASK, np.full(n, self.data.tasks[0], dtype=object))
            out[side] = kept
        return out


def rlpd_batch(
    replay: OnlineReplay,
    prior: PriorData | None,
    batch_size: int,
    demo_fraction: float,
    rng: np.random.Generator,
    human_only: bool = False,
) -> dict:
    """One RLPD batch: ``round(batch_size * demo_fraction)`` chunks from the prior buffer (demos and
    human-driven online steps held, in proportion to their sizes) and the rest from all held online steps
    (the newest ``capacity`` of :class:`OnlineReplay`, excluded episodes left out). Before any online step
    is stored (or while every held one is excluded), the whole batch comes from the prior buffer.

    ``human_only`` (HG-DAgger: imitate only what a human did): the whole batch comes from the prior buffer
    (``demo_fraction`` is ignored), and each chunk drawn from human-driven online steps gets
    ``valid = valid * is_intervention`` (B, h): a chunk starts at a human step but may run past the
    hand-back, and the policy's own actions after it must not be imitated. Demo chunks keep their
    ``valid``. RL batches (``human_only`` False) keep every step: RL learns from the policy's steps too.

    Returns the chunk batch of :meth:`ChunkSampler.get` without ``source`` / ``is_intervention``.

    Raises:
        DatasetError: there is nothing to sample from (with ``human_only``: no demonstration and no
            human-driven step).
    """
    online_steps = replay.sampled_steps
    n_prior = batch_size if human_only or not online_steps else round(batch_size * demo_fraction)
    n_online = batch_size - n_prior
    n_demo_rows = len(prior.data.train.rows) if prior is not None else 0
    n_interv = replay.intervention_steps
    if n_prior and not (n_demo_rows or n_interv):
        if human_only:
            raise DatasetError("no demonstrations or human-driven online steps to imitate yet")
        if not online_steps:
            raise DatasetError(
                "no demonstrations, interventions or online steps (not excluded) to sample from yet"
            )
        n_online, n_prior = batch_size, 0
    from_interv = int(rng.binomial(n_prior, n_interv / (n_interv + n_demo_rows))) if n_prior else 0
    interventions = replay.sample_interventions(from_interv, rng)
    if human_only and interventions:
        interventions["valid"] = interventions["valid"] * interventions["is_intervention"]
    parts = [
        prior.sample(n_prior - from_interv, rng) if prior is not None else {},
        interventions,
        replay.sample_online(n_online, rng),
    ]
    # per-sample source / intervention flags exist on some parts only; the agents do not read them
    return concat_batches(
        [{k: v for k, v in p.items() if k not in ("source", "is_intervention")} for p in parts]
    )
