"""Algorithm registry: each method name (``bc``, ``qc``, ...) with its config section(s), its builder and
what its training needs from the data.

Adding an algorithm is one new file (the agent, a subclass of :class:`robot_rl.algos.base.Agent`, and its
builder) plus one :func:`register` line (the built-in ones at the end of this module). A builder receives
:class:`Networks` (the observation encoders and policy networks, built by ``robot_rl.policies.factory``)
and the method's config sections, so the core never imports ``robot_rl.policies`` (docs/design.md §2).
This module loads no torch and imports no config: a built-in builder is named as ``"module:function"`` and
imported when an agent is first built (:meth:`Algorithm.make`), and a method's config sections are named by
their ``PipelineConfig`` fields (their dataclasses: :func:`robot_rl.config.section_class`), so
``robot_rl.config`` imports this module to check ``offline.method`` at load (:func:`offline_methods`)
without an import cycle.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from robot_rl import keys

if TYPE_CHECKING:
    import torch
    from torch import nn

    from robot_rl.algos.base import Agent
    from robot_rl.algos.protocols import FlowPolicy, ObsEncoder, OneStepPolicy
    from robot_rl.checkpoint import CheckpointHeader
    from robot_rl.config import PipelineConfig, PolicyConfig
    from robot_rl.data.normalize import FeatureStats


class Networks(Protocol):
    """The networks a builder may ask for; each call builds a fresh module (except :meth:`policy`) on the
    build's device, so the order of calls fixes the order of random initialisations."""

    action_dim: int
    """d, the action dimension."""
    horizon: int
    """h, the chunk length (``policy.horizon``)."""

    def policy(self) -> FlowPolicy:
        """The flow chunk policy (built on the first call, the same module afterwards)."""
        ...

    def encoder(self, on_trunk: bool = False) -> ObsEncoder:
        """A fresh observation encoder (B, F); ``on_trunk`` on a VLA policy: features of its trunk
        (stop-gradient) instead."""
        ...

    def one_step(self, on_trunk: bool = False) -> OneStepPolicy:
        """The FQL one-step policy mu(s, z) (B, h, d) on a fresh encoder (see :meth:`encoder`), an MLP of
        ``policy.hidden_dims``."""
        ...

    def gaussian_actor(self, hidden_dims: Sequence[int]) -> nn.Module:
        """SAC's tanh-Gaussian actor on a fresh encoder, single steps (B, 1, d)."""
        ...

    def policy_width(self) -> int:
        """The width of the policy's conditioning features: its encoder's feature dim, or a VLA's token
        width."""
        ...

    def place(self, module: nn.Module) -> nn.Module:
        """``module`` moved to the build's device."""
        ...


class AgentFactory(Protocol):
    """What the core's training loops and online runtime ask of the networks' side: build a registered
    method's agent with the policy networks, reload a checkpoint, warm-start from BC. The edge (the stages,
    the CLI, the actor builder, the ROS 2 nodes) passes the module :mod:`robot_rl.policies.factory`, which
    implements it, so the core never imports ``robot_rl.policies`` (docs/design.md §2). Each method is the
    module's function of the same name; see there for the arguments, shapes and errors.
    """

    def build_agent(
        self,
        method: str,
        policy_cfg: PolicyConfig,
        algo_cfg: Any,
        obs_shapes: dict[str, tuple[int, ...]],
        action_dim: int,
        stats: dict[str, FeatureStats],
        encoder_factory: Callable[[], nn.Module] | None = None,
        device: str | torch.device = "cpu",
        **section_cfgs: Any,
    ) -> Agent:
        """The agent of ``method`` from its config section(s). Raises ValueError (unknown method)."""
        ...

    def build_agent_from_config(
        self,
        method: str,
        cfg: PipelineConfig,
        obs_shapes: dict[str, tuple[int, ...]],
        action_dim: int,
        stats: dict[str, FeatureStats],
        device: str | torch.device = "cpu",
        encoder_factory: Callable[[], nn.Module] | None = None,
    ) -> Agent:
        """:meth:`build_agent` with ``cfg.policy`` and the method's sections of ``cfg``."""
        ...

    def load_agent(
        self,
        path: str | Path,
        device: str | torch.device = "cpu",
        *,
        evaluate: bool = False,
        seed: int | None = None,
        obs_shapes: dict[str, tuple[int, ...]] | None = None,
        action_dim: int | None = None,
        load_optimizer: bool = False,
    ) -> tuple[Agent, CheckpointHeader]:
        """The agent of the checkpoint at ``path`` and its header. Raises FileNotFoundError /
        CheckpointError."""
        ...

    def warm_start_from_bc(self, agent: Agent, bc_checkpoint: str | Path) -> None:
        """Load a BC checkpoint's flow policy into ``agent.policy``. Raises FileNotFoundError /
        CheckpointError."""
        ...


