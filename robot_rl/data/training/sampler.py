"""Chunked-transition sampler (docs/algorithms.md §1, following Q-chunking's (QC, Li, Zhou & Levine 2025)
sequence sampling).

For a start index t in episode [lo, hi) and horizon h, with q_i = t + i (i < h):
- ``valid[i] = 1[q_i < hi]``: 1 − (episode ended before step i);
- ``actions[i] = a[min(q_i, hi − 1)]``: past the end the last action repeats;
- ``rewards = Σ_i γ^i r[q_i] valid[i]``;
- ``masks = 1 − max_i (done[q_i] · valid[i])``: 1 − terminal, the minimum of (1 − done) over the window.
  ``next.done`` is a true environment termination; a time-limit truncation is not done, so a truncated
  episode keeps mask 1 and is bootstrapped;
- ``next_observations = s[t + h]`` inside the episode; when the chunk reaches the episode end
  (t + h ≥ hi) it is the episode's final observation (the state after its last step, gymnasium's
  ``final_obs``) when that is recorded (the online replay keeps it), else the clamped s[hi − 1];
- ``critic_valid = valid[h−1] · (next state recorded or masks = 0)``: the chunk's TD target can be formed.
  A chunk that reaches a time-limit end without a recorded final observation (a LeRobot dataset, which
  has no row for it) would bootstrap from the wrong state, so it is left out of the critic loss; one that
  ends in a true termination needs no next state.
- ``success_discount = γ^{j+1}`` and ``success_reward = r[q_j]`` when the window's first termination, at
  step j, is a success (else both 0): the target adds the absorbing value of the success state from the
  step after it (:func:`robot_rl.algos.targets.success_tail`). A termination is a success where
  ``next.success`` is true; a dataset without ``next.success`` counts every ``next.done`` as a success
  (LeRobot-recorded demos end with ``next.done`` at the success frame; failures end by truncation).

With ``prefixes`` (CO-RFT's per-prefix targets, docs/algorithms.md §6) ``get`` also returns, for k = 1..h at
index k − 1: ``step_rewards`` r[q_{k−1}]·valid, ``step_dones`` done[q_{k−1}]·valid, ``prefix_observations``
s[t + k] (the episode's final observation or the clamped last row past the end, as ``next_observations``),
``prefix_critic_valid`` valid[k−1]·(s[t + k] recorded or a termination among the first k steps), and the
Monte-Carlo return ``mc_returns`` = Σ_{j=t}^{hi−1} γ^{j−t} r[j] with ``mc_discounts`` = Σ_{j=t}^{hi−1} γ^{j−t}
(so a per-step reward map r' = scale·(r − shift) gives G' = scale·(G − shift·mc_discounts)),
``step_success`` 1 at the window's first termination when it is a success, and ``mc_success_discount``
γ^{hi−t} / ``mc_success_reward`` r[hi−1] when the episode ends in a success (else 0), so the return with
the absorbing success value V is G' + mc_success_discount·V.
"""

from __future__ import annotations

import numpy as np

from robot_rl import keys
from robot_rl.data.errors import DatasetError


