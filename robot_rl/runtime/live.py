"""What an actor shows live, step by step, to an intervention device that displays it (the web GUI).

A device that defines ``observe(step_info: dict) -> None`` gets, after every executed env step, the dict
built by :meth:`LiveStats.step`; devices without it (keyboard, gamepad, the simulated human) are not
asked. The numbers are the actor's own view; the learner's metrics (robot_rl.runtime.metrics) stay the
record of the run.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import numpy as np

from robot_rl.runtime.metrics import episode_meta

WINDOW = 20  # episodes in the success / intervention rates


class LiveStats:
    """Rolling live numbers of actor ``actor_id``: episode counter, success rate and intervention rate
    (share of steps a human drove) over the last :data:`WINDOW` episodes, env steps/s over the last
    50 steps."""

    def __init__(self, actor_id: int, control_hz: float) -> None:
        self.actor_id, self.control_hz = actor_id, float(control_hz)
        self.recent: deque[dict[str, Any]] = deque(maxlen=WINDOW)
        self.stamps: deque[float] = deque(maxlen=50)
        self.episodes = 0
        self.total_steps = 0

    def episode_end(self, frames: dict[str, np.ndarray] | None) -> None:
        """Count a finished episode (``frames`` as the actor logs them; None = no step ran)."""
        if frames is None:
            return
        self.recent.append(episode_meta(frames, self.control_hz, -1))
        self.episodes += 1

    def step(
        self,
        obs: dict[str, np.ndarray],
        step: int,
        reward: float,
        info: dict[str, Any],
        intervened: bool,
        chunk_index: int,
        chunk_len: int,
        version: int,
        latest: int,
    ) -> dict[str, Any]:
        """The step info of the step that just ran.

        Args:
            obs: the observation after the step (LeRobot keys; camera images uint8 (H, W, 3)).
            step: steps of this episode so far (1 after the first step).
            reward: the reward the learner gets for it; ``info`` the env's info (``progress`` and
                ``critic_done_prob`` when a progress critic gives the reward).
            intervened: a human drove this step; ``chunk_index`` the index of the executed action in its
                policy chunk (-1 when the human drove) of ``chunk_len`` actions.
            version, latest: the actor's weight version and the newest the learner has published.

        Returns a dict with ``actor``, ``episode`` (index of the running episode), ``step``,
        ``total_steps``, ``acting`` ("human" / "policy"), ``chunk_index``, ``chunk_len``, ``reward``,
        ``progress`` and ``done_prob`` (None without a critic), ``success_rate`` and
        ``intervention_rate`` (last 20 episodes; None before the first), ``steps_per_s``, ``version``,
        ``lag`` (publications behind the learner) and ``obs``.
        """
        now = time.monotonic()
        self.stamps.append(now)
        self.total_steps += 1
        rate = (len(self.stamps) - 1) / (self.stamps[-1] - self.stamps[0]) if len(self.stamps) > 1 else 0.0
        recent = list(self.recent)
        steps = sum(e["steps"] for e in recent)
        progress, done = info.get("progress"), info.get("critic_done_prob")
        return {
            "actor": self.actor_id,
            "episode": self.episodes,
            "step": step,
            "total_steps": self.total_steps,
            "acting": "human" if intervened else "policy",
            "chunk_index": chunk_index,
            "chunk_len": chunk_len,
            "reward": float(reward),
            "progress": None if progress is None else float(progress),
            "done_prob": None if done is None else float(done),
            "success_rate": float(np.mean([e["success"] for e in recent])) if recent else None,
            "intervention_rate": sum(e["intervention_steps"] for e in recent) / steps if steps else None,
            "steps_per_s": float(rate),
            "version": int(version),
            "lag": max(int(latest) - int(version), 0) if latest >= 0 else 0,
            "obs": obs,
        }
