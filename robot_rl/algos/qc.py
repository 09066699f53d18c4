"""QC: Q-chunking with best-of-N policy extraction (Li, Zhou & Levine 2025, "Reinforcement Learning with
Action Chunking"; docs/algorithms.md §3(a)).

Critic target: ``y = R_t^(h) + gamma^h * mask * agg_k Qbar_k(s_{t+h}, A')`` with
``A' = argmax_{A_i ~ pi_flow(s_{t+h}), i<N} agg Q_phi(s_{t+h}, A_i)``: the **online** critic picks A' and
the **target** critic scores it (QC's ``agents/acfql.py``). Picking with the target critic too would make
the target a max over N noisy target values, which overestimates (the DQN max bias; van Hasselt 2010).
Loss ``valid_{h-1} (Q_k - y)^2`` over each ensemble member. The behaviour flow is trained with the masked
flow BC loss (§2) at the same time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from robot_rl.algos.base import Agent, check_finite, prepare_actions
from robot_rl.algos.critic import ChunkCritic, make_target, polyak_update
from robot_rl.algos.precision import learner_autocast, resolve_learner_dtype
from robot_rl.algos.protocols import FlowPolicy, Obs
from robot_rl.algos.targets import check_success_value, offline_td_step, reward_affine


@torch.no_grad()
def best_of_n(
    policy: FlowPolicy,
    critic: ChunkCritic,
    obs: Obs,
    n: int,
    noise: torch.Tensor | None = None,
    flow_steps: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``n`` chunks per observation from the flow and keep the one with the highest aggregated Q.

    Args:
        noise: optional (B, n, h, d) flow noise (for determinism).
        flow_steps: Euler steps of the samples; 0: the policy's ``flow_steps``.
    Returns:
        (chunks (B, h, d) normalised in [-1, 1], their aggregated Q (B,)).
    """
    feat = policy.encode(obs)
    b = feat.shape[0]
    flat = policy.horizon * policy.action_dim
    if noise is None:
        noise = torch.randn(b, n, flat, device=feat.device)
    noise = noise.reshape(b * n, flat)
    feat = feat.repeat_interleave(n, 0)
    chunks = policy.sample_from_features(feat, noise, flow_steps)  # (B*n, h*d), clipped
    q = critic.q_agg(critic.q_from_features(critic.features(obs), chunks)).reshape(b, n)  # n chunks per state
    best = q.argmax(dim=1)
    chunks = chunks.reshape(b, n, policy.horizon, policy.action_dim)
    return chunks[torch.arange(b, device=feat.device), best], q.max(dim=1).values


def same_obs(a: Obs, b: Obs) -> bool:
    """Whether two observation dicts hold the same keys and equal values: tensors of the same shape, dtype
    and values; anything else (an instruction's strings) equal as numpy arrays."""

    def same(x, y) -> bool:
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            return x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            return False
        return np.array_equal(np.asarray(x), np.asarray(y))

    return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)


class TargetPicks:
    """Best-of-N picks A' of QC's critic target, kept for ``reuse`` consecutive updates on the same s'.

    ``reuse`` = 1 is QC's rule: a new pick every update. With ``reuse`` = k > 1 (``offline.target_reuse``;
    the training loops then repeat each batch k times) a pick made at update u serves the updates u .. u+k-1
    whose next observations equal the picked ones; the target critic re-scores it every update, so only the
    choice among the N samples is up to k - 1 updates old. Any other batch gets a new pick.
    """

    def __init__(self, reuse: int) -> None:
        if reuse < 1:
            raise ValueError(f"offline.target_reuse={reuse}: must be >= 1")
        self.reuse = reuse
        self._obs: Obs | None = None
        self._chunks: torch.Tensor | None = None
        self._uses = 0

    def get(self, next_obs: Obs, pick: Callable[[Obs], torch.Tensor]) -> torch.Tensor:
        """A' (B, h, d) for ``next_obs``: the kept pick while it has uses left and s' is the same, else
        ``pick(next_obs)``."""
        if self._obs is not None and self._uses < self.reuse and same_obs(self._obs, next_obs):
            self._uses += 1
            return self._chunks
        chunks = pick(next_obs)
        if self.reuse > 1:
            self._obs, self._chunks, self._uses = next_obs, chunks, 1
        return chunks

    def state(self) -> dict:
        """The kept pick for a resumable checkpoint: ``{"obs", "chunks", "uses"}``, or {} when none is
        kept. Non-tensor observation values (an instruction's strings) are stored as lists."""
        if self._obs is None:
            return {}
        obs = {k: v if isinstance(v, torch.Tensor) else np.asarray(v).tolist() for k, v in self._obs.items()}
        return {"obs": obs, "chunks": self._chunks, "uses": self._uses}

    def load_state(self, state: dict, device: torch.device) -> None:
        """Keep the pick of :meth:`state`'s dict again (tensors moved to ``device``); {} keeps none."""
        if not state:
            self._obs, self._chunks, self._uses = None, None, 0
            return
        self._obs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in state["obs"].items()}
        self._chunks, self._uses = state["chunks"].to(device), int(state["uses"])


