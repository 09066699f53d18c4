"""SAC with a LayerNorm critic ensemble: the RLPD / HIL-SERL online recipe as a baseline (docs/algorithms.md
§5).

References: Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications" (SAC, learned temperature);
Ball et al. 2023, "Efficient Online Reinforcement Learning with Offline Data" (RLPD: LayerNorm critic
ensemble, symmetric sampling); Luo et al. 2024, "Precise and Dexterous Robotic Manipulation via
Human-in-the-Loop Reinforcement Learning" (HIL-SERL: 2 critics with min, gamma 0.97, temperature 0.01,
target entropy -|A|/2, one extra critic-only update per full update).

Single-step actions: the chunk length is h = 1, batches (docs/algorithms.md §1) carry ``actions`` (B, 1, d)
float32
in robot units, ``rewards`` (B,), ``masks`` (B,), ``valid`` (B, 1). Everything below is in the normalised
action space [-1, 1] of the actor (same normalisation as the flow policy). With a ~ pi(.|s) a tanh-Gaussian,
alpha = exp(log_alpha) and K critics:

- critic target: ``y = r + gamma * mask * (agg_k Qbar_k(s', a') - alpha * log pi(a'|s'))``, ``a' ~ pi(.|s')``
  (``agg`` = ``SACConfig.critic_agg``); with ``SACConfig.backup_entropy`` false (the default, as the
  released HIL-SERL configs) the entropy term is dropped: ``y = r + gamma * mask * agg_k Qbar_k(s', a')``;
- critic loss: ``mean_{k,b} w_b * (Q_k(s_b, a_b) - y_b)^2`` with ``w = critic_valid`` (:func:`critic_weight`:
  0 for a demo step at a time limit, whose next state a LeRobot dataset does not record);
- actor loss: ``E_s E_{a~pi}[alpha * log pi(a|s) - mean_k Q_k(s, a)]`` (alpha held fixed);
- temperature loss: ``alpha * (H - H_target)`` with the entropy estimate ``H = -E log pi(a|s)`` held fixed,
  so alpha grows when the entropy is below the target and shrinks above it (the Lagrangian form of the
  HIL-SERL/SERL code); ``H_target = SACConfig.target_entropy``, or ``-d/2`` when that is 0;
- target: ``Qbar <- (1 - tau) Qbar + tau Q`` after every critic step (critic-only steps included, as SERL).

One update takes ``critic_only_updates + 1`` independently drawn batches: a critic-only step on each of the
first ``critic_only_updates`` and the full step (critic, actor, temperature) on the last, as HIL-SERL draws
a fresh full batch for every critic step.
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np
import torch
from torch import nn

from robot_rl.algos.base import Agent, check_finite, prepare_actions
from robot_rl.algos.critic import ChunkCritic, actor_step, make_target, polyak_update
from robot_rl.algos.protocols import Obs
from robot_rl.algos.targets import critic_td_step


class GaussianPolicy(Protocol):
    """Tanh-Gaussian single-step actor (``robot_rl.policies.gaussian.GaussianTanhPolicy``).

    ``policy(obs, noise=None, deterministic=False) -> (actions (B, 1, d) in [-1, 1], log_prob (B,))``.
    """

    horizon: int
    action_dim: int

    def __call__(
        self, obs: Obs, noise: torch.Tensor | None = None, deterministic: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]: ...

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor: ...

    def unnormalize_actions(self, actions: torch.Tensor) -> torch.Tensor: ...

    def parameters(self): ...


class Temperature(nn.Module):
    """Holds ``log_alpha`` (a 0-d float32 Parameter) so checkpoints save it; ``forward() -> alpha``."""

    def __init__(self, init_temperature: float):
        super().__init__()
        if not init_temperature > 0:
            raise ValueError(f"init_temperature must be > 0, got {init_temperature}")
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_temperature), dtype=torch.float32))

    def forward(self) -> torch.Tensor:
        return self.log_alpha.exp()


class SACAgent(Agent):
    """Gaussian SAC on single-step actions (HIL-SERL recipe).

    Args:
        policy: tanh-Gaussian actor (:class:`GaussianPolicy`) with ``horizon == 1``; ``self.policy``.
        critic: :class:`ChunkCritic` with ``horizon == 1`` (LayerNorm ensemble of ``cfg.num_critics``,
            aggregation ``cfg.critic_agg``); a Polyak target copy is made here.
        cfg: ``SACConfig`` (lr, gamma, tau, init_temperature, target_entropy, critic_only_updates,
            backup_entropy).
        deterministic: initial value of :attr:`deterministic`.

    Attributes:
        deterministic: when True :meth:`act` returns ``tanh(mu(s))`` (evaluation); when False (default) it
            samples ``tanh(mu + sigma * eps)`` (exploration). Set it directly, e.g. ``agent.deterministic =
            True`` before evaluation.
        target_entropy: the temperature's entropy target (float).
        temperature: :class:`Temperature` module (``log_alpha``).
        backup_entropy: ``cfg.backup_entropy`` (bool): the critic target subtracts ``alpha * log pi(a'|s')``.
        batches_per_update: ``critic_only_updates + 1``.

    ``update(b_1, ..., b_n)`` with n = :attr:`batches_per_update` independently drawn full batches (HIL-SERL
    samples a fresh batch for every critic step): a critic-only step (critic + Polyak) on each of
    ``b_1 .. b_{n-1}`` and a full step (critic, actor, temperature, Polyak) on ``b_n``.

    Optimizers: ``actor``, ``critic``, ``temperature`` (Adam, ``cfg.lr``). Modules: ``policy``, ``critic``,
    ``target_critic``, ``temperature``.
    """

    method = "sac"

    def __init__(
        self,
        policy: GaussianPolicy,
        critic: ChunkCritic,
        cfg,
        deterministic: bool = False,
    ):
        if int(policy.horizon) != 1:
            raise ValueError(f"SAC acts on single steps: policy.horizon must be 1, got {policy.horizon}")
        if int(critic.horizon) != 1:
            raise ValueError(f"SAC acts on single steps: critic.horizon must be 1, got {critic.horizon}")
        if int(critic.action_dim) != int(policy.action_dim):
            raise ValueError(
                f"critic action_dim {critic.action_dim} != policy action_dim {policy.action_dim}"
            )
        if int(cfg.critic_only_updates) < 0:
            raise ValueError(f"critic_only_updates must be >= 0, got {cfg.critic_only_updates}")
        self.policy, self.critic, self.cfg = policy, critic, cfg
        self.deterministic, self.backup_entropy = bool(deterministic), bool(cfg.backup_entropy)
        self.batches_per_update = int(cfg.critic_only_updates) + 1
        self.target_critic = make_target(critic)
        self.temperature = Temperature(cfg.init_temperature).to(self.device)
        d = int(policy.action_dim)
        self.target_entropy = float(cfg.target_entropy) if cfg.target_entropy != 0 else -d / 2.0
        self.optimizers = {
            "actor": torch.optim.Adam(policy.parameters(), lr=cfg.lr),
            "critic": torch.optim.Adam(critic.parameters(), lr=cfg.lr),
            "temperature": torch.optim.Adam(self.temperature.parameters(), lr=cfg.lr),
        }

    def _check_actions(self, batch: dict) -> None:
        a = batch["actions"]
        expected = (1, int(self.policy.action_dim))
        if a.dim() != 3 or tuple(a.shape[1:]) != expected:
            raise ValueError(
                f"SAC batch 'actions' must be (B, {expected[0]}, {expected[1]}), got {tuple(a.shape)}"
            )

    def _critic_step(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One critic gradient step and one Polyak step on ``batch``; returns (loss, q (K, B), y (B,))."""
        actions_norm = prepare_actions(self.policy, batch["actions"], batch["valid"])
        next_obs = batch["next_observations"]
        with torch.no_grad():
            next_a, next_log_prob = self.policy(next_obs)
            next_q = self.target_critic.q_agg(self.target_critic(next_obs, next_a))
            if self.backup_entropy:
                next_q = next_q - self.temperature() * next_log_prob
        loss, q, y = critic_td_step(
            self.critic,
            self.optimizers["critic"],
            batch["observations"],
            actions_norm,
            next_q,
            batch,
            self.cfg.gamma,
            1,
        )
        polyak_update(self.target_critic, self.critic, self.cfg.tau)
        return loss, q, y

    def update(self, *batches: dict) -> dict[str, float]:
        """A critic-only step on each of ``batches[:-1]``, then the full step on ``batches[-1]``; exactly
        :attr:`batches_per_update` (``critic_only_updates + 1``) independently drawn batches, each as from
        ``batch_to_torch`` (see the module docstring for the keys).

        Returns float metrics: ``critic_loss`` (full step), ``critic_only_loss`` (mean over the critic-only
        steps; absent when there are none), ``actor_loss``, ``temperature_loss``, ``temperature`` (alpha after
        the step), ``entropy`` (-mean log pi), ``q_mean``, ``target_mean`` (full step).

        Raises:
            ValueError: not exactly ``critic_only_updates + 1`` batches, actions not (B, 1, d), NaN/inf
                actions in valid steps.
        """
        if len(batches) != self.batches_per_update:
            raise ValueError(
                f"SAC update takes critic_only_updates + 1 = {self.batches_per_update} independently drawn "
                f"batches (one per critic step), got {len(batches)}"
            )
        for batch in batches:
            self._check_actions(batch)
        self.train()
        *critic_only, last = batches
        only_losses = [float(self._critic_step(mb)[0].detach()) for mb in critic_only]
        critic_loss, q, y = self._critic_step(last)

        obs = last["observations"]
        alpha = self.temperature().detach()
        actions, log_prob = self.policy(obs)
        q_pi = self.critic(obs, actions).mean(0)  # mean over the ensemble (SERL)
        actor_loss = (alpha * log_prob - q_pi).mean()
        actor_step(self.optimizers, actor_loss)

        entropy = -log_prob.detach().mean()
        temperature_loss = self.temperature() * (entropy - self.target_entropy)
        opt = self.optimizers["temperature"]
        opt.zero_grad(set_to_none=True)
        temperature_loss.backward()
        opt.step()

        out = {
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "temperature_loss": float(temperature_loss.detach()),
            "temperature": float(self.temperature().detach()),
            "entropy": float(entropy),
            "q_mean": float(q.detach().mean()),
            "target_mean": float(y.mean()),
        }
        if only_losses:
            out["critic_only_loss"] = float(np.mean(only_losses))
        return out

    @torch.no_grad()
    def act(self, obs: Obs, noise: torch.Tensor | None = None) -> torch.Tensor:
        """(B, 1, d) float32 robot units: ``tanh(mu(s))`` if :attr:`deterministic`, else
        ``tanh(mu + sigma * eps)``; ``noise`` optional eps (B, 1, d) (ignored when deterministic).

        Raises:
            ValueError: the output holds NaN/inf (never returned).
        """
        actions, _ = self.policy(obs, noise, deterministic=self.deterministic)
        return check_finite(self.policy.unnormalize_actions(actions), "SAC policy output")

    def modules(self) -> dict[str, nn.Module]:
        return {
            "policy": self.policy,
            "critic": self.critic,
            "target_critic": self.target_critic,
            "temperature": self.temperature,
        }
