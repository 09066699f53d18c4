"""π_RL: PPO for flow policies over action chunks (docs/algorithms.md §8; Chen et al. 2025, "πRL: Online RL
Fine-tuning for Flow-based Vision-Language-Action Models", arXiv 2510.25889; code: RLinf).

- The chunk is one PPO action. Its likelihood is the denoising chain's (:mod:`robot_rl.algos.flow_chain`:
  Flow-Noise or Flow-SDE), and the **ratio is taken per action element** (h·d of them, as RLinf's
  per-element log-probs), ``r = exp(log π_θ - log π_old)``, with the clipped surrogate
  ``-min(r·Â, clip(r, 1-ε, 1+ε)·Â)`` averaged over the elements of executed chunk steps (steps past an
  episode's end are masked out).
- **GAE over chunks** (:func:`chunk_gae`): a chunk's reward is the undiscounted sum of its h step rewards
  (§8) and the discount γ is applied **once per chunk** (RLinf's env step is one chunk), λ likewise.
  A terminated episode bootstraps nothing; a truncated one (time limit) bootstraps ``V`` of the kept
  final observation; neither passes advantages across the episode boundary.
- **Value head** (:class:`ValueHead`): a separate MLP on the policy's pooled observation features
  (``pool_features``: the flow policy's encoder output; the VLA's state token beside the mean of its other
  prefix tokens), detached (RLinf's
  ``detach_critic_input``), so value regression never moves the BC-trained policy; trained by its own Adam
  on ``0.5·(V - R)²`` with R the GAE return.
- **Entropy bonus** ``entropy_coef`` (§8: 0.005) on Flow-Noise's Gaussian entropy; Flow-SDE has none.
- Advantages are normalised to zero mean and unit std over the whole rollout (our choice; RLinf has it
  as an option), and the policy's gradient norm is clipped to ``max_grad_norm``.

What follows RLinf's code: per-element ratios, clip 0.2, chunk-level GAE with the chunk reward summed over
its steps, a value head on detached features, the entropy bonus for Flow-Noise. Our reading: γ and λ per
chunk rather than per step, the value MLP on pooled observation features (RLinf's sits on the action
expert's or the VLM's hidden states), advantage normalisation over the rollout, masking of unexecuted
chunk steps.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from robot_rl.algos.base import Agent, check_finite
from robot_rl.algos.flow_chain import FlowChain, NoiseHead, check_method, feature_dim
from robot_rl.algos.mlp import build_mlp
from robot_rl.algos.protocols import Obs


def chunk_gae(
    rewards: np.ndarray,
    values: np.ndarray,
    next_values: np.ndarray,
    terminated: np.ndarray,
    done: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation over chunks (Schulman et al. 2016), one row per chunk.

    Args:
        rewards: (T, N) float: each chunk's summed step rewards.
        values: (T, N) float: V(s_c) at the chunk's first observation.
        next_values: (T, N) float: V of the observation after the chunk: the kept final observation when
            the episode ended in the chunk, else the next chunk's first observation.
        terminated: (T, N) bool: the episode terminated in the chunk (no bootstrap).
        done: (T, N) bool: the episode ended in the chunk (terminated or truncated; no GAE across it).
        gamma, lam: per-chunk discount and GAE λ.
    Returns:
        (advantages (T, N), returns = advantages + values (T, N)), float32.
    Raises:
        ValueError: non-finite rewards or values (names the chunk and env), or mismatched shapes.
    """
    rewards, values, next_values = (np.asarray(a, dtype=np.float64) for a in (rewards, values, next_values))
    terminated, done = np.asarray(terminated, bool), np.asarray(done, bool) | np.asarray(terminated, bool)
    shapes = {a.shape for a in (rewards, values, next_values, terminated, done)}
    if len(shapes) != 1 or rewards.ndim != 2:
        raise ValueError(f"chunk_gae needs (T, N) arrays of one shape, got {sorted(shapes)}")
    for name, arr in (("rewards", rewards), ("values", values), ("next_values", next_values)):
        bad = ~np.isfinite(arr)
        if bad.any():
            c, i = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(f"PPO {name} contain NaN or inf (chunk {c}, env {i}): {arr[c, i]}")
    adv = np.zeros_like(rewards)
    last = np.zeros(rewards.shape[1])
    for c in range(rewards.shape[0] - 1, -1, -1):
        delta = rewards[c] + gamma * (~terminated[c]) * next_values[c] - values[c]
        last = delta + gamma * lam * (~done[c]) * last
        adv[c] = last
    return adv.astype(np.float32), (adv + values).astype(np.float32)