@torch.no_grad()
def best_of_n_target(
    policy: FlowPolicy,
    critic: ChunkCritic,
    target_critic: ChunkCritic,
    next_obs: Obs,
    n: int,
    noise: torch.Tensor | None = None,
    flow_steps: int = 0,
    picks: TargetPicks | None = None,
) -> torch.Tensor:
    """QC's bootstrap value at s' = s_{t+h}: ``agg Qbar(s', A')`` with ``A' = argmax_i agg Q_phi(s', A_i)``.

    The online ``critic`` selects among ``n`` flow samples (``flow_steps`` Euler steps; 0: the policy's)
    and ``target_critic`` evaluates the selected chunk (docs/algorithms.md §3; QC ``acfql.py``).
    ``noise``: optional (B, n, h, d); ``picks``: keeps each pick for ``offline.target_reuse`` updates on
    the same s' (:class:`TargetPicks`; None: a new pick). Returns (B,) float32.
    """

    def pick(obs: Obs) -> torch.Tensor:
        return best_of_n(policy, critic, obs, n, noise, flow_steps)[0]

    chunks = pick(next_obs) if picks is None else picks.get(next_obs, pick)
    return target_critic.q_agg(target_critic(next_obs, chunks))


class QCAgent(Agent):
    """Best-of-N Q-chunking agent.

    Args:
        policy: behaviour flow (FlowPolicy), trained by flow BC; warm start it from a BC checkpoint with
            :meth:`load_policy_state`.
        critic: :class:`ChunkCritic`; a Polyak target copy is made here.
        cfg: ``OfflineRLConfig`` (lr, gamma, tau, best_of_n, reward_norm/reward_range: the per-step reward
            map of :func:`~robot_rl.algos.targets.reward_affine`, terminal_chunks, learner_dtype: the
            dtype of :meth:`update`'s matrix products, :mod:`~robot_rl.algos.precision`;
            target_flow_steps: Euler steps of the target's N samples; target_best_of_n: that N (0:
            best_of_n); target_reuse: the updates each target pick serves (:class:`TargetPicks`);
            success_value: the absorbing value of a success, :func:`~robot_rl.algos.targets.success_tail`).

    Raises:
        ValueError: ``cfg.reward_norm`` rescales but ``cfg.reward_range`` is not ``[r_min, r_max]``;
            unknown ``cfg.learner_dtype``; a bad ``cfg.success_value`` (:func:`check_success_value`);
            ``cfg.target_reuse`` < 1.
    """

    method = "qc"
    inference_knobs = ("offline.best_of_n",)

    def __init__(self, policy: FlowPolicy, critic: ChunkCritic, cfg):
        self.policy, self.critic, self.cfg = policy, critic, cfg
        self.target_critic = make_target(critic)
        self.reward_affine = reward_affine(cfg.reward_norm, cfg.reward_range)
        check_success_value(cfg.success_value, cfg.reward_norm, cfg.gamma)
        resolve_learner_dtype(cfg.learner_dtype, self.device)
        self.target_picks = TargetPicks(cfg.target_reuse)
        # fused: one kernel per step instead of one pass per operation (the same Adam update): the critic's
        # step went from 35 to 7.6 ms on one loaded CPU thread (benchmarks/README.md, learner section)
        self.optimizers = {
            "policy": torch.optim.Adam(policy.parameters(), lr=cfg.lr, fused=True),
            "critic": torch.optim.Adam(critic.parameters(), lr=cfg.lr, fused=True),
        }

    @property
    def batch_reuse(self) -> int:
        """The loops repeat each batch as often as a target pick is kept (:attr:`Agent.batch_reuse`)."""
        return self.target_picks.reuse

    def update(self, batch: dict) -> dict[str, float]:
        """One critic step, one flow BC step, one Polyak step, matrix products in ``cfg.learner_dtype``.
        Returns float metrics."""
        obs, next_obs = batch["observations"], batch["next_observations"]
        valid = batch["valid"]
        actions_norm = prepare_actions(self.policy, batch["actions"], valid, obs)
        self.policy.train()
        self.critic.train()
        with learner_autocast(resolve_learner_dtype(self.cfg.learner_dtype, self.device), self.device):
            next_q = best_of_n_target(
                self.policy,
                self.critic,
                self.target_critic,
                next_obs,
                self.cfg.target_best_of_n or self.cfg.best_of_n,
                flow_steps=self.cfg.target_flow_steps,
                picks=self.target_picks,
            )
            critic_loss, q, y = offline_td_step(self, obs, actions_norm, next_q, batch)
            bc_loss = self.policy.bc_loss(obs, actions_norm, valid)
        opt = self.optimizers["policy"]
        opt.zero_grad(set_to_none=True)
        bc_loss.backward()
        opt.step()

        polyak_update(self.target_critic, self.critic, self.cfg.tau)
        return {
            "critic_loss": float(critic_loss.detach()),
            "bc_loss": float(bc_loss.detach()),
            "q_mean": float(q.detach().mean()),
            "target_mean": float(y.mean()),
        }

    def resume_state(self) -> dict:
        """The kept target pick (:meth:`TargetPicks.state`): a run killed inside a block of
        ``offline.target_reuse`` updates resumes with the pick it had."""
        return {"target_picks": self.target_picks.state()}

    def load_resume_state(self, state: dict) -> None:
        self.target_picks.load_state(state.get("target_picks", {}), self.device)

    @torch.no_grad()
    def act(self, obs: Obs, noise: torch.Tensor | None = None) -> torch.Tensor:
        """Best-of-N (cfg.best_of_n) chunk under the online critic: (B, h, d) robot units.
        ``noise`` optional (B, N, h, d)."""
        chunks, _ = best_of_n(self.policy, self.critic, obs, self.cfg.best_of_n, noise)
        return check_finite(self.policy.unnormalize_actions(chunks, obs))

    def modules(self) -> dict[str, nn.Module]:
        return {"policy": self.policy, "critic": self.critic, "target_critic": self.target_critic}
