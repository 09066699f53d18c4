"""Flow-matching behaviour cloning (docs/algorithms.md §2; Park, Li & Levine 2025 FQL / Li et al. 2025 QC flow
BC loss): minimise ``E ||v_theta(s, x_t, t) - (A - x_0)||^2`` with Adam."""

from __future__ import annotations

import torch
from torch import nn

from robot_rl.algos.base import Agent, check_finite, prepare_actions
from robot_rl.algos.protocols import FlowPolicy, Obs


class FlowBC(Agent):
    """Plain BC agent around a flow chunk policy.

    Args:
        policy: a :class:`robot_rl.algos.protocols.FlowPolicy` (e.g. ``robot_rl.policies.FlowChunkPolicy``).
        cfg: ``BCConfig`` (or anything with ``lr``).
    """

    method = "bc"

    def __init__(self, policy: FlowPolicy, cfg):
        self.policy = policy
        self.cfg = cfg
        self.optimizers = {"policy": torch.optim.Adam(policy.parameters(), lr=cfg.lr)}

    def update(self, batch: dict) -> dict[str, float]:
        """One Adam step on the masked flow BC loss. ``batch`` as from ``batch_to_torch`` (actions in robot
        units, (B, h, d); valid (B, h))."""
        self.policy.train()
        actions_norm = prepare_actions(self.policy, batch["actions"], batch["valid"], batch["observations"])
        loss = self.policy.bc_loss(batch["observations"], actions_norm, batch["valid"])
        opt = self.optimizers["policy"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return {"bc_loss": float(loss.detach())}

    @torch.no_grad()
    def act(self, obs: Obs, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Sample one chunk per observation: (B, h, d) in robot units. ``noise`` optional (B, 1, h, d); by
        default N(0, I) scaled by ``cfg.act_noise`` (1 when the config has none)."""
        scale = float(getattr(self.cfg, "act_noise", 1.0))
        if noise is None and scale != 1.0:
            batch = len(next(iter(obs.values())))
            device = next(self.policy.parameters()).device
            noise = scale * torch.randn(batch, 1, self.policy.horizon, self.policy.action_dim, device=device)
        chunk = self.policy.sample(obs, num_samples=1, noise=noise)[:, 0]
        return check_finite(self.policy.unnormalize_actions(chunk, obs))

    def modules(self) -> dict[str, nn.Module]:
        return {"policy": self.policy}