Builder = Callable[..., "Agent"]
"""``build(networks, *section_configs) -> Agent``, section configs in :attr:`Algorithm.sections` order."""


@dataclass(frozen=True)
class Algorithm:
    """One registered method.

    Attributes:
        name: the method name (``offline.method``, a checkpoint's ``method``).
        sections: the ``PipelineConfig`` field of each config section the builder takes, the method's own
            first (its agent's ``cfg``); a field's dataclass is :func:`robot_rl.config.section_class`.
        build: the builder (:data:`Builder`), or ``"module:function"`` naming it (imported by :meth:`make`).
        labels: dataset label columns its training reads (RECAP: ``next.success``).
        prefix_targets: whether its training batches carry per-prefix targets (CO-RFT).
        offline: whether it is a choice of ``offline.method`` (``robot-rl train --algo offline``); the config
            check at load accepts exactly the registered ones (:func:`offline_methods`).
    """

    name: str
    sections: tuple[str, ...]
    build: Builder | str
    labels: tuple[str, ...] = ()
    prefix_targets: bool = False
    offline: bool = False

    def make(self, networks: Networks, *configs: Any) -> Agent:
        """``build(networks, *configs)``: the agent, its builder imported first when named by a string.

        Raises:
            ModuleNotFoundError / AttributeError: ``build`` names no module or no such function.
        """
        build = self.build
        if isinstance(build, str):
            module, _, function = build.partition(":")
            build = getattr(importlib.import_module(module), function)
        return build(networks, *configs)

    @property
    def section(self) -> str:
        """The ``PipelineConfig`` field of the method's own hyper-parameters."""
        return self.sections[0]


_REGISTRY: dict[str, Algorithm] = {}
"""The registered methods; the built-in ones are registered when ``robot_rl.algos`` is imported."""


def register(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm``; returns it.

    Raises:
        ValueError: a method of that name is already registered.
    """
    if algorithm.name in _REGISTRY:
        raise ValueError(f"algorithm {algorithm.name!r} is already registered")
    _REGISTRY[algorithm.name] = algorithm
    return algorithm


def names() -> tuple[str, ...]:
    """Every registered method name, in registration order."""
    return tuple(_REGISTRY)


def offline_methods() -> tuple[str, ...]:
    """The registered choices of ``offline.method`` (:attr:`Algorithm.offline`), in registration order."""
    return tuple(name for name, algo in _REGISTRY.items() if algo.offline)


def algorithm(name: str) -> Algorithm:
    """The registered method ``name``.

    Raises:
        ValueError: no such method (names the registered ones).
    """
    registry = _REGISTRY
    if name not in registry:
        raise ValueError(f"unknown method {name!r}; expected one of {tuple(registry)}")
    return registry[name]


BUILTIN = "robot_rl.algos.builtin"
register(Algorithm("bc", ("bc",), f"{BUILTIN}:build_bc"))
register(Algorithm("qc", ("offline",), f"{BUILTIN}:build_qc", offline=True))
register(Algorithm("qc_fql", ("offline",), f"{BUILTIN}:build_qc_fql", offline=True))
register(
    Algorithm("corft", ("offline", "corft"), f"{BUILTIN}:build_corft", prefix_targets=True, offline=True)
)
register(Algorithm("sac", ("sac",), f"{BUILTIN}:build_sac"))
register(Algorithm("ppo", ("ppo",), f"{BUILTIN}:build_ppo"))
register(Algorithm("recap", ("recap",), f"{BUILTIN}:build_recap", labels=(keys.SUCCESS,), offline=True))
