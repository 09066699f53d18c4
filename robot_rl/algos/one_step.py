"""Shared plumbing of the agents that act with a one-step policy μ_ω(s, z) distilled or trained next to a
behaviour flow: QC-FQL (Park, Li & Levine 2025, docs/algorithms.md §4) and CO-RFT (Huang et al. 2025, §6).

Both hold the behaviour flow, an ensemble chunk critic with its Polyak target (§3), μ_ω, one Adam over the
flow and μ_ω's trainable parameters and one over the critic, and act with ``clip(μ_ω(s, z))``, z ~ N(0, I).
"""

from __future__ import annotations

import torch
from torch import nn

from robot_rl.algos.base import Agent, check_finite
from robot_rl.algos.critic import ChunkCritic, make_target
from robot_rl.algos.protocols import FlowPolicy, Obs, OneStepPolicy
from robot_rl.algos.targets import reward_affine


class OneStepAgent(Agent):
    """Base of :class:`~robot_rl.algos.fql.QCFQLAgent` and :class:`~robot_rl.algos.corft.CORFTAgent`.

    Args:
        policy: behaviour flow (FlowPolicy), BC-trained, warm-startable.
        critic: :class:`ChunkCritic` (or a subclass); a Polyak target copy is made here.
        one_step_policy: μ_ω(obs, z (B, h, d)) -> (B, h, d) normalised (unclipped), the acting policy.
        cfg: ``OfflineRLConfig`` (``lr``, ``reward_norm``/``reward_range`` and what the subclass reads).

    Raises:
        ValueError: ``cfg.reward_norm`` rescales but ``cfg.reward_range`` is not ``[r_min, r_max]``.
    """

    def __init__(self, policy: FlowPolicy, critic: ChunkCritic, one_step_policy: OneStepPolicy, cfg):
        self.policy, self.critic, self.one_step, self.cfg = policy, critic, one_step_policy, cfg
        self.target_critic = make_target(critic)
        self.reward_affine = reward_affine(cfg.reward_norm, cfg.reward_range)
        actor_params = list(policy.parameters()) + list(one_step_policy.parameters())
        self.optimizers = {
            "actor": torch.optim.Adam([p for p in actor_params if p.requires_grad], lr=cfg.lr),
            "critic": torch.optim.Adam(critic.parameters(), lr=cfg.lr),
        }

    def _noise(self, b: int) -> torch.Tensor:
        """z ~ N(0, I), (b, h, d) float32 on the agent's device."""
        return torch.randn(b, self.policy.horizon, self.policy.action_dim, device=self.device)

    @torch.no_grad()
    def act(self, obs: Obs, noise: torch.Tensor | None = None) -> torch.Tensor:
        """``clip(μ_ω(s, z))`` unnormalised -> (B, h, d) robot units; ``noise``: optional (B, h, d).

        Raises:
            ValueError: the chunk holds NaN or inf.
        """
        if noise is None:
            noise = self._noise(len(next(iter(obs.values()))))
        chunk = self.policy.clip_normalized(self.one_step(obs, noise))
        return check_finite(self.policy.unnormalize_actions(chunk, obs))

    def modules(self) -> dict[str, nn.Module]:
        return {
            "policy": self.policy,
            "critic": self.critic,
            "target_critic": self.target_critic,
            "one_step": self.one_step,
        }