class ChunkSampler:
    """Draws chunked transitions from flat per-frame arrays.

    Args:
        arrays: ``{key: (N, ...)}`` holding ``obs_keys``, ``action`` (N, d), ``next.reward`` (N,) or (N, 1),
            ``next.done`` (N,) or (N, 1) and optionally ``next.success`` (N,) and
            ``complementary_info.is_intervention``.
        episode_index: int (N,), non-decreasing, each episode's frames contiguous.
        obs_keys: observation keys returned at t and t + h.
        horizon: chunk length h >= 1.
        gamma: discount in (0, 1].
        source: optional per-frame int source codes (N,), returned as ``source`` (B,).
        final_obs: optional ``{key: (E, ...)}`` for every key of ``obs_keys``: each episode's final
            observation, episodes in the order they appear in ``episode_index``.
        prefixes: also return the per-prefix fields (module docstring); settable later as ``.prefixes``.

    Raises DatasetError naming the key when a required array is missing or has the wrong length.
    """

    def __init__(
        self,
        arrays: dict[str, np.ndarray],
        episode_index: np.ndarray,
        obs_keys: list[str],
        horizon: int,
        gamma: float,
        source: np.ndarray | None = None,
        final_obs: dict[str, np.ndarray] | None = None,
        prefixes: bool = False,
    ) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        if not 0.0 < gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {gamma}")
        episode_index = np.asarray(episode_index)
        n = len(episode_index)
        if n == 0:
            raise DatasetError("ChunkSampler: no frames to sample from")
        for key in (*obs_keys, keys.ACTION, keys.REWARD, keys.DONE):
            if key not in arrays:
                raise DatasetError(f"ChunkSampler: arrays lack key {key!r}")
        for key, arr in arrays.items():
            if len(arr) != n:
                raise DatasetError(f"ChunkSampler: key {key!r} has {len(arr)} frames, episode_index {n}")
        if np.any(np.diff(episode_index) < 0):
            raise DatasetError("ChunkSampler: episode_index must be non-decreasing (episodes contiguous)")
        self.obs = {k: np.asarray(arrays[k]) for k in obs_keys}
        self.actions = np.asarray(arrays[keys.ACTION], dtype=np.float32)
        self.rewards = np.asarray(arrays[keys.REWARD], dtype=np.float32).reshape(n)
        self.dones = np.asarray(arrays[keys.DONE]).reshape(n).astype(bool)
        success = arrays.get(keys.SUCCESS)
        # a termination that is a success (module docstring); without next.success every termination is one
        self.success_end = self.dones if success is None else self.dones & np.asarray(success).reshape(n)
        interv = arrays.get(keys.INTERVENTION)
        self.intervention = None if interv is None else np.asarray(interv).reshape(n).astype(np.float32)
        self.source = None if source is None else np.asarray(source).reshape(n)
        self.horizon, self.gamma = int(horizon), float(gamma)
        # exclusive end of each frame's episode, and each frame's episode ordinal (0 .. E-1)
        change = np.flatnonzero(np.diff(episode_index)) + 1
        ends = np.append(change, n)
        lengths = np.diff(np.concatenate([[0], ends]))
        self.episode_end = np.repeat(ends, lengths)
        self.episode_ordinal = np.repeat(np.arange(len(ends)), lengths)
        self.final_obs = None
        if final_obs is not None:
            for key in obs_keys:
                if key not in final_obs:
                    raise DatasetError(f"ChunkSampler: final_obs lacks key {key!r}")
                if len(final_obs[key]) != len(ends):
                    raise DatasetError(
                        f"ChunkSampler: final_obs {key!r} has {len(final_obs[key])} episodes, "
                        f"episode_index {len(ends)}"
                    )
            self.final_obs = {k: np.asarray(final_obs[k]) for k in obs_keys}
        self.discounts = (self.gamma ** np.arange(self.horizon)).astype(np.float32)
        self.prefixes = bool(prefixes)
        self._mc: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.actions)

    def all_indices(self) -> np.ndarray:
        """Every valid start index (every frame), int64 (N,)."""
        return np.arange(len(self), dtype=np.int64)

    def next_indices(self, indices: np.ndarray) -> np.ndarray:
        """Row of each chunk's next observation, min(t + h, episode end − 1): int64 (B,)."""
        t = np.asarray(indices, dtype=np.int64)
        return np.minimum(t + self.horizon, self.episode_end[t] - 1)

    def prefix_indices(self, indices: np.ndarray) -> np.ndarray:
        """Row of s[t + k] for k = 1..h, min(t + k, episode end − 1): int64 (B, h)."""
        t = np.asarray(indices, dtype=np.int64)[:, None]
        return np.minimum(t + np.arange(1, self.horizon + 1)[None, :], self.episode_end[t] - 1)

    def _next_observations(self, t: np.ndarray, reaches_end: np.ndarray, rows=None) -> dict[str, np.ndarray]:
        """Observations at ``rows`` (default: each chunk's next row), (B,) or (B, h), with the episode's
        final observation where ``reaches_end`` (same shape) and it is recorded."""
        rows = self.next_indices(t) if rows is None else rows
        out = {k: v[rows] for k, v in self.obs.items()}
        if self.final_obs is not None and reaches_end.any():
            starts = np.broadcast_to(t.reshape(-1, *([1] * (rows.ndim - 1))), rows.shape)
            episodes = self.episode_ordinal[starts[reaches_end]]
            for key, arr in out.items():
                arr[reaches_end] = self.final_obs[key][episodes]
        return out

    def mc_returns(self) -> tuple[np.ndarray, np.ndarray]:
        """(N,) float64 ``G_t = r_t + γ G_{t+1}``, the discounted raw return to the end of t's episode, and
        (N,) ``D_t``, the sum of its discounts (a reward map ``scale · (r − shift)`` maps G to
        ``scale · (G − shift · D)``). Cached."""
        if self._mc is None:
            g, d = np.zeros(len(self)), np.zeros(len(self))
            for i in range(len(self) - 1, -1, -1):
                more = i + 1 < self.episode_end[i]
                g[i] = self.rewards[i] + (self.gamma * g[i + 1] if more else 0.0)
                d[i] = 1.0 + (self.gamma * d[i + 1] if more else 0.0)
            self._mc = (g, d)
        return self._mc

    def _first_success(self, qc: np.ndarray, dones_b: np.ndarray) -> np.ndarray:
        """(B, h) bool: step i is the window's first termination (``dones_b``, the window's valid
        terminations) and a success."""
        return dones_b & (np.cumsum(dones_b, axis=1) == 1) & self.success_end[qc]

    def mc_success(self, t: np.ndarray) -> dict[str, np.ndarray]:
        """``mc_success_discount`` γ^{hi−t} and ``mc_success_reward`` r[hi−1] where the episode of t ends in a
        success, else 0: (B,) float32 each."""
        last = self.episode_end[t] - 1
        ends = self.success_end[last]
        return {
            "mc_success_discount": np.where(ends, self.gamma ** (last + 1 - t), 0.0).astype(np.float32),
            "mc_success_reward": np.where(ends, self.rewards[last], 0.0).astype(np.float32),
        }

    def _prefix_fields(
        self,
        t: np.ndarray,
        qc: np.ndarray,
        valid_b: np.ndarray,
        dones: np.ndarray,
        end: np.ndarray,
        success: np.ndarray,
    ) -> dict:
        k = np.arange(1, self.horizon + 1)[None, :]
        reaches_end = t[:, None] + k >= end[:, None]
        recorded = ~reaches_end | (self.final_obs is not None)
        terminal_so_far = np.logical_or.accumulate(dones, axis=1)
        g, d = self.mc_returns()
        return {
            "step_rewards": (self.rewards[qc] * valid_b).astype(np.float32),
            "step_dones": dones.astype(np.float32),
            "prefix_observations": self._next_observations(t, reaches_end, self.prefix_indices(t)),
            "prefix_critic_valid": (valid_b & (recorded | terminal_so_far)).astype(np.float32),
            "mc_returns": g[t].astype(np.float32),
            "mc_discounts": d[t].astype(np.float32),
            "step_success": success.astype(np.float32),
            **self.mc_success(t),
        }

    def get(self, indices: np.ndarray) -> dict:
        """The chunked transitions starting at ``indices`` (B,). Returns numpy: ``observations``
        {key: (B, ...)}, ``actions`` (B, h, d) float32, ``rewards`` (B,) float32, ``masks`` (B,) float32,
        ``next_observations`` {key: (B, ...)}, ``valid`` (B, h) float32, ``critic_valid`` (B,) float32,
        ``success_discount`` and ``success_reward`` (B,) float32 (module docstring), and when present
        ``is_intervention`` (B, h) float32 (0 past the episode end) and ``source`` (B,)."""
        t = np.asarray(indices, dtype=np.int64)
        if t.ndim != 1 or (len(t) and (t.min() < 0 or t.max() >= len(self))):
            raise IndexError(f"indices must be 1-D within [0, {len(self)})")
        end = self.episode_end[t]
        q = t[:, None] + np.arange(self.horizon)[None, :]
        valid_b = q < end[:, None]
        qc = np.minimum(q, end[:, None] - 1)
        valid = valid_b.astype(np.float32)
        dones_b = self.dones[qc] & valid_b  # the window's terminations, (B, h)
        terminal = dones_b.any(1)
        reaches_end = t + self.horizon >= end
        next_recorded = ~reaches_end | (self.final_obs is not None)
        success = self._first_success(qc, dones_b)
        success_step = (success * self.gamma ** np.arange(1, self.horizon + 1)).astype(np.float32)
        out = {
            "observations": {k: v[t] for k, v in self.obs.items()},
            "actions": self.actions[qc],
            "rewards": (self.rewards[qc] * valid * self.discounts).sum(1).astype(np.float32),
            "masks": 1.0 - terminal.astype(np.float32),
            "next_observations": self._next_observations(t, reaches_end),
            "valid": valid,
            "critic_valid": (valid_b[:, -1] & (next_recorded | terminal)).astype(np.float32),
            "success_discount": success_step.sum(1),
            "success_reward": (self.rewards[qc] * success).sum(1).astype(np.float32),
        }
        if self.prefixes:
            out.update(self._prefix_fields(t, qc, valid_b, dones_b, end, success))
        if self.intervention is not None:
            out["is_intervention"] = self.intervention[qc] * valid
        if self.source is not None:
            out["source"] = self.source[t]
        return out

    def sample(self, batch_size: int, rng: np.random.Generator) -> dict:
        """``get`` at ``batch_size`` start indices drawn uniformly with ``rng``."""
        return self.get(rng.integers(0, len(self), size=batch_size))
