"""FQL one-step policy mu_omega(s, z) on flattened action chunks (Park, Li & Levine 2025, "Flow
Q-Learning", docs/algorithms.md §4)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robot_rl.algos.mlp import build_mlp


class OneStepChunkPolicy(nn.Module):
    """mu_omega(feat(s), z): obs dict + noise z (B, h, d) -> chunk (B, h, d) normalised, unclipped.

    Owns its observation encoder (as the FQL reference gives each network its own encoder).
    """

    def __init__(self, encoder: nn.Module, action_dim: int, horizon: int, hidden_dims: Sequence[int]):
        super().__init__()
        self.encoder = encoder
        self.action_dim, self.horizon = int(action_dim), int(horizon)
        flat = self.horizon * self.action_dim
        self.net = build_mlp(int(encoder.out_dim) + flat, hidden_dims, flat)

    def forward(self, obs: dict[str, torch.Tensor], noise: torch.Tensor) -> torch.Tensor:
        feat = self.encoder(obs)
        b = feat.shape[0]
        if tuple(noise.shape) != (b, self.horizon, self.action_dim):
            raise ValueError(
                f"noise must be ({b}, {self.horizon}, {self.action_dim}), got {tuple(noise.shape)}"
            )
        out = self.net(torch.cat([feat, noise.reshape(b, -1)], dim=-1))
        return out.reshape(b, self.horizon, self.action_dim)
