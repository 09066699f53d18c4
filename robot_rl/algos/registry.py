"""Algorithm registry: each method name (``bc``, ``qc``, ...) with its config section(s), its builder and
what its training needs from the data.

Adding an algorithm is one new file (the agent, a subclass of :class:`robot_rl.algos.base.Agent`, and its
builder) plus one :func:`register` line in :mod:`robot_rl.algos.builtin`. A builder receives
:class:`Networks` (the observation encoders and policy networks, built by ``robot_rl.policies.factory``)
and the method's config sections, so the core never imports ``robot_rl.policies`` (docs/design.md §2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from torch import nn

from robot_rl.algos.base import Agent
from robot_rl.algos.protocols import FlowPolicy, ObsEncoder, OneStepPolicy


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


Builder = Callable[..., Agent]
"""``build(networks, *section_configs) -> Agent``, section configs in :attr:`Algorithm.sections` order."""


@dataclass(frozen=True)
class Algorithm:
    """One registered method.

    Attributes:
        name: the method name (``offline.method``, a checkpoint's ``method``).
        sections: ``(PipelineConfig field, its dataclass)`` of each config section the builder takes, the
            method's own first (its agent's ``cfg``).
        build: the builder (:data:`Builder`).
        labels: dataset label columns its training reads (RECAP: ``next.success``).
        prefix_targets: whether its training batches carry per-prefix targets (CO-RFT).
    """

    name: str
    sections: tuple[tuple[str, type], ...]
    build: Builder
    labels: tuple[str, ...] = ()
    prefix_targets: bool = False

    @property
    def section(self) -> str:
        """The ``PipelineConfig`` field of the method's own hyper-parameters."""
        return self.sections[0][0]


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


def algorithm(name: str) -> Algorithm:
    """The registered method ``name``.

    Raises:
        ValueError: no such method (names the registered ones).
    """
    registry = _REGISTRY
    if name not in registry:
        raise ValueError(f"unknown method {name!r}; expected one of {tuple(registry)}")
    return registry[name]