def clipped_surrogate(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    valid: torch.Tensor,
    horizon: int,
    clip: float,
) -> dict[str, torch.Tensor]:
    """PPO's clipped surrogate with the ratio per action element (Schulman et al. 2017; π_RL §8).

    Args:
        log_prob, old_log_prob: (B, h*d) per-element log-probabilities now and at rollout.
        advantages: (B,) one per chunk, shared by its elements.
        valid: (B, h) executed chunk steps; elements of other steps are left out of every mean.
        horizon: h; clip: ε.
    Returns: scalars ``loss`` (clipped, to minimise), ``unclipped`` (``-mean(r·Â)``), ``approx_kl`` (mean of
        ``(r - 1) - log r``, Schulman's k3 estimator), ``clip_frac`` (share of elements with ``|r - 1| > ε``),
        ``ratio_mean``; and ``ratio`` (B, h, d).
    """
    b = log_prob.shape[0]
    log_ratio = (log_prob - old_log_prob).reshape(b, horizon, -1)
    ratio = torch.exp(log_ratio)
    a = advantages.reshape(b, 1, 1)
    surrogate = torch.minimum(ratio * a, torch.clamp(ratio, 1 - clip, 1 + clip) * a)
    mask = valid.to(ratio.dtype).unsqueeze(-1).expand_as(ratio)
    n = mask.sum().clamp_min(1.0)

    def mean(x: torch.Tensor) -> torch.Tensor:
        return (x * mask).sum() / n

    with torch.no_grad():
        stats = {
            "approx_kl": mean((ratio - 1) - log_ratio),
            "clip_frac": mean(((ratio - 1).abs() > clip).to(ratio.dtype)),
            "ratio_mean": mean(ratio),
        }
    return {"loss": -mean(surrogate), "unclipped": -mean(ratio * a), "ratio": ratio, **stats}


class ValueHead(nn.Module):
    """V(s): MLP on the policy's observation features (B, F) -> (B,) float32."""

    def __init__(self, in_features: int, hidden_dims: list[int]):
        super().__init__()
        self.net = build_mlp(in_features, hidden_dims, 1)

    def forward(self, feat: torch.Tensor) -> torch.Tensor:
        return self.net(feat).squeeze(-1)


