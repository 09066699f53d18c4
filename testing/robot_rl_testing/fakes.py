"""Synthetic observations, statistics and chunk batches for tests and benchmarks (sim-like state dims)."""

from __future__ import annotations

import numpy as np
import torch

from robot_rl.data.normalize import FeatureStats, compute_stats
from robot_rl.keys import ACTION, ENV_STATE, STATE

SIM_OBS_SHAPES: dict[str, tuple[int, ...]] = {STATE: (22,), ENV_STATE: (7,)}
SIM_ACTION_DIM = 4


def fake_stats(
    obs_shapes: dict[str, tuple[int, ...]] = SIM_OBS_SHAPES, action_dim: int = SIM_ACTION_DIM, seed: int = 0
) -> dict[str, FeatureStats]:
    """Stats from random data: vector obs ~ N(1, 2^2), actions ~ U[-2, 3] (robot units)."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for key, shape in obs_shapes.items():
        if len(shape) == 3:
            arrays[key] = rng.integers(0, 256, size=(64, *shape), dtype=np.uint8)
        else:
            arrays[key] = (1.0 + 2.0 * rng.standard_normal((512, *shape))).astype(np.float32)
    arrays[ACTION] = rng.uniform(-2.0, 3.0, size=(512, action_dim)).astype(np.float32)
    return compute_stats(arrays)


def fake_obs(
    batch: int, obs_shapes: dict[str, tuple[int, ...]] = SIM_OBS_SHAPES, seed: int | None = None
) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    out = {}
    for key, shape in obs_shapes.items():
        if len(shape) == 3:
            out[key] = torch.randint(0, 256, (batch, *shape), dtype=torch.uint8, generator=g)
        else:
            out[key] = 1.0 + 2.0 * torch.randn(batch, *shape, generator=g)
    return out


def fake_batch(
    batch: int,
    horizon: int,
    obs_shapes: dict[str, tuple[int, ...]] = SIM_OBS_SHAPES,
    action_dim: int = SIM_ACTION_DIM,
    seed: int | None = None,
) -> dict:
    """A torch chunk batch (docs/algorithms.md §1 layout) with random content; the last chunk step of every
    fourth sample is invalid."""
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    valid = torch.ones(batch, horizon)
    valid[::4, -1] = 0.0
    return {
        "observations": fake_obs(batch, obs_shapes, seed),
        "next_observations": fake_obs(batch, obs_shapes, None if seed is None else seed + 1),
        "actions": -2.0 + 5.0 * torch.rand(batch, horizon, action_dim, generator=g),
        "rewards": torch.rand(batch, generator=g),
        "masks": (torch.rand(batch, generator=g) > 0.1).float(),
        "valid": valid,
        "critic_valid": valid[:, -1].clone(),
    }
