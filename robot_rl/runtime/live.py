"""What an actor shows live, step by step, to an intervention device that displays it (the web GUI).

A device that defines ``observe(step_info: dict) -> None`` gets, after every executed env step, the dict
built by :meth:`LiveStats.step`; devices without it (keyboard, gamepad, the simulated human) are not
asked. The numbers are the actor's own view; the learner's metrics (robot_rl.runtime.metrics) stay the
record of the run. The rates count episodes as operators edited them in the episode browser
(robot_rl.runtime.episode_edits: relabels applied, excluded episodes left out), re-read at most every
:data:`EDITS_POLL_S`.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl import keys
from robot_rl.runtime.episode_edits import LABEL_KEYS, EditLogError, RunEdits, edited_frames
from robot_rl.runtime.metrics import episode_meta

WINDOW = 20  # episodes in the success / intervention rates
EDITS_POLL_S = 1.0  # how often the edit logs are checked for changes (s)
log = logging.getLogger(__name__)


class LiveStats:
    """Rolling live numbers of actor ``actor_id``: episode counter, success rate and intervention rate
    (share of steps a human drove) over the last :data:`WINDOW` episodes as edited, env steps/s over the
    last 50 steps.

    Args:
        actor_id: the actor (its edits are those of ``actor<actor_id>/edits.jsonl``).
        control_hz: the env's control rate (Hz).
        edits_dir: the online run folder (``online/<name>_seed<k>``) whose edit logs relabel or exclude
            the actor's episodes; None = rates as recorded. A damaged log is logged and the edits read
            before it stay (the live view never stops the actor).
    """

    def __init__(self, actor_id: int, control_hz: float, edits_dir: str | Path | None = None) -> None:
        self.actor_id, self.control_hz = actor_id, float(control_hz)
        self.recent: deque[tuple[int, dict[str, np.ndarray]]] = deque(maxlen=WINDOW)
        self.stamps: deque[float] = deque(maxlen=50)
        self.episodes = 0
        self.total_steps = 0
        self.edits_dir = None if edits_dir is None else Path(edits_dir)
        self._edits: RunEdits | None = None
        self._edits_checked = -float("inf")
        self._rates: tuple[float | None, float | None] | None = None  # None = to be computed

    def episode_end(self, frames: dict[str, np.ndarray] | None, index: int = -1) -> None:
        """Count a finished episode (``frames`` as the actor logs them; None = no step ran); ``index``: its
        number in the actor's episode log (what edits name; -1 = not logged, never edited)."""
        if frames is None:
            return
        self.recent.append((index, {k: np.asarray(frames[k]) for k in (*LABEL_KEYS, keys.INTERVENTION)}))
        self.episodes += 1
        self._rates = None

    def _refresh_edits(self, now: float) -> None:
        if self.edits_dir is None or now - self._edits_checked < EDITS_POLL_S:
            return
        self._edits_checked = now
        try:
            if self._edits is None:
                self._edits = RunEdits(self.edits_dir)
                self._rates = None
            elif self._edits.refresh():
                self._rates = None
        except EditLogError as err:
            log.error("actor %d: live rates without the new edits: %s", self.actor_id, err)

    def rates(self) -> tuple[float | None, float | None]:
        """(success rate, intervention rate) over the last :data:`WINDOW` episodes that are not excluded,
        relabels applied; None before the first."""
        if self._rates is None:
            metas = []
            for index, frames in self.recent:
                edits = self._edits.get(self.actor_id, index) if self._edits is not None else None
                edited = edited_frames(frames, edits)
                if edited is not None:
                    metas.append(episode_meta(edited, self.control_hz, -1))
            steps = sum(m["steps"] for m in metas)
            success = float(np.mean([m["success"] for m in metas])) if metas else None
            interv = sum(m["intervention_steps"] for m in metas) / steps if steps else None
            self._rates = success, interv
        return self._rates

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
        ``intervention_rate`` (last 20 episodes as edited, :meth:`rates`; None before the first),
        ``steps_per_s``, ``version``, ``lag`` (publications behind the learner) and ``obs``.
        """
        now = time.monotonic()
        self.stamps.append(now)
        self.total_steps += 1
        rate = (len(self.stamps) - 1) / (self.stamps[-1] - self.stamps[0]) if len(self.stamps) > 1 else 0.0
        self._refresh_edits(now)
        success_rate, intervention_rate = self.rates()
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
            "success_rate": success_rate,
            "intervention_rate": intervention_rate,
            "steps_per_s": float(rate),
            "version": int(version),
            "lag": max(int(latest) - int(version), 0) if latest >= 0 else 0,
            "obs": obs,
        }
