"""Shared agent plumbing: the small interface every agent exposes, optimizer state for checkpoints."""

from __future__ import annotations

import torch
from torch import nn

from robot_rl.algos.protocols import Obs


class NonFiniteChunkError(ValueError):
    """A policy's chunk holds NaN/inf; nothing of it is executed. Online actors catch exactly this one (a safe
    stop of the episode); any other error from the policy (a bad observation, an unreadable instruction)
    propagates with its own message."""


def check_finite(actions: torch.Tensor, what: str = "policy output") -> torch.Tensor:
    """Raise :class:`NonFiniteChunkError` if ``actions`` holds NaN/inf (policies never emit non-finite actions
    silently)."""
    if not torch.isfinite(actions).all():
        raise NonFiniteChunkError(f"{what} contains NaN or inf; refusing to return it")
    return actions


def prepare_actions(
    policy, actions: torch.Tensor, valid: torch.Tensor, obs: dict | None = None
) -> torch.Tensor:
    """Robot-unit chunks (B, h, d) -> normalised chunks; padded steps (valid == 0) that are NaN/inf become 0.
    ``obs`` (the chunks' first observations) is needed by a policy with relative actions.

    Raises:
        ValueError: a valid step holds NaN/inf; relative actions without their reference in ``obs``.
    """
    a = policy.normalize_actions(actions, obs)
    finite = torch.isfinite(a)
    if not finite.all():
        pad = (valid == 0).unsqueeze(-1)
        if not (finite | pad).all():
            raise ValueError("batch 'actions' contain NaN or inf in valid chunk steps")
        a = torch.where(finite, a, torch.zeros_like(a))
    return a


class Agent:
    """Base: ``update(batch) -> metrics``, ``act(obs) -> (B, h, d)`` robot units, ``modules()``.

    Subclasses set ``self.method`` and ``self.optimizers`` (name -> torch optimizer), and
    ``inference_knobs`` when ``act`` reads a config value an evaluation may change.
    ``batches_per_update``: how many independently drawn batches one update consumes, passed as
    ``update(*batches)``; 1 for every agent except SAC with critic-only updates. ``batch_reuse``: how many
    consecutive updates the training loops feed each drawn batch (k); 1 for every agent except QC with
    ``offline.target_reuse`` = k, which keeps each batch's target picks for its k updates.
    """

    method: str = ""
    batches_per_update: int = 1
    batch_reuse: int = 1
    inference_knobs: tuple[str, ...] = ()
    """Config keys (``section.field`` of ``self.cfg``) that ``act`` reads and an evaluation may override
    (:mod:`robot_rl.eval.inference`)."""
    optimizers: dict[str, torch.optim.Optimizer]
    policy: nn.Module
    critic: nn.Module | None = None
    """The chunk critic Q(s, A) (docs/algorithms.md §3), or None. Training scores its calibration against
    Monte-Carlo returns on held-out episodes (:func:`robot_rl.eval.q_values.q_calibration`, which also reads
    the agent's ``reward_affine``) when set."""
    deterministic: bool = False
    """When True ``act`` returns the policy's mean action instead of exploration samples (SAC); evaluation
    loaders set it (:func:`robot_rl.policies.load_agent` with ``evaluate=True``). Agents whose ``act`` does
    not sample for exploration ignore it."""

    def prepare(self, data, seed: int = 0) -> dict[str, float] | None:
        """Run once on the training data (a :class:`robot_rl.data.training.training_set.TrainingSet`) after
        the modules are built or restored and before the first :meth:`update`; returns metrics to print, or
        None when the agent has nothing to prepare (the default). RECAP fits its value and labels the
        training frames here."""
        return None

    def update(self, batch: dict) -> dict[str, float]:
        raise NotImplementedError

    def act(self, obs: Obs, noise: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    def modules(self) -> dict[str, nn.Module]:
        raise NotImplementedError

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def train(self, mode: bool = True) -> Agent:
        for m in self.modules().values():
            m.train(mode)
        return self

    def eval(self) -> Agent:
        return self.train(False)

    def optimizer_state(self) -> dict:
        """Optimizer state dicts (tensors inside) for ``extra_state`` of a checkpoint."""
        return {name: opt.state_dict() for name, opt in self.optimizers.items()}

    def load_optimizer_state(self, state: dict) -> None:
        for name, opt in self.optimizers.items():
            if name not in state:
                raise KeyError(f"optimizer state for {name!r} not found; have {sorted(state)}")
            opt.load_state_dict(state[name])

    def resume_state(self) -> dict:
        """Training state beyond modules and optimizers that a resumed run needs to continue exactly (tensors,
        numbers, strings, nested dicts; :func:`robot_rl.training.resume.save_resume`); none by default."""
        return {}

    def load_resume_state(self, state: dict) -> None:
        """Restore :meth:`resume_state`'s dict (empty for a checkpoint written without it)."""

    def load_policy_state(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Warm start: load a (BC-trained) flow policy state dict into this agent's policy (strict)."""
        self.policy.load_state_dict(state_dict, strict=True)
