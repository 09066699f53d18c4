"""Flow-matching action-chunk policy (docs/algorithms.md §2; flow BC as in Park, Li & Levine 2025 "Flow
Q-Learning" and Li, Zhou & Levine 2025 "Q-chunking"). Convention: t=0 noise, t=1 data.

Velocity MLP v_theta(feat(s), x_t, t) over the flattened chunk (h*d). Loss
``E ||v_theta(s, x_t, t) - (A - x_0)||^2`` with ``x_t = (1-t) x_0 + t A``, x_0 ~ N(0, I), t ~ U[0, 1],
masked per chunk step by ``valid``. Sampling: K Euler steps ``x <- x + v(s, x, k/K) / K``, clipped to the
normalised action box (``policies/action_norm.py``), not to [-1, 1].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import torch
from torch import nn

from robot_rl.algos.base import check_finite
from robot_rl.algos.mlp import build_mlp
from robot_rl.config import Normalization, PolicyConfig
from robot_rl.data.normalize import FeatureStats

from .action_norm import ActionNormalization
from .encoders import ObservationEncoder

NORMALIZATIONS: tuple[str, ...] = get_args(Normalization)


class FlowChunkPolicy(ActionNormalization, nn.Module):
    """Args:
    cfg: PolicyConfig (horizon h, flow_steps K, hidden_dims, image_features, normalization).
    obs_shapes: observation key -> per-sample shape.
    action_dim: d.
    stats: FeatureStats per key; ``stats['action']`` sets the action normalisation (buffers).
    encoder: optional observation encoder; default an :class:`ObservationEncoder`.
    """

    def __init__(
        self,
        cfg: PolicyConfig,
        obs_shapes: dict[str, tuple[int, ...]],
        action_dim: int,
        stats: dict[str, FeatureStats],
        encoder: nn.Module | None = None,
    ):
        super().__init__()
        if cfg.normalization not in NORMALIZATIONS:
            raise ValueError(f"unknown normalization {cfg.normalization!r}; expected one of {NORMALIZATIONS}")
        if cfg.horizon < 1 or cfg.flow_steps < 1:
            raise ValueError(f"horizon and flow_steps must be >= 1, got {cfg.horizon}, {cfg.flow_steps}")
        self.cfg = cfg
        self.horizon, self.action_dim, self.flow_steps = (
            int(cfg.horizon),
            int(action_dim),
            int(cfg.flow_steps),
        )
        self.register_policy_action_stats(cfg, stats, action_dim)
        self.encoder = (
            encoder if encoder is not None else ObservationEncoder(obs_shapes, stats, cfg.image_features)
        )
        flat = self.horizon * self.action_dim
        self.velocity = build_mlp(int(self.encoder.out_dim) + flat + 1, cfg.hidden_dims, flat)

    # --- network -------------------------------------------------------------------------------------
    def encode(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Observation dict -> (B, F) features."""
        return self.encoder(obs)

    @property
    def feature_dim(self) -> int:
        """F: the width of :meth:`encode`'s features (and of :meth:`pool_features`)."""
        return int(self.encoder.out_dim)

    def pool_features(self, feat: torch.Tensor) -> torch.Tensor:
        """:meth:`encode`'s features -> one (B, F) float32 vector per observation, what heads on the
        policy's features read (π_RL's noise and value heads): here the features themselves."""
        return feat

    def velocity_from_features(self, feat: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """feat (B, F), x (B, h*d), t (B, 1) -> velocity (B, h*d)."""
        return self.velocity(torch.cat([feat, x, t], dim=-1))

    def bc_loss(
        self,
        obs: dict[str, torch.Tensor],
        actions_norm: torch.Tensor,
        valid: torch.Tensor | None = None,
        feat: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Masked flow-matching loss (docs/algorithms.md §2).

        Args:
            actions_norm: (B, h, d) normalised target chunk A.
            valid: (B, h) float/bool; steps with 0 are excluded. The squared error is averaged over valid
                elements (sum / (n_valid_steps * d)).
            feat: optional precomputed features (B, F).
        Returns: scalar float32.
        """
        b = actions_norm.shape[0]
        if actions_norm.shape[1:] != (self.horizon, self.action_dim):
            raise ValueError(
                f"actions must be (B, {self.horizon}, {self.action_dim}), got {tuple(actions_norm.shape)}"
            )
        if feat is None:
            feat = self.encode(obs)
        a = actions_norm.reshape(b, -1)
        x0 = torch.randn_like(a)
        t = torch.rand(b, 1, device=a.device)
        xt = (1 - t) * x0 + t * a
        err = (self.velocity_from_features(feat, xt, t) - (a - x0)) ** 2
        err = err.reshape(b, self.horizon, self.action_dim)
        if valid is None:
            return err.mean()
        w = valid.to(err.dtype).unsqueeze(-1)
        return (err * w).sum() / (w.sum() * self.action_dim).clamp_min(1.0)

    @torch.no_grad()
    def sample_from_features(
        self, feat: torch.Tensor, noise: torch.Tensor, steps: int | None = None
    ) -> torch.Tensor:
        """K-step Euler ODE from noise (t=0) to data (t=1). feat (B, F), noise (B, h*d) -> (B, h*d) clipped
        to the normalised action box. ``steps``: K for this call (QC's ``offline.target_flow_steps``);
        None or 0: ``flow_steps``."""
        x = noise
        k_steps = int(steps) if steps else self.flow_steps
        velocity = self.velocity_field(feat)
        for k in range(k_steps):
            t = torch.full((x.shape[0], 1), k / k_steps, device=x.device, dtype=x.dtype)
            x = x + velocity(x, t) / k_steps
        return self.clip_normalized(x)

    def velocity_field(self, feat: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """``v(x (B, h*d), t (B, 1))`` with the features ``feat`` fixed, for the K sampling steps: here
        :meth:`velocity_from_features`; a policy with per-chunk work to reuse overrides it (the VLA caches
        its cross-attention keys and values)."""
        return lambda x, t: self.velocity_from_features(feat, x, t)

    @torch.no_grad()
    def sample(
        self, obs: dict[str, torch.Tensor], num_samples: int = 1, noise: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Sample chunks: -> (B, N, h, d) normalised, clipped to the normalised action box.

        Args:
            noise: optional (B, N, h, d) initial noise x_0 (deterministic sampling).
        Raises:
            ValueError: bad observation (see the encoder), bad noise shape, or non-finite output.
        """
        feat = self.encode(obs)
        b, n = feat.shape[0], num_samples
        if noise is None:
            noise = torch.randn(b, n, self.horizon, self.action_dim, device=feat.device)
        expected = (b, n, self.horizon, self.action_dim)
        if tuple(noise.shape) != expected:
            raise ValueError(f"noise must have shape {expected}, got {tuple(noise.shape)}")
        x = self.sample_from_features(feat.repeat_interleave(n, 0), noise.reshape(b * n, -1))
        return check_finite(x.reshape(expected), "flow policy sample")

    @torch.no_grad()
    def act(self, obs: dict[str, torch.Tensor], noise: torch.Tensor | None = None) -> torch.Tensor:
        """One chunk per observation in robot units: (B, h, d)."""
        return self.unnormalize_actions(self.sample(obs, 1, noise)[:, 0], obs)
