"""Wiring: build policies, critics and agents by method name, save them and rebuild them from a checkpoint.

This is where ``robot_rl.policies`` (networks) meets ``robot_rl.algos`` (core algorithms), so the core
never imports the policies package (docs/design.md §2). Methods come from the algorithm registry
(:mod:`robot_rl.algos.registry`); this module gives their builders the networks (:class:`_Networks`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robot_rl.algos.base import Agent
from robot_rl.algos.registry import Algorithm, algorithm, names
from robot_rl.checkpoint import (
    CheckpointError,
    CheckpointHeader,
    check_compatible,
    load_checkpoint,
    save_checkpoint,
    weights_mismatch,
)
from robot_rl.config import PipelineConfig, PolicyConfig, section_class
from robot_rl.data.normalize import FeatureStats

from .encoders import ObservationEncoder
from .flow import FlowChunkPolicy
from .gaussian import GaussianTanhPolicy
from .one_step import OneStepChunkPolicy
from .vla import VLAPolicy
from .vla.trunk import VLATrunkFeatures

METHODS = names()
"""Every registered method (:func:`robot_rl.algos.registry.names`)."""
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
        return VLAPolicy(policy_cfg, obs_shapes, action_dim, stats)
    if policy_cfg.kind != "flow":
        raise ValueError(f"unknown policy.kind {policy_cfg.kind!r}; expected 'flow' or 'vla'")
    factory = encoder_factory or default_encoder_factory(
        obs_shapes, stats, policy_cfg.image_features, policy_cfg.tasks
    )
    return FlowChunkPolicy(policy_cfg, obs_shapes, action_dim, stats, encoder=factory())


class _Networks:
    """:class:`robot_rl.algos.registry.Networks` for one build: encoders from ``encoder_factory`` (default
    :class:`ObservationEncoder`), the policy of ``policy_cfg``, every module moved to ``device``."""

    def __init__(
        self,
        policy_cfg: PolicyConfig,
        obs_shapes: dict[str, tuple[int, ...]],
        action_dim: int,
        stats: dict[str, FeatureStats],
        encoder_factory: EncoderFactory | None,
        device: str | torch.device,
    ) -> None:
        self.action_dim, self.horizon = action_dim, policy_cfg.horizon
        self._kind, self._hidden_dims = policy_cfg.kind, policy_cfg.hidden_dims
        self._cfg, self._shapes, self._stats, self._device = policy_cfg, obs_shapes, stats, device
        self._factory = encoder_factory or default_encoder_factory(
            obs_shapes, stats, policy_cfg.image_features, policy_cfg.tasks
        )
        self._policy: FlowChunkPolicy | None = None

    def policy(self) -> FlowChunkPolicy:
        if self._policy is None:
            policy = build_policy(self._cfg, self._shapes, self.action_dim, self._stats, self._factory)
            self._policy = policy.to(self._device)
        return self._policy

    def encoder(self, on_trunk: bool = False) -> nn.Module:
        if on_trunk and self._kind == "vla":  # critic and one-step heads on the VLA trunk (stop-gradient)
            return VLATrunkFeatures(self.policy())
        return self._factory()

    def one_step(self, on_trunk: bool = False) -> nn.Module:
        return self.place(
            OneStepChunkPolicy(self.encoder(on_trunk), self.action_dim, self.horizon, self._hidden_dims)
        )

    def gaussian_actor(self, hidden_dims: Sequence[int]) -> nn.Module:
        cfg = self._cfg
        actor = GaussianTanhPolicy(
            self._factory(),
            self.action_dim,
            hidden_dims,
            self._stats,
            normalization=cfg.normalization,
            action_low=cfg.action_low,
            action_high=cfg.action_high,
        )
        return self.place(actor)

    def policy_width(self) -> int:
        policy = self.policy()
        return policy.expert.width if self._kind == "vla" else policy.feature_dim

    def place(self, module: nn.Module) -> nn.Module:
        return module.to(self._device)


def _build(
    algo: Algorithm,
    policy_cfg: PolicyConfig,
    configs: Sequence[Any],
    obs_shapes: dict[str, tuple[int, ...]],
    action_dim: int,
    stats: dict[str, FeatureStats],
    encoder_factory: EncoderFactory | None,
    device: str | torch.device,
) -> Agent:
    nets = _Networks(policy_cfg, obs_shapes, action_dim, stats, encoder_factory, device)
    return algo.make(nets, *configs)


def build_agent(
    method: str,
    policy_cfg: PolicyConfig,
    algo_cfg: Any,
    obs_shapes: dict[str, tuple[int, ...]],
    action_dim: int,
    stats: dict[str, FeatureStats],
    encoder_factory: EncoderFactory | None = None,
    device: str | torch.device = "cpu",
    **section_cfgs: Any,
) -> Agent:
    """Build the registered ``method`` (:mod:`robot_rl.algos.builtin`: ``bc``, ``qc``, ``qc_fql``,
    ``corft``, ``sac``, ``ppo``, ``recap``) for observations ``obs_shapes`` and actions of dim
    ``action_dim``, normalised with ``stats``.

    ``algo_cfg`` is the method's own section (``bc``: a BCConfig, only ``lr`` is read; ``qc``/``qc_fql``/
    ``corft``: an OfflineRLConfig; ``sac``: a SACConfig, ``policy.horizon`` must be 1; ``ppo``: a PPOConfig;
    ``recap``: a RecapConfig); a method's further sections come as ``<section>_cfg=`` keywords
    (``corft_cfg=CORFTConfig(...)``; default: the section's defaults). Each network gets its own encoder from
    ``encoder_factory()`` (default: :class:`ObservationEncoder`), except the critic and one-step policy of
    ``corft`` (and of ``qc``/``qc_fql`` with ``critic_on_trunk``) on a VLA policy, which read its trunk.
    Modules are on ``device``.

    Raises:
        ValueError: unknown method; ``sac`` with ``policy.horizon`` != 1.
        TypeError: a ``<section>_cfg`` keyword that is not one of the method's sections.
    """
    algo = algorithm(method)
    extra = {name.removesuffix("_cfg"): cfg for name, cfg in section_cfgs.items()}
    known = list(algo.sections[1:])
    unknown = sorted(set(extra) - set(known))
    if unknown:
        raise TypeError(f"build_agent({method!r}): unknown config sections {unknown}; {method} has {known}")
    configs = [algo_cfg, *(extra.get(field) or section_class(field)() for field in algo.sections[1:])]
    return _build(algo, policy_cfg, configs, obs_shapes, action_dim, stats, encoder_factory, device)


def build_agent_from_config(
    method: str,
    cfg: PipelineConfig,
    obs_shapes: dict[str, tuple[int, ...]],
    action_dim: int,
    stats: dict[str, FeatureStats],
    device: str | torch.device = "cpu",
    encoder_factory: EncoderFactory | None = None,
) -> Agent:
    """:func:`build_agent` with ``cfg.policy`` and the method's sections of the PipelineConfig ``cfg``
    (``cfg.bc`` for ``bc``, ``cfg.offline`` (and ``cfg.corft``) for the offline methods, ...)."""
    algo = algorithm(method)
    configs = [getattr(cfg, field) for field in algo.sections]
    return _build(algo, cfg.policy, configs, obs_shapes, action_dim, stats, encoder_factory, device)


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
    """Checkpoint an agent. ``config`` is the full config dict (``config_to_dict(PipelineConfig)``);
    ``method`` is set to the agent's. With ``include_optimizer`` the optimizer state goes into
    ``extra_state['optimizers']`` (extra_state.*)."""
    cfg = dict(config)
    cfg["method"] = agent.method
    state = dict(extra_state or {})
    if include_optimizer:
        state["optimizers"] = agent.optimizer_state()
    return save_checkpoint(
        path, agent.modules(), cfg, stats, state or None, obs_shapes=obs_shapes, action_dim=action_dim
    )


def load_agent(
    path: str | Path,
    device: str | torch.device = "cpu",
    *,
    evaluate: bool = False,
    seed: int | None = None,
    obs_shapes: dict[str, tuple[int, ...]] | None = None,
    action_dim: int | None = None,
    load_optimizer: bool = False,
) -> tuple[Agent, CheckpointHeader]:
    """Rebuild the agent of a checkpoint -> (agent, its header). The one loader of agents.

    Args:
        path: the checkpoint folder (any format :func:`robot_rl.checkpoint.load_checkpoint` reads).
        device: where the modules go.
        evaluate: put the agent in eval mode and make it act deterministically (:attr:`Agent.deterministic`:
            SAC's mean action), as evaluations and the policy server use it; else it is in train mode.
        seed: seed torch's RNG with it before building (the networks' initial values, overwritten by the
            checkpoint's weights, and the RNG state acting starts from).
        obs_shapes, action_dim: of the env/dataset it will act on, checked against the checkpoint's (extra
            observation keys are fine; ``action_dim`` defaults to the checkpoint's).
        load_optimizer: also restore the optimizer state (``extra_state['optimizers']``).

    Raises:
        FileNotFoundError: a checkpoint file is missing (named); no optimizer state with ``load_optimizer``.
        CheckpointError: a file is corrupt, its format is not one this code reads, the env's/dataset's shapes
            differ from the checkpoint's (names the key and both shapes), or the weights do not fit the
            network its header describes.
    """
    ckpt = load_checkpoint(path, extra_state=load_optimizer)
    header = ckpt.header
    if obs_shapes is not None:
        check_compatible(
            header.config, obs_shapes, header.action_dim if action_dim is None else action_dim, path
        )
    if seed is not None:
        torch.manual_seed(seed)
    configs = list(header.algo_configs.values())
    algo = algorithm(header.method)
    agent = _build(
        algo, header.policy, configs, header.obs_shapes, header.action_dim, ckpt.stats, None, device
    )
    ckpt.load_modules(agent.modules(), path)
    if load_optimizer:
        if not ckpt.extra_state or "optimizers" not in ckpt.extra_state:
            raise FileNotFoundError(f"checkpoint {path} has no optimizer state (extra_state.*)")
        agent.load_optimizer_state(ckpt.extra_state["optimizers"])
    if evaluate:
        agent.eval()
        agent.deterministic = True
    return agent, header


def load_policy(path: str | Path, device: str | torch.device = "cpu") -> tuple[FlowChunkPolicy, dict, dict]:
    """Rebuild only the flow policy (module ``policy``) from a checkpoint -> (policy, config dict, stats).

    Raises:
        FileNotFoundError / CheckpointError: as :func:`load_agent`; no ``policy`` weights.
    """
    ckpt = load_checkpoint(path)
    header = ckpt.header
    policy = build_policy(header.policy, header.obs_shapes, header.action_dim, ckpt.stats).to(device)
    ckpt.load_modules({"policy": policy}, path)
    return policy, header.config, ckpt.stats


def warm_start_from_bc(agent: Agent, bc_checkpoint: str | Path) -> None:
    """Load the BC-trained flow policy weights (module ``policy`` of a BC checkpoint) into ``agent.policy``.

    Raises:
        FileNotFoundError: checkpoint missing; CheckpointError: a file is corrupt, or the BC checkpoint's obs
        shapes / action dim / horizon differ from the agent's (names the key and both values).
    """
    ckpt = load_checkpoint(bc_checkpoint)
    policy = agent.policy
    enc = getattr(policy, "encoder", policy)  # a VLAPolicy has no encoder and holds obs_shapes itself
    check_compatible(
        ckpt.header.config,
        getattr(enc, "obs_shapes", {}),
        policy.action_dim,
        where=bc_checkpoint,
        horizon=policy.horizon,
    )
    model_file = Path(bc_checkpoint) / "model.safetensors"
    if "policy" not in ckpt.weights:
        raise CheckpointError(f"{model_file} has no 'policy' weights")
    try:
        agent.load_policy_state(ckpt.weights["policy"])
    except RuntimeError as err:
        raise weights_mismatch(err, f"{model_file} (policy)") from err
