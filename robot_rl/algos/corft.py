"""CO-RFT: chunked offline RL with a Q per chunk prefix and a TD3+BC actor (Huang et al. 2025, "CO-RFT:
Efficient Fine-Tuning of Vision-Language-Action Models through Chunked Offline Reinforcement Learning";
docs/algorithms.md §6), built as the Q-chunking critic of §3 plus the flags below.

What is verified and what is our reading. docs/algorithms.md marks every CO-RFT loss [unverified]
(reconstructed
from the paper's text; no official code was available to us). Verified against code here is only what
CO-RFT shares with QC/FQL: the chunked transition (§1), the ensemble LayerNorm critic and its Polyak target
(§3), the one-step policy network (§4). Our reading, each behind a config key:

- **Prefix critic** (:class:`PrefixChunkCritic`): Q_k(s_t, a_{t:t+k}) for k = 1..h is the §3 ensemble MLP on
  ``concat(feat(s), [A ⊙ m_k, m_k])``, where ``m_k[i] = 1[i < k]`` is appended to every chunk step as an
  extra channel and zeroes the unexecuted suffix, so Q_k cannot depend on actions after step k; Q_h (all
  ones) is the full-chunk Q used by the actor, best-of-N and calibration. One network for all prefixes
  (h forward rows per sample) rather than h output heads on the full chunk, which would let Q_k see the
  suffix.
- **Per-prefix targets** (:func:`~robot_rl.algos.targets.prefix_targets`):
  ``y_k = Σ_{i<k} γ^i r_{t+i} + γ^k · mask_k · agg Qbar_h(s_{t+k}, π(s_{t+k}))`` (§6's 0-based k is our
  prefix length minus one), with π the one-step policy at s_{t+k}, ``mask_k`` 1 − (a termination among the
  first k steps), the same per-step reward map (``offline.reward_norm``) as QC. Loss
  ``mean_{member,b,k} w_{b,k} (Q_k − y_k)^2``, ``w_{b,k}`` = ``prefix_critic_valid`` (the k steps recorded
  and s_{t+k} recorded or terminal; ``offline.terminal_chunks=keep`` also keeps a prefix that terminated).
  The prefixes are weighted equally.
- **Cal-QL term** (``corft.cal_ql_alpha``, 0 = off, the default):
  ``α · (mean_{member,b} max(Q_h(s, π(s)), V_MC(s)) − mean_{member,b} Q_h(s, A_D))`` with V_MC(s_t) the
  batch's Monte-Carlo return of the recorded episode from t (``mc_returns``, mapped to critic units with
  ``mc_discounts``). On a time-limit-truncated episode that return omits the rewards after the cut, so it is
  a lower bound there. Cal-QL's (Nakamoto et al. 2023) log-sum-exp over sampled actions is replaced by the
  one-sample form §6 states.
- **Actor** (TD3+BC, Fujimoto & Gu 2021): ``L = L_BC,flow(θ) − Q_h(s, clip(μ_ω(s, z)))/mean|Q| +
  λ · ‖μ_ω(s, z) − A_D‖²`` (the mean over valid steps and action dims), z ~ N(0, I); the Q term is
  normalised as ``offline.normalize_q_loss`` does for QC-FQL (λ = 0.4 is TD3+BC's α = 2.5). The behaviour
  flow keeps its BC loss so the checkpoint's flow stays usable (warm starts, best-of-N); it gets no Q
  gradient. **Acting**: by default (``offline.extraction=bc_anchored``, issue 38's guard) the best of
  ``offline.best_of_n`` behaviour-flow samples under Q_h (:mod:`robot_rl.algos.anchored`); with
  ``extraction=actor`` the one-step policy μ_ω, the paper's reading.
- **Absorbing success** (``offline.success_value``, issue 38): a prefix or Monte-Carlo return that ends in
  a success gains the discounted value of the absorbing success state
  (:func:`~robot_rl.algos.targets.success_values`).

On the VLA policy (``policy.kind=vla``) the flow is the VLA and trains by BC as here; the critic and the
one-step policy are heads on the VLA's own trunk (``policies/vla/trunk.py``: its pooled prefix tokens,
stop-gradient), wired by ``policies.factory.build_agent``. Online RL from a CO-RFT checkpoint is not wired
(online replay batches lack the per-prefix fields; :meth:`CORFTAgent.update` names them).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robot_rl.algos.anchored import BCAnchoredActing
from robot_rl.algos.base import prepare_actions
from robot_rl.algos.critic import ChunkCritic, actor_step, polyak_update
from robot_rl.algos.protocols import FlowPolicy, Obs, OneStepPolicy
from robot_rl.algos.targets import TERMINAL_CHUNKS, check_success_value, prefix_targets, success_tail

PREFIX_KEYS = ("step_rewards", "step_dones", "prefix_observations", "prefix_critic_valid")


class PrefixChunkCritic(ChunkCritic):
    """Ensemble Q_k(feat(s), a_{t:t+k}) for every prefix length k = 1..h (module docstring).

    Same arguments as :class:`ChunkCritic`; the MLP input is ``feat`` + h·(d + 1) (each step's action and
    its prefix-mask channel). :meth:`q_from_features` / ``forward`` give the full-chunk Q_h, (K, B), so the
    critic drops into best-of-N and :func:`robot_rl.eval.q_values.q_calibration`.
    """

    def __init__(
        self,
        encoder: nn.Module,
        action_dim: int,
        horizon: int,
        hidden_dims: Sequence[int],
        num_critics: int = 2,
        agg: str = "mean",
    ):
        super().__init__(encoder, action_dim + 1, horizon, hidden_dims, num_critics, agg)
        self.action_dim = int(action_dim)  # chunk action dim d (the inputs carry d + 1 channels per step)
        self.register_buffer("prefix_masks", torch.tril(torch.ones(horizon, horizon)), persistent=False)

    def _inputs(self, actions: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
        """actions (B, h, d) or (B, h*d), masks (M, h) -> (B*M, h*(d+1)): actions ⊙ mask, mask."""
        b, h = actions.shape[0], self.horizon
        a = actions.reshape(b, 1, h, self.action_dim) * masks[None, :, :, None]
        m = masks[None, :, :, None].expand(b, -1, -1, 1)
        return torch.cat([a, m], dim=-1).reshape(b * masks.shape[0], -1)

    def q_from_features(self, feat: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Full-chunk Q_h: feat (B, F), actions (B, h, d) or (B, h*d) normalised -> (K, B) float32."""
        return super().q_from_features(feat, self._inputs(actions, self.prefix_masks[-1:]))

    def prefix_q_from_features(self, feat: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Every prefix: feat (B, F), actions (B, h, d) normalised -> (K, B, h), column k − 1 = Q_k."""
        b, h = feat.shape[0], self.horizon
        x = self._inputs(actions, self.prefix_masks)
        return ChunkCritic.q_from_features(self, feat.repeat_interleave(h, 0), x).reshape(-1, b, h)


def cal_ql_term(q_policy: torch.Tensor, q_data: torch.Tensor, v_mc: torch.Tensor) -> torch.Tensor:
    """Cal-QL regulariser without its weight: ``mean max(Q(s, A_π), V_MC(s)) − mean Q(s, A_D)``.

    Args:
        q_policy: (K, B) Q of the policy's chunks; q_data: (K, B) Q of the dataset's chunks;
        v_mc: (B,) Monte-Carlo value lower bound in critic units.
    Returns:
        scalar float32 (gradient flows into both Q terms; none where V_MC wins the max).
    """
    return torch.maximum(q_policy, v_mc.unsqueeze(0)).mean() - q_data.mean()


def _flatten_prefixes(obs: Obs) -> Obs:
    """{key: (B, h, ...)} -> {key: (B*h, ...)}; instruction strings (B, h) object arrays become lists."""
    out = {}
    for key, value in obs.items():
        if isinstance(value, torch.Tensor):
            out[key] = value.reshape(-1, *value.shape[2:])
        else:
            out[key] = list(value.reshape(-1))
    return out


class CORFTAgent(BCAnchoredActing):
    """CO-RFT agent (module docstring).

    Args:
        policy: behaviour flow (FlowPolicy; the VLA with ``policy.kind=vla``), BC-trained, warm-startable.
        critic: :class:`PrefixChunkCritic`; a Polyak target copy is made here.
        one_step_policy: μ_ω(obs, z (B, h, d)) -> (B, h, d) normalised (unclipped), the acting policy.
        cfg: ``OfflineRLConfig`` (lr, gamma, tau, normalize_q_loss, reward_norm/reward_range,
            terminal_chunks).
        corft_cfg: ``CORFTConfig`` (lambda_bc, cal_ql_alpha).

    Batches need the per-prefix fields of :class:`robot_rl.data.training.sampler.ChunkSampler`
    (``prefixes=True``) and, with ``cal_ql_alpha > 0``, ``mc_returns``/``mc_discounts``.

    Raises:
        ValueError: negative ``lambda_bc`` or ``cal_ql_alpha``; a bad reward map; unknown terminal_chunks;
            in :meth:`update`, a batch without the per-prefix fields (names them).
    """

    method = "corft"

    def __init__(
        self, policy: FlowPolicy, critic: PrefixChunkCritic, one_step_policy: OneStepPolicy, cfg, corft_cfg
    ):
        for key in ("lambda_bc", "cal_ql_alpha"):
            value = getattr(corft_cfg, key)
            if not value >= 0:
                raise ValueError(f"corft.{key}={value}: must be >= 0")
        if cfg.terminal_chunks not in TERMINAL_CHUNKS:
            raise ValueError(f"offline.terminal_chunks={cfg.terminal_chunks!r}; expected {TERMINAL_CHUNKS}")
        check_success_value(cfg.success_value, cfg.reward_norm, cfg.gamma)
        super().__init__(policy, critic, one_step_policy, cfg)
        self.corft_cfg = corft_cfg

    def _pi(self, obs: Obs, b: int) -> torch.Tensor:
        return self.policy.clip_normalized(self.one_step(obs, self._noise(b)))

    @torch.no_grad()
    def prefix_targets(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(y (B, h), weights (B, h)) of the per-prefix critic loss for a torch batch."""
        missing = [k for k in PREFIX_KEYS if k not in batch]
        if missing:
            raise ValueError(
                f"CO-RFT batches need the per-prefix fields {missing} (ChunkSampler(prefixes=True)); "
                f"the batch has {sorted(batch)}"
            )
        b, h = batch["step_rewards"].shape
        pobs = _flatten_prefixes(batch["prefix_observations"])
        next_q = self.target_critic.q_agg(self.target_critic(pobs, self._pi(pobs, b * h))).reshape(b, h)
        shift, scale = self.reward_affine
        valid = batch["valid"]
        rewards = scale * (batch["step_rewards"].float() - shift) * valid
        dones = batch["step_dones"].float()
        y = prefix_targets(
            rewards, dones, next_q, self.cfg.gamma, self._absorbing(batch, "step_success", "step_rewards")
        )
        weight = batch["prefix_critic_valid"].float()
        if self.cfg.terminal_chunks == "keep":
            weight = torch.maximum(weight, torch.cummax(dones, dim=1).values)
        return y, weight

    def _absorbing(self, batch: dict, weight_key: str, reward_key: str) -> torch.Tensor | None:
        """:func:`~robot_rl.algos.targets.success_tail` of ``batch``'s prefix steps (``step_success``) or
        Monte-Carlo return (``mc_success_discount``) under this agent's reward map; None without them."""
        cfg = self.cfg
        return success_tail(
            batch, cfg.success_value, self.reward_affine, cfg.reward_range, cfg.gamma, weight_key, reward_key
        )

    def critic_losses(self, batch: dict, obs: Obs, actions_norm: torch.Tensor) -> dict[str, torch.Tensor]:
        """``critic_loss`` (TD + α·Cal-QL) and its parts; ``q`` (K, B, h) prefix values, ``y`` (B, h)."""
        y, weight = self.prefix_targets(batch)
        feat = self.critic.features(obs)
        q = self.critic.prefix_q_from_features(feat, actions_norm)
        td = ((q - y.unsqueeze(0)) ** 2 * weight.unsqueeze(0)).mean()
        out = {"td_loss": td, "q": q, "y": y, "critic_loss": td}
        alpha = self.corft_cfg.cal_ql_alpha
        if alpha > 0:
            if "mc_returns" not in batch or "mc_discounts" not in batch:
                raise ValueError("corft.cal_ql_alpha > 0 needs 'mc_returns' and 'mc_discounts' in the batch")
            shift, scale = self.reward_affine
            v_mc = scale * (batch["mc_returns"].float() - shift * batch["mc_discounts"].float())
            absorbing = self._absorbing(batch, "mc_success_discount", "mc_success_reward")
            if absorbing is not None:
                v_mc = v_mc + absorbing
            with torch.no_grad():
                pi = self._pi(obs, actions_norm.shape[0])
            cal = cal_ql_term(self.critic.q_from_features(feat, pi), q[..., -1], v_mc)
            out.update(cal_ql=cal, critic_loss=td + alpha * cal)
        return out

    def actor_losses(
        self, obs: Obs, actions_norm: torch.Tensor, valid: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The TD3+BC actor terms (scalars with grad) and ``actor_loss`` = flow BC + q_loss + λ·bc_l2."""
        flow_bc = self.policy.bc_loss(obs, actions_norm, valid)
        mu = self.one_step(obs, self._noise(actions_norm.shape[0]))
        q = self.critic(obs, self.policy.clip_normalized(mu)).mean(0)
        q_loss = -q.mean()
        if self.cfg.normalize_q_loss:
            q_loss = q_loss / q.abs().mean().detach().clamp_min(1e-6)
        w = valid.unsqueeze(-1).expand_as(mu)
        bc_l2 = ((mu - actions_norm) ** 2 * w).sum() / w.sum().clamp_min(1.0)
        actor_loss = flow_bc + q_loss + self.corft_cfg.lambda_bc * bc_l2
        return {"actor_loss": actor_loss, "flow_bc_loss": flow_bc, "q_loss": q_loss, "bc_l2": bc_l2}

    def update(self, batch: dict) -> dict[str, float]:
        """One prefix-critic step, one actor step, one Polyak step. Returns float metrics."""
        obs, valid = batch["observations"], batch["valid"]
        actions_norm = prepare_actions(self.policy, batch["actions"], valid, obs)
        self.train()
        closs = self.critic_losses(batch, obs, actions_norm)
        opt = self.optimizers["critic"]
        opt.zero_grad(set_to_none=True)
        closs["critic_loss"].backward()
        opt.step()

        losses = self.actor_losses(obs, actions_norm, valid)
        actor_step(self.optimizers, losses["actor_loss"])

        polyak_update(self.target_critic, self.critic, self.cfg.tau)
        out = {k: float(v.detach()) for k, v in losses.items()}
        q = closs["q"].detach()
        out.update(
            critic_loss=float(closs["critic_loss"].detach()),
            td_loss=float(closs["td_loss"].detach()),
            q_mean=float(q[..., -1].mean()),
            q1_mean=float(q[..., 0].mean()),
            target_mean=float(closs["y"].mean()),
        )
        if "cal_ql" in closs:
            out["cal_ql"] = float(closs["cal_ql"].detach())
        return out
