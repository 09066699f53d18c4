"""The scripted expert as a chunk source for :class:`robot_rl.rollout.Rollout` (it lives in the sim package
because it builds the built-in tasks' experts; the core's trained-agent sources are in
:mod:`robot_rl.sources`)."""

from __future__ import annotations

import numpy as np

from robot_rl.sim.tasks import make_expert


class ExpertSource:
    """One scripted expert per sub-env; each proposes a single action, i.e. chunks of h = 1.

    An episode's noise is seeded from ``(seed, env_seed)``, so a demo is a function of the collection seed
    and its env seed alone: the same with 1 or N workers, and after a killed collection resumes.
    ``task_id`` picks the built-in task's expert (:func:`robot_rl.sim.tasks.make_expert`; ValueError for
    an id outside the suite). ``__call__`` maps observations (B, ...) per key to float32 chunks (B, 1, d).
    """

    def __init__(self, num_envs: int, noise: float, seed: int, task_id: str = "robot_rl/PandaPickCube-v0"):
        self.seed = seed
        self.experts = [make_expert(task_id, noise=noise, seed=seed) for _ in range(num_envs)]

    def reset(self, env_id: int, env_seed: int) -> None:
        self.experts[env_id].reset(seed=[self.seed, env_seed])

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        acts = [self.experts[i].act({k: v[j] for k, v in obs.items()}) for j, i in enumerate(env_ids)]
        return np.stack(acts)[:, None, :].astype(np.float32)
