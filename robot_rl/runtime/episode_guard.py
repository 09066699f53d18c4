"""Value checks of a pushed episode against the run's spec, before the learner stores it (issue 39).

:func:`robot_rl.runtime.messages.check_push` checks keys, dtypes, shapes, lengths and finiteness; a
well-formed episode can still hold values that drive training to NaN (an observation of 1e30, a reward
of 3e38) or that no real step produces (an action of 1000 m in a ±0.03 m box). :class:`EpisodeGuard`
checks the values against the run's own bounds:

- ``action`` (T, d) float32, env units: inside the env's action box, widened by
  :data:`ACTION_TOLERANCE` of its span on each side. Steps a human drove
  (``complementary_info.is_intervention``) are held to the same box: the intervention device is built
  for the env's box and the actor clips every human action to it (:mod:`robot_rl.runtime.actor`);
- ``next.reward`` (T,) float32: inside the reward range ``[r_min, r_max]`` the agent normalises
  rewards with (``offline.reward_range``; else the demos' reward range), widened by
  :data:`REWARD_MARGIN` spans on each side; no check when neither exists;
- float observations (T, *shape) and final observations (*shape): inside ``[lo - k*span, hi + k*span]``
  with ``[lo, hi]`` the policy's normalisation stats ``min``/``max`` of that key and ``k`` =
  ``online.obs_range_factor`` (0: no range check); keys without stats are only checked to be finite.
  Images (uint8) are not range-checked;
- ``task_index`` (T,) int64: an index into the policy's instructions (0 when it has none).

Every span is floored at :data:`MIN_SPAN` (the key's units), so a feature that was constant in the demos
(span 0) still allows ordinary values around it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot_rl import keys
from robot_rl.runtime.agents import env_shapes

ACTION_TOLERANCE = 1e-3
"""Fraction of the action box's span an action may lie outside it (float rounding, an env's own slack)."""
REWARD_MARGIN = 1.0
"""Spans of the reward range a reward may lie beyond either end (a shaped reward's overshoot)."""
MIN_SPAN = 1.0
"""Smallest span of a range, in the key's units: a feature constant in the demos still allows ordinary
values around it."""


class EpisodeRejected(ValueError):
    """A pushed episode holds a value outside the run's bounds. The message is one line naming the actor,
    episode, key, the offending value (with its frame and entry) and the allowed range."""


@dataclass(frozen=True)
class Bounds:
    """Inclusive per-entry bounds of one key: float64 arrays broadcastable to the key's per-frame shape,
    and what the range is derived from (``source``, named in a rejection)."""

    low: np.ndarray
    high: np.ndarray
    source: str


def widened(low: np.ndarray, high: np.ndarray, factor: float, source: str) -> Bounds:
    """``[low - factor*span, high + factor*span]`` per entry, span = max(high - low, :data:`MIN_SPAN`).

    Args:
        low, high: float arrays of one shape (the key's units), low <= high.
        factor: spans added on each side (>= 0).
        source: what the range comes from, for messages.
    """
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    span = np.maximum(high - low, MIN_SPAN)
    return Bounds(low - factor * span, high + factor * span, source)


def action_bounds(low: np.ndarray, high: np.ndarray) -> Bounds:
    """The env's action box ``[low, high]`` ((d,) floats, env units) widened by :data:`ACTION_TOLERANCE`
    of its span on each side."""
    low, high = np.asarray(low, np.float64), np.asarray(high, np.float64)
    tol = ACTION_TOLERANCE * (high - low)
    return Bounds(low - tol, high + tol, "the env's action box")


class EpisodeGuard:
    """The value checks of the module doc for one run.

    Args:
        action: bounds of ``action`` (d,) in env units (:func:`action_bounds`).
        reward_range: ``[r_min, r_max]`` of the agent's reward normalisation (or the demos'), or None for
            no reward check.
        obs_stats: observation key -> (min, max) arrays of the key's per-frame shape (the policy's
            normalisation stats), for the float observations to range-check.
        obs_range_factor: k (``online.obs_range_factor``); 0 = observations are only checked to be finite.
        num_tasks: instructions the policy knows (0 or 1: ``task_index`` must be 0).
    """

    def __init__(
        self,
        action: Bounds,
        reward_range: tuple[float, float] | None,
        obs_stats: dict[str, tuple[np.ndarray, np.ndarray]],
        obs_range_factor: float,
        num_tasks: int,
    ) -> None:
        self.bounds: dict[str, Bounds] = {keys.ACTION: action}
        if reward_range is not None:
            r_lo, r_hi = np.asarray(reward_range[0]), np.asarray(reward_range[1])
            self.bounds[keys.REWARD] = widened(r_lo, r_hi, REWARD_MARGIN, "the reward range")
        if obs_range_factor > 0:
            source = f"{obs_range_factor:g} x the stats' min/max span beyond them (online.obs_range_factor)"
            for key, (lo, hi) in obs_stats.items():
                bounds = widened(lo, hi, obs_range_factor, source)
                self.bounds[key] = self.bounds[keys.final_key(key)] = bounds
        self.num_tasks = max(num_tasks, 1)

    def check(self, frames: dict[str, np.ndarray], where: str) -> None:
        """Check one episode whose keys, dtypes and shapes :func:`~robot_rl.runtime.messages.check_frames`
        has checked (per-frame keys (T, *shape), ``final.*`` keys (*shape)).

        Args:
            where: ``"actor <i> episode <n>"``, the start of a rejection message.

        Raises:
            EpisodeRejected: the first value outside its bounds, or a ``task_index`` outside
                ``[0, num_tasks)``.
        """
        tasks = frames[keys.TASK_INDEX]
        if len(tasks) and not (0 <= tasks.min() and tasks.max() < self.num_tasks):
            bad = int(np.flatnonzero((tasks < 0) | (tasks >= self.num_tasks))[0])
            raise EpisodeRejected(
                f"{where}: {keys.TASK_INDEX!r} at frame {bad} is {int(tasks[bad])}, allowed "
                f"[0, {self.num_tasks - 1}] (the policy's instructions)"
            )
        for key, bounds in self.bounds.items():
            values = frames[key]
            outside = (values < bounds.low) | (values > bounds.high)
            if not outside.any():
                continue
            at = tuple(int(i) for i in np.argwhere(outside)[0])
            per_frame = not key.startswith(keys.FINAL_PREFIX)
            entry = at[1:] if per_frame else at
            lo, hi = (np.broadcast_to(b, values.shape[per_frame:])[entry] for b in (bounds.low, bounds.high))
            place = (f"frame {at[0]}" if per_frame else "the final observation") + (
                f" entry {entry[0] if len(entry) == 1 else entry}" if entry else ""
            )
            step = ""
            if key == keys.ACTION:
                step = " (an intervention step)" if frames[keys.INTERVENTION][at[0]] else " (a policy step)"
            raise EpisodeRejected(
                f"{where}: {key!r} at {place}{step} is {float(values[at]):.6g}, allowed "
                f"[{lo:.6g}, {hi:.6g}] ({bounds.source})"
            )


def run_guard(cfg, config: dict, stats: dict, obs_shapes: dict[str, tuple[int, ...]], demos) -> EpisodeGuard:
    """The :class:`EpisodeGuard` of an online run (one env is built and closed to read its action box).

    Args:
        cfg: the run's ``PipelineConfig``.
        config: the learner agent's checkpoint config (``method``, ``offline.reward_norm`` /
            ``reward_range``, ``policy.tasks``).
        stats: the agent's normalisation stats (key -> ``FeatureStats``).
        obs_shapes: the observation keys the replay stores -> per-frame shape.
        demos: the demos' ``TrainingSet`` or None (its rewards give the range when the agent has none).

    The action box is the env's; an unbounded env falls back to the stats' ``action`` min/max widened
    like an observation. Raises what building the env raises.
    """
    from dataclasses import replace

    unboxed = replace(cfg, policy=replace(cfg.policy, action_low=[], action_high=[]))
    box = env_shapes(unboxed)[2]
    if box.action_low:
        action = action_bounds(np.asarray(box.action_low), np.asarray(box.action_high))
    else:
        source = "the stats' action min/max (unbounded env), widened as observations"
        factor = cfg.online.obs_range_factor or np.inf  # 0: no range check, as for observations
        action = widened(stats[keys.ACTION].min, stats[keys.ACTION].max, factor, source)
    offline = config.get("offline") or {}
    configured = offline.get("reward_range") if offline.get("reward_norm", "none") != "none" else None
    if config.get("method") not in ("sac", "bc") and configured:
        reward_range = (float(configured[0]), float(configured[1]))
    elif demos is not None:
        rewards = demos.train.sampler.rewards
        reward_range = (float(rewards.min()), float(rewards.max())) if len(rewards) else None
    else:
        reward_range = None
    obs_stats = {
        k: (stats[k].min, stats[k].max)
        for k, shape in obs_shapes.items()
        if not keys.is_image_key(k) and k in stats and np.shape(stats[k].min) == tuple(shape)
    }
    tasks = (config.get("policy") or {}).get("tasks") or []
    return EpisodeGuard(action, reward_range, obs_stats, cfg.online.obs_range_factor, len(tasks))
