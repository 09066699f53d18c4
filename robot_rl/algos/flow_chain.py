"""Stochastic denoising chains of a flow policy and their exact log-probabilities, for π_RL's PPO
(docs/algorithms.md §8; Chen et al. 2025, "πRL: Online RL Fine-tuning for Flow-based Vision-Language-Action
Models", arXiv 2510.25889; RLinf's ``openpi_action_model.py``, ``sample_mean_var_val``).

**Time conventions.** This stack integrates the flow from noise at τ = 0 to data at τ = 1 with
``x_τ = (1-τ)·x_0 + τ·A`` and velocity ``v = A - x_0`` (FlowChunkPolicy, §2). openpi and π_RL write
``x_t = t·noise + (1-t)·A`` with t = 1 noise, so their velocity is ``v_pi = noise - A``. The mapping used
here is ``t = 1 - τ`` and ``v_pi = -v``. Our Euler step k (k = 0..K-1) at ``τ_k = k/K`` is their step at
``t_k = 1 - k/K``, δ = 1/K, and our chain ``x_0 (noise) -> x_K (action)`` is theirs read in the same order.
The formulas below are §8's, written in openpi's variables from that mapping:

- ``x̂_0 = x - t·v_pi`` (the predicted action) and ``x̂_1 = x + (1-t)·v_pi`` (the predicted noise);
- ODE mean ``(1-(t-δ))·x̂_0 + (t-δ)·x̂_1`` (algebraically the Euler step ``x + δ·v`` of FlowChunkPolicy);
- **Flow-Noise**: every step is Gaussian around the ODE mean with a learned std from a noise head
  bounded to ``[std_min, std_max]`` (0.08, 0.16); the chain's log-probability is the exact density of
  the discretised Markov chain ``log N(x_0; 0, I) + Σ_k log N(x_{k+1}; μ_k, σ_k²)`` per action element;
  ``reduce="mean"`` divides it by K + 1 as RLinf does (``joint_logprob``: the initial-noise term and
  the K step terms averaged), ``"sum"`` keeps the plain sum;
- **Flow-SDE**: ``σ_t = a·√(t/(1-t))`` (a = ``noise_level`` = 0.5), mean
  ``(1-(t-δ))·x̂_0 + (t-δ - σ_t²·δ/(2t))·x̂_1``, std ``σ_t·√δ``, at one uniformly chosen step; the other
  steps follow the ODE, and the log-probability is that step's Gaussian. At t = 1 (our first step)
  ``1-t = 0``; as RLinf does, the denominator is then ``1 - t_1 = δ``.

What follows RLinf's code: the mean/std formulas of both methods, the t = 1 denominator, the std bounds
[0.08, 0.16], the per-element Gaussian log-density, averaging the K + 1 terms of the Flow-Noise chain,
the deterministic (ODE) chain for evaluation. Our reading / choices: the noise head's inputs
``(features, x, τ)`` (RLinf feeds the action expert's hidden states) and its sigmoid bound; the
Flow-SDE step drawn per chain (RLinf draws one index per rollout batch); log-probabilities of the
unclipped chain end ``x_K`` (the clip to the action box is part of the environment).

Interface a policy needs (:class:`robot_rl.algos.protocols.FlowPolicy` plus): ``horizon``, ``action_dim``,
``flow_steps`` (K), ``encode(obs)`` -> features of any shape with batch first (the flow policy's (B, F), the
VLA's (B, L, W + 1) prefix tokens), ``velocity_from_features(feat, x (B, h*d), τ (B, 1)) -> (B, h*d)`` in this
stack's convention, ``pool_features(feat) -> (B, F)`` (the vector the noise head reads) and its width
``feature_dim``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import get_args

import torch
from torch import nn

from robot_rl.algos.mlp import build_mlp
from robot_rl.config import ChainLogprob, PPOMethod

METHODS: tuple[str, ...] = get_args(PPOMethod)
REDUCTIONS: tuple[str, ...] = get_args(ChainLogprob)
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def check_method(method: str, key: str = "ppo.method") -> str:
    """Return ``method`` or raise ValueError naming ``key`` and the known methods."""
    if method not in METHODS:
        raise ValueError(f"{key}={method!r}: expected one of {', '.join(METHODS)}")
    return method


def feature_dim(policy) -> int:
    """The width F of ``policy.pool_features``: ``policy.feature_dim``.

    Raises:
        TypeError: the policy has no ``feature_dim`` or no ``pool_features``.
    """
    dim = getattr(policy, "feature_dim", None)
    if dim is None or not callable(getattr(policy, "pool_features", None)):
        name = type(policy).__name__
        raise TypeError(f"{name} lacks feature_dim or pool_features (flow_chain's interface)")
    return int(dim)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Element-wise ``log N(x; mean, std²)`` (all broadcastable, float32); std must be > 0."""
    return -torch.log(std) - _LOG_SQRT_2PI - 0.5 * ((x - mean) / std) ** 2


