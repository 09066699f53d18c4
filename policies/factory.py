"""Wiring: build policies, critics and agents by method name, save them and rebuild them from a checkpoint.

This is where ``robot_rl.policies`` (networks) meets ``robot_rl.algos`` (core algorithms), so the core
never imports the policies package (DESIGN.md §2).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import draccus
import torch
from torch import nn

from robot_rl.algos import ChunkCritic, FlowBC, QCAgent, QCFQLAgent, SACAgent
from robot_rl.algos.base import Agent
from robot_rl.algos.corft import CORFTAgent, PrefixChunkCritic
from robot_rl.algos.flow_ppo import FlowPPOAgent
from robot_rl.algos.recap import DistributionalValue, IndicatorConditioner, RECAPAgent
from robot_rl.config import (
    BCConfig,
    CORFTConfig,
    OfflineRLConfig,
    PipelineConfig,
    PolicyConfig,
    PPOConfig,
    RecapConfig,
    SACConfig,
)
from robot_rl.data.normalize import FeatureStats

from .checkpoint import (
    CheckpointError,
    check_compatible,
    load_checkpoint,
    load_extra_state,
    load_module_state,
    require_shapes,
    save_checkpoint,
    weights_mismatch,
)
from .encoders import ObservationEncoder
from .flow import FlowChunkPolicy
from .gaussian import GaussianTanhPolicy
from .one_step import OneStepChunkPolicy

METHODS = ("bc", "qc", "qc_fql", "corft", "sac", "ppo", "recap")
# config section (and its dataclass) holding each method's hyper-parameters; the rest use ``offline``
_ALGO_SECTIONS = {
    "bc": ("bc", BCConfig),
    "sac": ("sac", SACConfig),
    "ppo": ("ppo", PPOConfig),
    "recap": ("recap", RecapConfig),
}
EncoderFactory = Callable[[], nn.Module]


def default_encoder_factory(
    obs_shapes: dict[str, tuple[int, ...]],
    stats: dict[str, FeatureStats],
    image_features: int = 64,
    tasks: list[str] | None = None,
) -> EncoderFactory:
    """A factory producing fresh :class:`ObservationEncoder` instances (one per network)."""
    return lambda: ObservationEncoder(
        obs_shapes, stats, image_features=image_features, hidden=32, tasks=tasks
    )


def build_policy(
    policy_cfg: PolicyConfig,
    obs_shapes: dict[str, tuple[int, ...]],
    action_dim: int,
    stats: dict[str, FeatureStats],
    encoder_factory: EncoderFactory | None = None,
) -> FlowChunkPolicy:
    """The flow chunk policy ``policy_cfg.kind`` names: ``flow`` (:class:`FlowChunkPolicy` on the
    encoder from ``encoder_factory``) or ``vla`` (:class:`robot_rl.policies.vla.VLAPolicy`, a subclass,
    which loads its VLM backbone from ``policy.vla.vlm``).

    Raises:
        ValueError: unknown ``policy.kind``; the VLA policy's errors (a missing extra, an unloadable VLM).
    """
    if policy_cfg.kind == "vla":
        from .vla import VLAPolicy

        return VLAPolicy(policy_cfg, obs_shapes, action_dim, stats)
    if policy_cfg.kind != "flow":
        raise ValueError(f"unknown policy.kind {policy_cfg.kind!r}; expected 'flow' or 'vla'")
    factory = encoder_factory or default_encoder_factory(
        obs_shapes, stats, policy_cfg.image_features, policy_cfg.tasks
    )
    return FlowChunkPolicy(policy_cfg, obs_shapes, action_dim, stats, encoder=factory())


def build_agent(
    method: str,
    policy_cfg: PolicyConfig,
    offline_cfg: OfflineRLConfig | BCConfig | SACConfig,
    obs_shapes: dict[str, tuple[int, ...]],
    action_dim: int,
    stats: dict[str, FeatureStats] | None = None,
    encoder_factory: EncoderFactory | None = None,
    device: str | torch.device = "cpu",
    corft_cfg: CORFTConfig | None = None,
) -> Agent:
    """Build ``bc`` (FlowBC; ``offline_cfg`` may be a BCConfig, only ``lr`` is used), ``ppo``
    (FlowPPOAgent, π_RL; ``offline_cfg`` is a PPOConfig), ``recap`` (RECAPAgent; ``offline_cfg`` is a
    RecapConfig; the value gets its own encoder, the indicator embedding the policy's feature width),
    ``qc`` (QCAgent), ``qc_fql`` (QCFQLAgent), ``corft`` (CORFTAgent; ``corft_cfg`` default
    :class:`CORFTConfig`) or ``sac`` (SACAgent; ``offline_cfg`` is a SACConfig and ``policy_cfg.horizon``
    must be 1). Each network (policy, critic, one-step policy) gets its own encoder from
    ``encoder_factory()`` (default: :class:`ObservationEncoder`), except ``corft`` (and ``qc`` /
    ``qc_fql`` with ``offline_cfg.critic_on_trunk``) on a VLA policy, whose critic and one-step policy
    read the VLA's trunk (stop-gradient). Modules are moved to ``device``.

    Also callable as ``build_agent(method, pipeline_cfg, obs_shapes, action_dim, stats, device=...)`` with a
    ``PipelineConfig`` (same as :func:`build_agent_from_config`).

    Raises:
        ValueError: unknown method; ``sac`` with ``policy.horizon`` != 1.
    """
    if isinstance(policy_cfg, PipelineConfig):  # build_agent(method, cfg, obs_shapes, action_dim, stats)
        return build_agent_from_config(
            method, policy_cfg, offline_cfg, obs_shapes, action_dim, device, encoder_factory
        )
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    if stats is None:
        raise TypeError("build_agent needs stats (normalization statistics per feature)")
    factory = encoder_factory or default_encoder_factory(
        obs_shapes, stats, policy_cfg.image_features, policy_cfg.tasks
    )
    if method == "sac":
        return _build_sac(policy_cfg, offline_cfg, action_dim, stats, factory, device)
    policy = build_policy(policy_cfg, obs_shapes, action_dim, stats, factory).to(device)
    if method == "bc":
        return FlowBC(policy, offline_cfg)
    if method == "ppo":
        return FlowPPOAgent(policy, offline_cfg)
    if method == "recap":
        value = DistributionalValue(factory(), offline_cfg.value_hidden_dims, offline_cfg.value_bins)
        width = policy.expert.width if policy_cfg.kind == "vla" else policy.feature_dim  # VLA: token width
        conditioner = IndicatorConditioner(width)
        return RECAPAgent(policy, value.to(device), conditioner.to(device), offline_cfg)
    on_trunk = method == "corft" or getattr(offline_cfg, "critic_on_trunk", False)
    if on_trunk and policy_cfg.kind == "vla":  # critic and one-step heads on the VLA trunk
        factory = _trunk_factory(policy)
    critic = (PrefixChunkCritic if method == "corft" else ChunkCritic)(
        factory(),
        action_dim,
        policy_cfg.horizon,
        offline_cfg.critic_hidden_dims,
        num_critics=offline_cfg.num_critics,
        agg=offline_cfg.critic_agg,
    ).to(device)
    if method == "qc":
        return QCAgent(policy, critic, offline_cfg)
    one_step = OneStepChunkPolicy(factory(), action_dim, policy_cfg.horizon, policy_cfg.hidden_dims).to(
        device
    )
    if method == "corft":
        return CORFTAgent(policy, critic, one_step, offline_cfg, corft_cfg or CORFTConfig())
    return QCFQLAgent(policy, critic, one_step, offline_cfg)


def _trunk_factory(policy: nn.Module) -> EncoderFactory:
    """Encoders reading the VLA policy's own trunk (:class:`robot_rl.policies.vla.trunk.VLATrunkFeatures`)."""
    from .vla.trunk import VLATrunkFeatures

    return lambda: VLATrunkFeatures(policy)


def _build_sac(policy_cfg, sac_cfg, action_dim, stats, factory, device) -> SACAgent:
    if policy_cfg.horizon != 1:
        raise ValueError(
            f"method 'sac' acts on single steps: policy.horizon must be 1, got {policy_cfg.horizon}"
        )
    actor = GaussianTanhPolicy(
        factory(),
        action_dim,
        sac_cfg.actor_hidden_dims,
        stats,
        normalization=policy_cfg.normalization,
        action_low=policy_cfg.action_low,
        action_high=policy_cfg.action_high,
    ).to(device)
    critic = ChunkCritic(
        factory(),
        action_dim,
        1,
        sac_cfg.critic_hidden_dims,
        num_critics=sac_cfg.num_critics,
        agg=sac_cfg.critic_agg,
    ).to(device)
    return SACAgent(actor, critic, sac_cfg)


def build_agent_from_config(
    method: str,
    cfg,
    obs_shapes: dict[str, tuple[int, ...]],
    action_dim: int,
    stats: dict[str, FeatureStats],
    device: str | torch.device = "cpu",
    encoder_factory: EncoderFactory | None = None,
) -> Agent:
    """:func:`build_agent` from a ``PipelineConfig`` (uses ``cfg.policy`` and ``cfg.bc`` for ``bc``,
    ``cfg.sac`` for ``sac``, ``cfg.ppo`` for ``ppo``, ``cfg.recap`` for ``recap``, else ``cfg.offline``)."""
    algo_cfg = getattr(cfg, _ALGO_SECTIONS.get(method, ("offline",))[0])
    return build_agent(
        method, cfg.policy, algo_cfg, obs_shapes, action_dim, stats, encoder_factory, device, cfg.corft
    )


def save_agent(
    path: str | Path,
    agent: Agent,
    config: dict,
    stats: dict[str, FeatureStats],
    obs_shapes: dict[str, tuple[int, ...]],
    action_dim: int,
    include_optimizer: bool = False,
    extra_state: dict | None = None,
) -> Path:
    """Checkpoint an agent. ``config`` is the full config dict (``config_to_dict(PipelineConfig)``: needs
    ``policy`` and ``offline`` or ``bc`` sections); ``method`` is added. With ``include_optimizer`` the
    optimizer state goes into ``extra_state['optimizers']`` (extra_state.*)."""
    cfg = dict(config)
    cfg["method"] = agent.method
    state = dict(extra_state or {})
    if include_optimizer:
        state["optimizers"] = agent.optimizer_state()
    return save_checkpoint(
        path, agent.modules(), cfg, stats, state or None, obs_shapes=obs_shapes, action_dim=action_dim
    )


def _section(config: dict, name: str, cls):
    return draccus.decode(cls, config.get(name) or {})


def load_agent(
    path: str | Path,
    method: str | None = None,
    device: str | torch.device = "cpu",
    load_optimizer: bool = False,
    obs_shapes: dict[str, tuple[int, ...]] | None = None,
    action_dim: int | None = None,
) -> tuple[Agent, dict, dict[str, FeatureStats]]:
    """Rebuild an agent from a checkpoint -> (agent, config dict, stats).

    ``method`` defaults to the checkpoint's. If ``obs_shapes``/``action_dim`` (of the env/dataset) are given
    they are checked against the checkpoint.

    Raises:
        FileNotFoundError: a checkpoint file is missing (named).
        CheckpointError: a file is corrupt, the env's/dataset's shapes differ from the checkpoint's (names
            the key and both shapes), or the weights do not fit the network its config.json describes.
    """
    state_dicts, config, stats = load_checkpoint(path)
    require_shapes(config)
    if obs_shapes is not None:
        action_dim = action_dim if action_dim is not None else config["action_dim"]
        check_compatible(config, obs_shapes, action_dim, where=path)
    method = method or config.get("method", "bc")
    policy_cfg = _section(config, "policy", PolicyConfig)
    algo_cfg = _section(config, *_ALGO_SECTIONS.get(method, ("offline", OfflineRLConfig)))
    shapes = {k: tuple(v) for k, v in config["obs_shapes"].items()}
    corft_cfg = _section(config, "corft", CORFTConfig)
    agent = build_agent(
        method,
        policy_cfg,
        algo_cfg,
        shapes,
        int(config["action_dim"]),
        stats,
        device=device,
        corft_cfg=corft_cfg,
    )
    for name, module in agent.modules().items():
        if name not in state_dicts:
            raise CheckpointError(f"{Path(path) / 'model.safetensors'} has no weights for module {name!r}")
        load_module_state(module, state_dicts[name], f"{Path(path) / 'model.safetensors'} ({name})")
    if load_optimizer:
        extra = load_extra_state(path)
        if not extra or "optimizers" not in extra:
            raise FileNotFoundError(f"checkpoint {path} has no optimizer state (extra_state.*)")
        agent.load_optimizer_state(extra["optimizers"])
    return agent, config, stats


def load_policy(path: str | Path, device: str | torch.device = "cpu") -> tuple[FlowChunkPolicy, dict, dict]:
    """Rebuild only the flow policy (module ``policy``) from a checkpoint -> (policy, config, stats)."""
    state_dicts, config, stats = load_checkpoint(path)
    if "policy" not in state_dicts:
        raise CheckpointError(f"{Path(path) / 'model.safetensors'} has no 'policy' weights")
    require_shapes(config)
    policy = build_policy(
        _section(config, "policy", PolicyConfig),
        {k: tuple(v) for k, v in config["obs_shapes"].items()},
        int(config["action_dim"]),
        stats,
    ).to(device)
    load_module_state(policy, state_dicts["policy"], f"{Path(path) / 'model.safetensors'} (policy)")
    return policy, config, stats


def warm_start_from_bc(agent: Agent, bc_checkpoint: str | Path) -> None:
    """Load the BC-trained flow policy weights (module ``policy`` of a BC checkpoint) into ``agent.policy``.

    Raises:
        FileNotFoundError: checkpoint missing; CheckpointError: a file is corrupt, or the BC checkpoint's obs
        shapes / action dim / horizon differ from the agent's (names the key and both values).
    """
    state_dicts, config, _ = load_checkpoint(bc_checkpoint)
    policy = agent.policy
    enc = getattr(policy, "encoder", policy)  # a VLAPolicy has no encoder and holds obs_shapes itself
    check_compatible(
        config, getattr(enc, "obs_shapes", {}), policy.action_dim, where=bc_checkpoint, horizon=policy.horizon
    )
    model_file = Path(bc_checkpoint) / "model.safetensors"
    if "policy" not in state_dicts:
        raise CheckpointError(f"{model_file} has no 'policy' weights")
    try:
        agent.load_policy_state(state_dicts["policy"])
    except RuntimeError as err:
        raise weights_mismatch(err, f"{model_file} (policy)") from err
