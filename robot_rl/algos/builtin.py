"""The built-in methods' builders; :mod:`robot_rl.algos.registry` registers them by name
(``"module:function"``), so the registry, and the config check of ``offline.method``, load no torch.

Each builder takes :class:`~robot_rl.algos.registry.Networks` and its config sections and returns the agent
(docs/algorithms.md: flow BC §2, QC §3, QC-FQL §4, SAC §5, CO-RFT §6, RECAP §7, π_RL flow PPO §8). The order
of
network calls is the order of random initialisations, so it is part of a seed's numbers.
"""

from __future__ import annotations

from robot_rl.algos.corft import CORFTAgent, PrefixChunkCritic
from robot_rl.algos.critic import ChunkCritic
from robot_rl.algos.flow_bc import FlowBC
from robot_rl.algos.flow_ppo import FlowPPOAgent
from robot_rl.algos.fql import QCFQLAgent
from robot_rl.algos.qc import QCAgent
from robot_rl.algos.recap import DistributionalValue, IndicatorConditioner, RECAPAgent
from robot_rl.algos.registry import Networks
from robot_rl.algos.sac import SACAgent
from robot_rl.config import (
    BCConfig,
    CORFTConfig,
    OfflineRLConfig,
    PPOConfig,
    RecapConfig,
    SACConfig,
)


def build_bc(nets: Networks, cfg: BCConfig) -> FlowBC:
    """Flow BC on the flow policy (``cfg`` may be any config with ``lr``)."""
    return FlowBC(nets.policy(), cfg)


def _critic(nets: Networks, cfg: OfflineRLConfig, cls: type[ChunkCritic], on_trunk: bool) -> ChunkCritic:
    critic = cls(
        nets.encoder(on_trunk),
        nets.action_dim,
        nets.horizon,
        cfg.critic_hidden_dims,
        num_critics=cfg.num_critics,
        agg=cfg.critic_agg,
    )
    return nets.place(critic)


def _on_trunk(cfg: OfflineRLConfig) -> bool:
    """``critic_on_trunk`` resolved: unset (None) reads the trunk, which :meth:`Networks.encoder` does only
    for a VLA policy (any other policy kind keeps its own encoder)."""
    return cfg.critic_on_trunk is not False


def build_qc(nets: Networks, cfg: OfflineRLConfig) -> QCAgent:
    """QC best-of-N: the flow policy and a chunk critic (a VLA's: on its trunk unless
    ``critic_on_trunk=false``)."""
    policy = nets.policy()
    return QCAgent(policy, _critic(nets, cfg, ChunkCritic, _on_trunk(cfg)), cfg)


def build_qc_fql(nets: Networks, cfg: OfflineRLConfig) -> QCFQLAgent:
    """QC-FQL: the flow policy, a chunk critic and the one-step policy."""
    policy = nets.policy()
    on_trunk = _on_trunk(cfg)
    critic = _critic(nets, cfg, ChunkCritic, on_trunk)
    return QCFQLAgent(policy, critic, nets.one_step(on_trunk), cfg)


def build_corft(nets: Networks, cfg: OfflineRLConfig, corft_cfg: CORFTConfig) -> CORFTAgent:
    """CO-RFT: the flow policy, a per-prefix critic and the one-step policy, both on a VLA's trunk."""
    policy = nets.policy()
    critic = _critic(nets, cfg, PrefixChunkCritic, True)
    return CORFTAgent(policy, critic, nets.one_step(True), cfg, corft_cfg)


def build_sac(nets: Networks, cfg: SACConfig) -> SACAgent:
    """SAC (HIL-SERL): a tanh-Gaussian actor and a single-step critic.

    Raises:
        ValueError: ``policy.horizon`` != 1.
    """
    if nets.horizon != 1:
        raise ValueError(f"method 'sac' acts on single steps: policy.horizon must be 1, got {nets.horizon}")
    actor = nets.gaussian_actor(cfg.actor_hidden_dims)
    critic = ChunkCritic(
        nets.encoder(),
        nets.action_dim,
        1,
        cfg.critic_hidden_dims,
        num_critics=cfg.num_critics,
        agg=cfg.critic_agg,
    )
    return SACAgent(actor, nets.place(critic), cfg)


def build_ppo(nets: Networks, cfg: PPOConfig) -> FlowPPOAgent:
    """π_RL flow PPO on the flow policy."""
    return FlowPPOAgent(nets.policy(), cfg)


def build_recap(nets: Networks, cfg: RecapConfig) -> RECAPAgent:
    """RECAP: the flow policy, a distributional value on its own encoder, the indicator embedding."""
    policy = nets.policy()
    value = DistributionalValue(nets.encoder(), cfg.value_hidden_dims, cfg.value_bins)
    conditioner = IndicatorConditioner(nets.policy_width())
    return RECAPAgent(policy, nets.place(value), nets.place(conditioner), cfg)