class NoiseHead(nn.Module):
    """Flow-Noise's learned std: MLP ``(features (B, F), x (B, D), τ (B, 1)) -> std (B, D)`` bounded to
    ``[std_min, std_max]`` by ``std_min + (std_max - std_min)·sigmoid(·)`` (§8: [0.08, 0.16]).

    Raises:
        ValueError: not ``0 < std_min <= std_max``.
    """

    def __init__(
        self,
        in_features: int,
        flat_dim: int,
        std_min: float = 0.08,
        std_max: float = 0.16,
        hidden_dims: tuple[int, ...] = (128, 64),
    ):
        super().__init__()
        if not 0 < std_min <= std_max:
            raise ValueError(f"noise std bounds must satisfy 0 < min <= max, got [{std_min}, {std_max}]")
        self.std_min, self.std_max = float(std_min), float(std_max)
        self.net = build_mlp(in_features + flat_dim + 1, hidden_dims, flat_dim)

    def forward(self, feat: torch.Tensor, x: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        z = self.net(torch.cat([feat, x, tau], dim=-1))
        return self.std_min + (self.std_max - self.std_min) * torch.sigmoid(z)


def sde_sigma(t: torch.Tensor, delta: float, noise_level: float) -> torch.Tensor:
    """Flow-SDE ``σ_t = a·√(t/(1-t))`` in openpi time t (1 = noise); at t = 1 the denominator is δ (RLinf)."""
    denom = torch.where(t >= 1.0, torch.full_like(t, delta), 1.0 - t)
    return noise_level * torch.sqrt(t / denom)


def step_mean_std(
    method: str,
    x: torch.Tensor,
    v: torch.Tensor,
    tau: torch.Tensor,
    delta: float,
    stochastic: torch.Tensor,
    noise_std: torch.Tensor | None = None,
    noise_level: float = 0.5,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of one denoising step ``x_τ -> x_{τ+δ}`` (§8 in openpi's time, see the module docstring).

    Args:
        x: (B, D) current chain state; v: (B, D) velocity in this stack's convention (``A - x_0``).
        tau: (B, 1) our time τ = k/K of the step; delta: δ = 1/K.
        stochastic: (B, 1) bool: rows where this step is stochastic; the others get the ODE mean, std 0.
        noise_std: (B, D) Flow-Noise's learned std (required for ``flow_noise``).
        noise_level: Flow-SDE's a.
    Returns: (mean (B, D), std (B, D)); std is 0 on deterministic rows.
    """
    t = 1.0 - tau
    v_pi = -v
    x0_hat = x - t * v_pi
    x1_hat = x + (1.0 - t) * v_pi
    w0 = 1.0 - (t - delta)
    w1_ode = t - delta
    if method == "flow_noise":
        if noise_std is None:
            raise ValueError("flow_noise needs the noise head's std")
        w1, std = w1_ode, noise_std
    else:
        sigma = sde_sigma(t, delta, noise_level)
        w1 = t - delta - sigma**2 * delta / (2 * t)
        std = (sigma * math.sqrt(delta)).expand_as(x)
    w1 = torch.where(stochastic, w1, w1_ode)
    mean = w0 * x0_hat + w1 * x1_hat
    return mean, torch.where(stochastic, std, torch.zeros_like(std))


@dataclass
class ChainSample:
    """A sampled denoising chain.

    Attributes:
        chain: (B, K+1, D) float32: ``x_0`` (noise) ... ``x_K`` (the normalised action chunk, unclipped).
        step: (B,) int64: Flow-SDE's stochastic step; -1 for Flow-Noise (every step) and deterministic chains.
        log_prob: (B, D) float32 per action element (0 for a deterministic chain).
    """

    chain: torch.Tensor
    step: torch.Tensor
    log_prob: torch.Tensor


class FlowChain:
    """Samples chains of a flow policy and scores recorded ones (π_RL, module docstring).

    Args:
        policy: see the module docstring's interface.
        method: ``flow_noise`` or ``flow_sde``.
        noise_head: a :class:`NoiseHead` (``flow_noise`` only).
        noise_level: Flow-SDE's a (§8: 0.5).
        reduce: ``mean`` (RLinf) or ``sum`` over the K + 1 terms of a Flow-Noise chain.

    Raises:
        ValueError: unknown method or reduction (names ``ppo.method`` / ``ppo.chain_logprob``), a
            Flow-Noise chain without a noise head.
    """

    def __init__(
        self,
        policy,
        method: str,
        noise_head: NoiseHead | None = None,
        noise_level: float = 0.5,
        reduce: str = "mean",
    ):
        self.policy, self.method = policy, check_method(method)
        if reduce not in REDUCTIONS:
            raise ValueError(f"ppo.chain_logprob={reduce!r}: expected one of {', '.join(REDUCTIONS)}")
        if method == "flow_noise" and noise_head is None:
            raise ValueError("ppo.method='flow_noise' needs a NoiseHead")
        self.noise_head, self.noise_level, self.reduce = noise_head, float(noise_level), reduce
        self.steps = int(policy.flow_steps)

    def _mean_std(self, feat, pooled, x, k: torch.Tensor, stochastic: torch.Tensor):
        """feat: the policy's features; pooled: (B, F) ``pool_features(feat)``; k: (B, 1) float step index."""
        tau = k / self.steps
        v = self.policy.velocity_from_features(feat, x, tau)
        std = self.noise_head(pooled, x, tau) if self.method == "flow_noise" else None
        return step_mean_std(self.method, x, v, tau, 1.0 / self.steps, stochastic, std, self.noise_level)

    def sample(
        self, feat: torch.Tensor, noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> ChainSample:
        """Sample one chain per row of ``feat`` (the policy's features, batch B); ``noise`` optional (B, D)
        x_0. ``deterministic``: every step follows the ODE (std 0), so ``x_K`` is the policy's Euler sample
        before the clip."""
        b, d = feat.shape[0], self.policy.horizon * self.policy.action_dim
        pooled = self.policy.pool_features(feat)
        x = torch.randn(b, d, device=feat.device) if noise is None else noise
        if deterministic:
            step = torch.full((b,), -1, dtype=torch.long, device=feat.device)
        elif self.method == "flow_sde":
            step = torch.randint(0, self.steps, (b,), device=feat.device)
        else:
            step = torch.full((b,), -1, dtype=torch.long, device=feat.device)
        chain = [x]
        for k in range(self.steps):
            kk = torch.full((b, 1), float(k), device=feat.device)
            if deterministic:
                stochastic = torch.zeros(b, 1, dtype=torch.bool, device=feat.device)
            elif self.method == "flow_noise":
                stochastic = torch.ones(b, 1, dtype=torch.bool, device=feat.device)
            else:
                stochastic = (step == k).unsqueeze(-1)
            mean, std = self._mean_std(feat, pooled, x, kk, stochastic)
            x = mean + std * torch.randn_like(mean)
            chain.append(x)
        chain_t = torch.stack(chain, dim=1)
        if deterministic:
            return ChainSample(chain_t, step, torch.zeros(b, d, device=feat.device))
        log_prob, _ = self.log_prob(feat, chain_t, step)
        return ChainSample(chain_t, step, log_prob)

    def log_prob(
        self, feat: torch.Tensor, chain: torch.Tensor, step: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of recorded chains under the current networks (differentiable).

        Args:
            feat: the policy's features (batch B); chain: (B, K+1, D); step: (B,) as in :class:`ChainSample`.
        Returns:
            (log_prob (B, D) per action element, entropy (B,)): Flow-Noise's mean per-element Gaussian
            entropy over the K + 1 terms (reduced as the log-probability), 0 for Flow-SDE (RLinf has no
            entropy term for it).
        """
        b, d = chain.shape[0], chain.shape[-1]
        pooled = self.policy.pool_features(feat)
        if self.method == "flow_sde":
            rows = torch.arange(b, device=chain.device)
            x, x_next = chain[rows, step], chain[rows, step + 1]
            stochastic = torch.ones(b, 1, dtype=torch.bool, device=chain.device)
            mean, std = self._mean_std(feat, pooled, x, step.unsqueeze(-1).to(chain.dtype), stochastic)
            return gaussian_log_prob(x_next, mean, std), torch.zeros(b, device=chain.device)
        k = self.steps
        flat_feat, flat_pooled = feat.repeat_interleave(k, 0), pooled.repeat_interleave(k, 0)
        x = chain[:, :-1].reshape(b * k, d)
        kk = torch.arange(k, device=chain.device, dtype=chain.dtype).repeat(b).unsqueeze(-1)
        stochastic = torch.ones(b * k, 1, dtype=torch.bool, device=chain.device)
        mean, std = self._mean_std(flat_feat, flat_pooled, x, kk, stochastic)
        steps = gaussian_log_prob(chain[:, 1:].reshape(b * k, d), mean, std).reshape(b, k, d)
        initial = gaussian_log_prob(chain[:, 0], torch.zeros_like(chain[:, 0]), torch.ones_like(chain[:, 0]))
        total = initial + steps.sum(dim=1)
        # Gaussian entropy 0.5*log(2*pi*e*std^2) per element; the initial N(0, I) term has std 1
        ent_steps = (torch.log(std) + 0.5 + _LOG_SQRT_2PI).reshape(b, k, d).sum(dim=1)
        entropy = (0.5 + _LOG_SQRT_2PI) + ent_steps
        if self.reduce == "mean":
            total, entropy = total / (k + 1), entropy / (k + 1)
        return total, entropy.mean(dim=-1)
