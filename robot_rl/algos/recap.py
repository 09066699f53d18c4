"""RECAP: advantage-conditioned flow policies (docs/algorithms.md §7; Physical Intelligence 2025, "π*0.6: a
VLA
that learns from experience", RECAP; RLinf's reimplementation).

Offline, one pass of the paper's loop "collect → refit V → relabel → retrain" on a fixed dataset
(:meth:`RECAPAgent.prepare`, then :meth:`RECAPAgent.update` per step):

1. **Value** (:class:`DistributionalValue`): a distribution over ``recap.value_bins`` (201) support points
   on [-1, 0], trained by cross-entropy to the bin of each frame's normalised Monte-Carlo return
   (rewards, normalisation and bins: :mod:`robot_rl.algos.recap_labels`).
2. **Relabel**: ``A_t = Σ_{i<N} r̃_{t+i} + V(o_{t+N}) - V(o_t)`` (N = ``recap.lookahead``), ``V`` the
   value distribution's mean; ``I_t = 1[A_t > ε_task]`` with the top ``recap.positive_fraction`` of each
   task positive; human-intervention frames always positive.
3. **Policy**: the flow policy's masked flow-matching loss (§2) with its observation features conditioned on
   ``I_t`` by a learned embedding (:class:`IndicatorConditioner`; the paper puts "Advantage: positive" /
   "negative" in the prompt); ``I_t`` is replaced by "unconditioned" with probability ``recap.drop_prob``
   so the same network also learns the unconditioned policy.
4. **Inference**: condition on positive with classifier-free guidance ``v = v_unc + β (v_pos - v_unc)``,
   ``β = recap.cfg_beta`` (:func:`guided_velocity`).

What is ours: the per-task return normalisation (divide by the task's largest return magnitude), the
embedding conditioning instead of prompt text, the value's MLP on the shared observation encoder, and
that the offline pass is run once.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robot_rl import keys
from robot_rl.algos.base import Agent, check_finite, prepare_actions
from robot_rl.algos.batch import batch_to_torch
from robot_rl.algos.mlp import build_mlp
from robot_rl.algos.protocols import FlowPolicy, Obs
from robot_rl.algos.recap_labels import (
    advantages,
    bin_support,
    indicators,
    normalised_returns,
    recap_rewards,
    value_bins,
)

NEGATIVE, POSITIVE, UNCONDITIONED = 0, 1, 2


class DistributionalValue(nn.Module):
    """V(o) as a categorical distribution over ``bins`` points evenly spaced on [-1, 0].

    Args:
        encoder: observation encoder (``out_dim`` features).
        hidden_dims: MLP widths.
        bins: number of support points (201 in the paper).

    The buffer ``fitted`` (0/1) records that the value was trained, so a resumed run does not refit it.
    """

    def __init__(self, encoder: nn.Module, hidden_dims: list[int], bins: int):
        super().__init__()
        self.encoder = encoder
        self.head = build_mlp(int(encoder.out_dim), hidden_dims, bins)
        self.register_buffer("support", torch.as_tensor(bin_support(bins), dtype=torch.float32))
        self.register_buffer("fitted", torch.zeros(()))

    def forward(self, obs: Obs) -> torch.Tensor:
        """Observation dict (batch B) -> logits (B, bins) float32."""
        return self.head(self.encoder(obs))

    def loss(self, obs: Obs, target_bins: torch.Tensor) -> torch.Tensor:
        """Cross-entropy to the target bin indices (B,) int64 -> scalar."""
        return F.cross_entropy(self(obs), target_bins)

    @torch.no_grad()
    def expected(self, obs: Obs) -> torch.Tensor:
        """Mean of the value distribution, (B,) float32 in [-1, 0]."""
        return self(obs).softmax(-1) @ self.support


class IndicatorConditioner(nn.Module):
    """Adds a learned embedding of the advantage indicator (NEGATIVE, POSITIVE or UNCONDITIONED) to a flow
    policy's observation features. Zero-initialised, so a BC-warm-started policy starts unchanged.

    Features (B, F) (the state flow policy) get ``feat + e[I]`` (``dim = F``); prefix tokens (B, L, W + 1)
    (the VLA policy: width W plus a validity channel, :mod:`robot_rl.policies.vla.expert`) get one more
    token ``[e[I], 1]`` that the action expert attends to (``dim = W``).
    """

    def __init__(self, dim: int):
        super().__init__()
        self.embed = nn.Embedding(3, dim)
        nn.init.zeros_(self.embed.weight)

    def forward(self, feat: torch.Tensor, indicator: torch.Tensor) -> torch.Tensor:
        """feat (B, F) or (B, L, W + 1), indicator (B,) int64 -> conditioned features (same layout).

        Raises ValueError when the feature width does not match the embedding."""
        e = self.embed(indicator).to(feat.dtype)
        dim = self.embed.embedding_dim
        if feat.dim() == 2 and feat.shape[-1] == dim:
            return feat + e
        if feat.dim() == 3 and feat.shape[-1] == dim + 1:
            token = torch.cat([e, torch.ones_like(e[:, :1])], dim=-1).unsqueeze(1)
            return torch.cat([feat, token], dim=1)
        raise ValueError(
            f"indicator embedding of width {dim} does not fit policy features {tuple(feat.shape)}"
        )


def guided_velocity(
    policy: FlowPolicy,
    conditioner: IndicatorConditioner,
    feat: torch.Tensor,
    x: torch.Tensor,
    t: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """Classifier-free guidance toward the positive indicator: ``v_unc + β (v_pos - v_unc)``.

    feat: unconditioned features (B, ...) from ``policy.encode``; x (B, h*d); t (B, 1) -> (B, h*d).
    β = 1 is the positive-conditioned velocity, β = 0 the unconditioned one.
    """
    b = x.shape[0]
    labels = torch.cat(
        [
            torch.full((b,), POSITIVE, dtype=torch.long, device=x.device),
            torch.full((b,), UNCONDITIONED, dtype=torch.long, device=x.device),
        ]
    )
    both = conditioner(torch.cat([feat, feat]), labels)
    v = policy.velocity_from_features(both, torch.cat([x, x]), torch.cat([t, t]))
    v_pos, v_unc = v[:b], v[b:]
    return v_unc + beta * (v_pos - v_unc)


@torch.no_grad()
def sample_guided(
    policy: FlowPolicy,
    conditioner: IndicatorConditioner,
    feat: torch.Tensor,
    noise: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """K Euler steps (docs/algorithms.md §2, t = 0 noise) of the guided velocity: feat (B, ...), noise (B,
    h*d)
    -> chunks (B, h*d) clipped to the normalised action box."""
    x = noise
    k_steps = policy.flow_steps
    for k in range(k_steps):
        t = torch.full((x.shape[0], 1), k / k_steps, device=x.device, dtype=x.dtype)
        x = x + guided_velocity(policy, conditioner, feat, x, t, beta) / k_steps
    return policy.clip_normalized(x)


class RECAPAgent(Agent):
    """RECAP on a flow chunk policy (module docstring).

    Args:
        policy: the flow policy (``FlowChunkPolicy`` or ``VLAPolicy``; warm start it from BC).
        value: :class:`DistributionalValue`.
        conditioner: :class:`IndicatorConditioner` matching the policy's features.
        cfg: ``RecapConfig`` (c_fail, value_bins, lookahead, positive_fraction, drop_prob, cfg_beta, lr,
            value_steps, value_lr, value_batch_size).

    :meth:`prepare` must run on the training data before :meth:`update`; batches carry ``index``, the
    position of each chunk's start in the training split.
    """

    method = "recap"
    inference_knobs = ("recap.cfg_beta",)

    def __init__(
        self, policy: FlowPolicy, value: DistributionalValue, conditioner: IndicatorConditioner, cfg
    ):
        self.policy, self.value, self.conditioner, self.cfg = policy, value, conditioner, cfg
        self.labels: torch.Tensor | None = None
        self.thresholds: dict[int, float] = {}
        self.optimizers = {
            "policy": torch.optim.Adam([*policy.parameters(), *conditioner.parameters()], lr=cfg.lr),
            "value": torch.optim.Adam(value.parameters(), lr=cfg.value_lr),
        }

    # --- value and relabelling ------------------------------------------------------------------------
    def prepare(self, data, seed: int = 0) -> dict[str, float]:
        """Fit the value (unless already fitted, e.g. on resume) and label every training frame.

        ``data``: a :class:`robot_rl.data.training.training_set.TrainingSet`; its training split's success
        per episode comes from ``next.success`` (any frame of the episode), else from a true termination
        (``next.done``) at the episode's last frame. Returns metrics (value loss, positive fraction).
        """
        split = data.train
        sampler = split.sampler
        table = data.dataset.load_tabular()
        task = np.asarray(table[keys.TASK_INDEX]).reshape(-1)[split.rows]
        if keys.SUCCESS in table:
            flags = np.asarray(table[keys.SUCCESS]).reshape(-1)[split.rows].astype(bool)
            per_episode = np.zeros(int(sampler.episode_ordinal[-1]) + 1, dtype=bool)
            np.logical_or.at(per_episode, sampler.episode_ordinal, flags)
            success = per_episode[sampler.episode_ordinal]
        else:
            success = sampler.dones[sampler.episode_end - 1]
        rewards = recap_rewards(sampler.episode_end, success, self.cfg.c_fail)
        returns, rewards_norm = normalised_returns(rewards, sampler.episode_end, task)
        targets = torch.as_tensor(value_bins(returns, self.cfg.value_bins), device=self.device)
        metrics: dict[str, float] = {}
        if float(self.value.fitted) == 0.0:
            metrics["value_loss"] = self.fit_value(data, targets, seed)
        values = self._values(data)
        adv = advantages(rewards_norm, values, sampler.episode_end, self.cfg.lookahead)
        labels, self.thresholds = indicators(adv, task, self.cfg.positive_fraction, sampler.intervention)
        self.labels = torch.as_tensor(labels, device=self.device)
        metrics["positive_fraction"] = float(labels.mean())
        return metrics

    def fit_value(self, data, targets: torch.Tensor, seed: int) -> float:
        """``recap.value_steps`` Adam steps of cross-entropy on uniformly drawn training frames; returns the
        last loss. ``targets``: (N,) bin index per training frame."""
        rng = np.random.default_rng([seed, 20])
        opt = self.optimizers["value"]
        self.value.train()
        loss = torch.zeros(())
        for _ in range(self.cfg.value_steps):
            idx = rng.integers(0, len(targets), size=self.cfg.value_batch_size)
            obs = batch_to_torch(data.batch(data.train, idx), self.device)["observations"]
            loss = self.value.loss(obs, targets[torch.as_tensor(idx, device=self.device)])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        self.value.fitted.fill_(1.0)
        return float(loss.detach())

    def _values(self, data, batch_size: int = 512) -> np.ndarray:
        """V(o_t) for every training frame, (N,) float64."""
        self.value.eval()
        n = len(data.train.rows)
        out = []
        for lo in range(0, n, batch_size):
            idx = np.arange(lo, min(n, lo + batch_size))
            obs = batch_to_torch(data.batch(data.train, idx), self.device)["observations"]
            out.append(self.value.expected(obs).cpu().numpy())
        self.value.train()
        return np.concatenate(out).astype(np.float64)

    # --- policy ---------------------------------------------------------------------------------------
    def update(self, batch: dict) -> dict[str, float]:
        """One Adam step on the indicator-conditioned flow loss; each row's indicator is dropped to
        UNCONDITIONED with probability ``cfg.drop_prob``.

        Raises RuntimeError before :meth:`prepare`, KeyError for a batch without ``index``."""
        if self.labels is None:
            raise RuntimeError("RECAPAgent.update before prepare(data): the frames have no indicator yet")
        if "index" not in batch:
            raise KeyError(f"RECAP batches need 'index' (chunk start in the split); got {sorted(batch)}")
        obs, valid = batch["observations"], batch["valid"]
        self.policy.train()
        actions_norm = prepare_actions(self.policy, batch["actions"], valid, obs)
        labels = self.drop(self.labels[batch["index"].to(self.labels.device).long()])
        feat = self.conditioner(self.policy.encode(obs), labels)
        loss = self.policy.bc_loss(obs, actions_norm, valid, feat=feat)
        opt = self.optimizers["policy"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return {"bc_loss": float(loss.detach()), "positive": float((labels == POSITIVE).float().mean())}

    def drop(self, labels: torch.Tensor) -> torch.Tensor:
        """Replace each label (B,) by UNCONDITIONED with probability ``cfg.drop_prob``."""
        dropped = torch.rand(labels.shape, device=labels.device) < self.cfg.drop_prob
        return torch.where(dropped, torch.full_like(labels, UNCONDITIONED), labels)

    @torch.no_grad()
    def act(self, obs: Obs, noise: torch.Tensor | None = None) -> torch.Tensor:
        """One chunk per observation, conditioned on positive with guidance ``cfg.cfg_beta``: (B, h, d)
        robot units. ``noise`` optional (B, 1, h, d)."""
        feat = self.policy.encode(obs)
        b, h, d = feat.shape[0], self.policy.horizon, self.policy.action_dim
        if noise is None:
            noise = torch.randn(b, 1, h, d, device=feat.device)
        chunk = sample_guided(self.policy, self.conditioner, feat, noise.reshape(b, h * d), self.cfg.cfg_beta)
        return check_finite(self.policy.unnormalize_actions(chunk.reshape(b, h, d), obs))

    def modules(self) -> dict[str, nn.Module]:
        return {"policy": self.policy, "value": self.value, "indicator": self.conditioner}
