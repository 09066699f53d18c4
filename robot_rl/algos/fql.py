"""QC-FQL: flow Q-learning (Park, Li & Levine 2025, "Flow Q-Learning") on flattened action chunks, with the
Q-chunking backup (Li, Zhou & Levine 2025). docs/algorithms.md §3(b) and §4.

Actor loss: ``L_BC(theta) + alpha * E_z ||mu_omega(s, z) - ODE_theta(s, z)||^2 - E_z[mean_k Q_k(s, mu)]``,
the Q term scaled by ``1 / mean|Q|`` (stop-gradient) when ``normalize_q_loss``. ODE_theta is the K-step
Euler flow under no_grad (teacher). Critic target uses ``mu_omega`` at s'.
"""

from __future__ import annotations

import torch

from robot_rl.algos.anchored import BCAnchoredActing
from robot_rl.algos.base import prepare_actions
from robot_rl.algos.critic import ChunkCritic, actor_step, polyak_update
from robot_rl.algos.precision import learner_autocast, resolve_learner_dtype
from robot_rl.algos.protocols import FlowPolicy, Obs, OneStepPolicy
from robot_rl.algos.targets import check_success_value, offline_td_step


class QCFQLAgent(BCAnchoredActing):
    """Args:
    policy: behaviour flow (FlowPolicy) trained by flow BC (warm-startable from BC).
    critic: :class:`ChunkCritic`; a Polyak target copy is made here.
    one_step_policy: mu_omega(obs, z (B, h, d)) -> (B, h, d) normalised (unclipped).
    cfg: ``OfflineRLConfig`` (lr, gamma, tau, fql_alpha, normalize_q_loss, critic_agg, reward_norm and
        reward_range (:func:`~robot_rl.algos.targets.reward_affine`), terminal_chunks, learner_dtype: the
        dtype of :meth:`update`'s matrix products, :mod:`~robot_rl.algos.precision`; success_value,
        :func:`~robot_rl.algos.targets.success_tail`; extraction and best_of_n, how it acts).

    Raises:
        ValueError: ``cfg.reward_norm`` rescales but ``cfg.reward_range`` is not ``[r_min, r_max]``; a bad
            ``cfg.success_value`` (:func:`~robot_rl.algos.targets.check_success_value`).

    Construction and modules: :class:`~robot_rl.algos.one_step.OneStepAgent`; acting (best-of-N flow
    samples by default, or ``clip(mu_omega(s, z))``): :class:`~robot_rl.algos.anchored.BCAnchoredActing`.
    """

    method = "qc_fql"

    def __init__(self, policy: FlowPolicy, critic: ChunkCritic, one_step_policy: OneStepPolicy, cfg):
        check_success_value(cfg.success_value, cfg.reward_norm, cfg.gamma)
        super().__init__(policy, critic, one_step_policy, cfg)

    def actor_losses(
        self, obs: Obs, actions_norm: torch.Tensor, valid: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The three actor terms (each a scalar tensor with grad) plus their weighted sum ``actor_loss``."""
        bc_loss = self.policy.bc_loss(obs, actions_norm, valid)
        b = actions_norm.shape[0]
        z = self._noise(b)
        with torch.no_grad():
            teacher = self.policy.sample(obs, num_samples=1, noise=z.unsqueeze(1))[:, 0]  # clipped
        mu = self.one_step(obs, z)
        distill_loss = ((mu - teacher) ** 2).mean()
        qs = self.critic(obs, self.policy.clip_normalized(mu))
        q = qs.mean(0)
        q_loss = -q.mean()
        if self.cfg.normalize_q_loss:
            q_loss = q_loss / q.abs().mean().detach().clamp_min(1e-6)
        actor_loss = bc_loss + self.cfg.fql_alpha * distill_loss + q_loss
        return {"actor_loss": actor_loss, "bc_loss": bc_loss, "distill_loss": distill_loss, "q_loss": q_loss}

    def update(self, batch: dict) -> dict[str, float]:
        """One critic step, one actor step (flow BC + distillation + Q), one Polyak step, matrix products in
        ``cfg.learner_dtype``.

        Raises:
            ValueError: unknown ``cfg.learner_dtype``."""
        obs, next_obs = batch["observations"], batch["next_observations"]
        valid = batch["valid"]
        actions_norm = prepare_actions(self.policy, batch["actions"], valid, obs)
        for m in self.modules().values():
            m.train()
        with learner_autocast(resolve_learner_dtype(self.cfg.learner_dtype, self.device), self.device):
            with torch.no_grad():
                noise = self._noise(actions_norm.shape[0])
                next_a = self.policy.clip_normalized(self.one_step(next_obs, noise))
                next_q = self.target_critic.q_agg(self.target_critic(next_obs, next_a))
            critic_loss, q, _ = offline_td_step(self, obs, actions_norm, next_q, batch)
            losses = self.actor_losses(obs, actions_norm, valid)
        actor_step(self.optimizers, losses["actor_loss"])

        polyak_update(self.target_critic, self.critic, self.cfg.tau)
        out = {k: float(v.detach()) for k, v in losses.items()}
        out.update(critic_loss=float(critic_loss.detach()), q_mean=float(q.detach().mean()))
        return out
