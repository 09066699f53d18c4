"""Structural interfaces the algorithms rely on; ``robot_rl.policies`` implements them.

The core (``robot_rl.algos``) never imports ``robot_rl.policies`` at module level (docs/design.md §2); agents
receive policy, encoder and critic modules as constructor arguments and use only these methods.
"""

from __future__ import annotations

from typing import Protocol

import torch

Obs = dict[str, torch.Tensor]


class ObsEncoder(Protocol):
    """Observation dict (raw env units, batch B) -> features (B, out_dim) float32."""

    out_dim: int

    def __call__(self, obs: Obs) -> torch.Tensor: ...


class FlowPolicy(Protocol):
    """A flow-matching chunk policy (docs/algorithms.md §2) in normalised action space [-1, 1]."""

    horizon: int
    action_dim: int
    flow_steps: int

    def encode(self, obs: Obs) -> torch.Tensor: ...

    def normalize_actions(self, actions: torch.Tensor, obs: Obs | None = None) -> torch.Tensor: ...

    def unnormalize_actions(self, actions: torch.Tensor, obs: Obs | None = None) -> torch.Tensor: ...

    def clip_normalized(self, actions: torch.Tensor) -> torch.Tensor: ...

    def bc_loss(self, obs: Obs, actions_norm: torch.Tensor, valid: torch.Tensor) -> torch.Tensor: ...

    def sample(self, obs: Obs, num_samples: int = 1, noise: torch.Tensor | None = None) -> torch.Tensor: ...

    def sample_from_features(self, feat: torch.Tensor, noise: torch.Tensor) -> torch.Tensor: ...

    def velocity_from_features(
        self, feat: torch.Tensor, x: torch.Tensor, t: torch.Tensor
    ) -> torch.Tensor: ...

    def parameters(self): ...


class OneStepPolicy(Protocol):
    """FQL one-step policy mu_omega(s, z): obs + noise (B, h, d) -> chunk (B, h, d), normalised, unclipped."""

    def __call__(self, obs: Obs, noise: torch.Tensor) -> torch.Tensor: ...

    def parameters(self): ...