class FlowPPOAgent(Agent):
    """PPO on a flow policy's denoising chain (π_RL; module docstring).

    Args:
        policy: a flow policy with the interface of :mod:`robot_rl.algos.flow_chain` (FlowChunkPolicy or
            the VLA policy).
        cfg: ``PPOConfig`` (method, lr, value_lr, clip, entropy_coef, noise_std_min/max, sde_noise_level,
            chain_logprob, value_hidden_dims, max_grad_norm).

    Raises:
        ValueError: ``cfg.method`` is not ``flow_noise`` / ``flow_sde`` (names ``ppo.method``).
    """

    method = "ppo"

    def __init__(self, policy, cfg):
        self.cfg = cfg
        check_method(cfg.method)
        self.policy = policy
        feat = feature_dim(policy)
        flat = policy.horizon * policy.action_dim
        device = next(policy.parameters()).device
        self.noise_head = (
            NoiseHead(feat, flat, cfg.noise_std_min, cfg.noise_std_max).to(device)
            if cfg.method == "flow_noise"
            else None
        )
        self.value = ValueHead(feat, list(cfg.value_hidden_dims)).to(device)
        self.chain = FlowChain(policy, cfg.method, self.noise_head, cfg.sde_noise_level, cfg.chain_logprob)
        actor = list(policy.parameters()) + (list(self.noise_head.parameters()) if self.noise_head else [])
        self.optimizers = {
            "policy": torch.optim.Adam(actor, lr=cfg.lr),
            "value": torch.optim.Adam(self.value.parameters(), lr=cfg.value_lr),
        }

    def modules(self) -> dict[str, nn.Module]:
        out = {"policy": self.policy, "value": self.value}
        if self.noise_head is not None:
            out["noise_head"] = self.noise_head
        return out

    @torch.no_grad()
    def act(self, obs: Obs, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Evaluation: the deterministic (ODE) chunk from random x_0, as the BC policy acts (RLinf's eval
        mode): (B, h, d) robot units. ``noise`` optional (B, 1, h, d)."""
        chunk = self.policy.sample(obs, num_samples=1, noise=noise)[:, 0]
        return check_finite(self.policy.unnormalize_actions(chunk, obs))

    @torch.no_grad()
    def explore(self, obs: Obs) -> dict[str, torch.Tensor]:
        """Rollout: sample one stochastic chain per observation.

        Returns: ``actions`` (B, h, d) robot units (the chain end clipped to the normalised box, then
        unnormalised), ``chain`` (B, K+1, h*d), ``step`` (B,), ``log_prob`` (B, h*d), ``value`` (B,).
        """
        feat = self.policy.encode(obs)
        sample = self.chain.sample(feat)
        b = feat.shape[0]
        end = self.policy.clip_normalized(sample.chain[:, -1]).reshape(b, self.policy.horizon, -1)
        actions = check_finite(self.policy.unnormalize_actions(end, obs), "PPO rollout chunk")
        return {
            "actions": actions,
            "chain": sample.chain,
            "step": sample.step,
            "log_prob": sample.log_prob,
            "value": self.value(self.policy.pool_features(feat)),
        }

    @torch.no_grad()
    def values(self, obs: Obs) -> torch.Tensor:
        """V(s) (B,) float32."""
        return self.value(self.policy.pool_features(self.policy.encode(obs)))

    def update(self, batch: dict) -> dict[str, float]:
        """One PPO step on a minibatch of chunks.

        Args:
            batch: ``observations`` (dict of (B, ...) tensors), ``chain`` (B, K+1, h*d), ``step`` (B,),
                ``log_prob`` (B, h*d) at rollout, ``advantages`` (B,), ``returns`` (B,), ``valid`` (B, h).
        Returns: ``policy_loss``, ``value_loss``, ``entropy``, ``approx_kl`` (mean of
            ``(r - 1) - log r`` over elements; Schulman's k3), ``clip_frac``, ``ratio_mean``.
        Raises:
            ValueError: non-finite advantages or returns.
        """
        adv, ret = batch["advantages"], batch["returns"]
        for name, t in (("advantages", adv), ("returns", ret)):
            if not torch.isfinite(t).all():
                raise ValueError(f"PPO {name} contain NaN or inf; refusing to update")
        self.policy.train()
        feat = self.policy.encode(batch["observations"])
        log_prob, entropy = self.chain.log_prob(feat, batch["chain"], batch["step"])
        terms = clipped_surrogate(
            log_prob, batch["log_prob"], adv, batch["valid"], self.policy.horizon, self.cfg.clip
        )
        policy_loss = terms["loss"]
        loss = policy_loss - self.cfg.entropy_coef * entropy.mean()
        opt = self.optimizers["policy"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for g in opt.param_groups for p in g["params"]]
        nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        opt.step()

        value = self.value(self.policy.pool_features(feat).detach())
        value_loss = 0.5 * ((value - ret) ** 2).mean()
        vopt = self.optimizers["value"]
        vopt.zero_grad(set_to_none=True)
        value_loss.backward()
        vopt.step()
        return {
            "policy_loss": float(policy_loss.detach()),
            "value_loss": float(value_loss.detach()),
            "entropy": float(entropy.detach().mean()),
            "approx_kl": float(terms["approx_kl"]),
            "clip_frac": float(terms["clip_frac"]),
            "ratio_mean": float(terms["ratio_mean"]),
        }
