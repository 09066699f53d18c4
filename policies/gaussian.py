"""Tanh-squashed Gaussian actor for SAC (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
Applications"), as used by RLPD (Ball et al. 2023) and HIL-SERL (Luo et al. 2024); docs/algorithms.md §5.

The actor works on single-step actions (chunk h = 1) in the normalised action space [-1, 1], with the same
action normalisation as the flow policy (``stats['action'].affine(PolicyConfig.normalization)``, stored as
buffers ``action_offset``/``action_scale``), so the agent returns robot units exactly as the flow agents do.

Distribution: ``u = mu(s) + sigma(s) * eps`` with ``eps ~ N(0, I)`` and ``a = tanh(u)``;
``log pi(a|s) = sum_i [log N(u_i; mu_i, sigma_i) - log(1 - tanh(u_i)^2)]`` (SAC appendix C), the Jacobian
term computed stably as ``2 (log 2 - u - softplus(-2u))``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from robot_rl.algos.mlp import build_mlp
from robot_rl.data.normalize import FeatureStats

from .action_norm import ActionNormalization

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


class GaussianTanhPolicy(ActionNormalization, nn.Module):
    """pi(a|s) = c + r * tanh(N(mu(s), diag sigma(s)^2)) over d action dims, chunk h = 1, in normalised
    units, where [c - r, c + r] is the normalised action box (``policies/action_norm.py``): the squashed
    Gaussian spans the env's action box, as HIL-SERL/SERL rescale tanh to the action space, not just the
    demos' q01..q99 range.

    Args:
        encoder: observation encoder, (obs dict) -> (B, encoder.out_dim) float32; owned by the actor.
        action_dim: d.
        hidden_dims: MLP widths (``SACConfig.actor_hidden_dims``).
        stats: FeatureStats per key; ``stats['action']`` sets the action normalisation.
        normalization: ``quantile`` or ``mean_std`` (``PolicyConfig.normalization``, as the flow policy).
        action_low, action_high: the action box in robot units (d,) each (``PolicyConfig.action_low/high``);
            None = the data's min/max. Every dimension must have low < high.
        log_std_min, log_std_max: the learned state-dependent log-std is clamped to this range.

    Attributes (the FlowChunkPolicy surface other code relies on): ``horizon`` (= 1), ``action_dim``,
    ``encoder``, :meth:`normalize_actions`, :meth:`unnormalize_actions`, :meth:`encode`, :meth:`act`.
    """

    horizon = 1

    def __init__(
        self,
        encoder: nn.Module,
        action_dim: int,
        hidden_dims: Sequence[int],
        stats: dict[str, FeatureStats],
        normalization: str = "quantile",
        log_std_min: float = LOG_STD_MIN,
        log_std_max: float = LOG_STD_MAX,
        action_low: list[float] | None = None,
        action_high: list[float] | None = None,
    ):
        super().__init__()
        if not log_std_min < log_std_max:
            raise ValueError(f"log_std_min ({log_std_min}) must be < log_std_max ({log_std_max})")
        self.action_dim = int(action_dim)
        self.log_std_min, self.log_std_max = float(log_std_min), float(log_std_max)
        self.register_action_stats(stats, normalization, self.action_dim, action_low, action_high)
        half = (self.action_high_norm - self.action_low_norm) / 2
        if not (half > 0).all():
            raise ValueError("a tanh-Gaussian policy needs action_low < action_high in every dimension")
        self.register_buffer("squash_center", (self.action_high_norm + self.action_low_norm) / 2, False)
        self.register_buffer("squash_half", half, False)
        self.encoder = encoder
        self.net = build_mlp(int(encoder.out_dim), hidden_dims, 2 * self.action_dim)

    # --- distribution --------------------------------------------------------------------------------
    def encode(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Observation dict -> (B, F) features."""
        return self.encoder(obs)

    def dist_params(self, feat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """feat (B, F) -> (mean (B, d), log_std (B, d)) of the pre-tanh Gaussian; log_std clamped."""
        mean, log_std = self.net(feat).chunk(2, dim=-1)
        return mean, log_std.clamp(self.log_std_min, self.log_std_max)

    def sample_from_features(
        self, feat: torch.Tensor, noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample ``a = c + r * tanh(mu + sigma * eps)`` and its log-density (the tanh
        change of variables of SAC, Haarnoja et al. 2018 App. C, plus ``-sum log r`` for the rescaling).

        Args:
            feat: (B, F) float32 features.
            noise: optional eps (B, d) or (B, 1, d) standard normal; drawn when None.
            deterministic: use ``eps = 0``, i.e. ``a = tanh(mu)`` (evaluation).
        Returns:
            (actions (B, d) float32 normalised, inside the normalised action box; log_prob (B,) float32);
            both carry gradients.
        """
        mean, log_std = self.dist_params(feat)
        if deterministic:
            eps = torch.zeros_like(mean)
        elif noise is None:
            eps = torch.randn_like(mean)
        else:
            if noise.numel() != mean.numel():
                raise ValueError(
                    f"noise must be ({mean.shape[0]}, 1, {self.action_dim}), got {tuple(noise.shape)}"
                )
            eps = noise.reshape(mean.shape).to(mean.dtype)
        u = mean + log_std.exp() * eps
        log_prob = (-0.5 * eps**2 - log_std - _HALF_LOG_2PI).sum(-1)
        log_prob = log_prob - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(-1)
        log_prob = log_prob - torch.log(self.squash_half).sum()
        return self.squash_center + self.squash_half * torch.tanh(u), log_prob

    def forward(
        self, obs: dict[str, torch.Tensor], noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """obs -> (actions (B, 1, d) normalised, inside the action box, log_prob (B,)); see
        :meth:`sample_from_features`."""
        a, log_prob = self.sample_from_features(self.encode(obs), noise, deterministic)
        return a.unsqueeze(1), log_prob

    @torch.no_grad()
    def act(
        self, obs: dict[str, torch.Tensor], noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> torch.Tensor:
        """One single-step chunk per observation in robot units: (B, 1, d) float32."""
        return self.unnormalize_actions(self(obs, noise, deterministic)[0])
