"""Chunk sources for robot_rl.rollout: the scripted expert and a trained agent behind the safety filter."""

from __future__ import annotations

import numpy as np
import torch


class ExpertSource:
    """One scripted expert per sub-env; each proposes a single action, i.e. chunks of h = 1.

    An episode's noise is seeded from ``(seed, env_seed)``, so a demo is a function of the collection seed
    and its env seed alone: the same with 1 or N workers, and after a killed collection resumes.
    """

    def __init__(self, num_envs: int, noise: float, seed: int):
        from robot_rl.sim.expert import PickCubeExpert

        self.seed = seed
        self.experts = [PickCubeExpert(noise=noise, seed=seed) for _ in range(num_envs)]

    def reset(self, env_id: int, env_seed: int) -> None:
        self.experts[env_id].reset(seed=[self.seed, env_seed])

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        acts = [self.experts[i].act({k: v[j] for k, v in obs.items()}) for j, i in enumerate(env_ids)]
        return np.stack(acts)[:, None, :].astype(np.float32)


class AgentSource:
    """Queries ``agent.act`` (B, h, d) and applies the safety filter: NaN/inf chunks are rejected with a
    ValueError, finite actions are clipped to the env's action box [low, high].

    ``execution='open_loop'`` returns whole chunks (the rollout executes all h actions before the next
    query); ``'temporal_ensemble'`` queries every step and returns the ACT-weighted action as a chunk of 1.
    """

    def __init__(
        self,
        agent,
        obs_keys: list[str],
        low: np.ndarray,
        high: np.ndarray,
        device: str = "cpu",
        execution: str = "open_loop",
        decay: float = 0.1,
        num_envs: int = 1,
    ):
        from robot_rl.policies.executor import ChunkExecutor

        self.agent, self.obs_keys, self.low, self.high, self.device = agent, obs_keys, low, high, device
        horizon = agent.policy.horizon
        self.executors = [ChunkExecutor(horizon, execution, decay) for _ in range(num_envs)]
        self.ensemble = execution == "temporal_ensemble"

    def reset(self, env_id: int, env_seed: int) -> None:
        self.executors[env_id].reset()

    @torch.no_grad()
    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        batch = {k: torch.as_tensor(np.asarray(obs[k])).to(self.device) for k in self.obs_keys}
        chunk = self.agent.act(batch).cpu().numpy()
        if not np.isfinite(chunk).all():
            raise ValueError("policy produced NaN/inf actions; stopping instead of sending them to the robot")
        chunk = np.clip(chunk, self.low, self.high)
        if not self.ensemble:
            return chunk
        steps = []
        for row, env_id in zip(chunk, env_ids, strict=True):
            self.executors[env_id].push(row)
            steps.append(self.executors[env_id].pop())
        return np.stack(steps)[:, None, :]
