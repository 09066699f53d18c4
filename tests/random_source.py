"""A user's own demonstrator stand-in for the bring-your-own-env tests."""

import numpy as np


class RandomSource:
    """Uniform random actions in ``[low, high]``, seeded by each episode's env seed; one (N, 1, D) float32
    chunk per query."""

    def __init__(self, low: np.ndarray, high: np.ndarray) -> None:
        self.low, self.high, self.rng = low, high, np.random.default_rng(0)

    def reset(self, env_id: int, env_seed: int) -> None:
        self.rng = np.random.default_rng(env_seed)

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        return self.rng.uniform(self.low, self.high, (len(env_ids), 1, len(self.low))).astype(np.float32)
