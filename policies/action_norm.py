"""Action normalisation shared by the policies: robot units <-> the normalised space [-1, 1] policies act in.

The maps are ``a_norm = (a - offset) / scale`` with (offset, scale) from the dataset's action statistics
(``mean_std`` or ``quantile``: q01 -> -1, q99 -> +1; docs/design.md §3). They are stored as buffers
``action_offset`` and ``action_scale``, so a checkpoint carries them.

Policies act inside the normalised image of the **action box** [low, high] (robot units), not inside
[-1, 1]: [-1, 1] is the demos' q01..q99 (or mean ± 1 std), so clipping there would keep RL from ever
acting outside the demos' 1-99% range. The box is ``PolicyConfig.action_low/high`` (the env's action
space when training on a run's own data), else the dataset's min/max. Its normalised image is computed
at construction (non-persistent buffers ``action_low_norm``/``action_high_norm``), so older checkpoints
load unchanged.

With an ``action_reference`` key (relative actions, ``PolicyConfig.action_reference``) the observation
``obs[key]`` (B, d) is subtracted from every step of a chunk before that map and added back after the
inverse; the statistics (and so the offset, scale and normalised box) may then be per chunk step (h, d).
The normalised box is the relative actions' min/max, and a box given in robot units clamps the absolute
actions that :meth:`unnormalize_actions` returns. With ``action_reference_velocity`` the reference of chunk
step i is a[t−1] + (i + 1)(a[t−1] − a[t−2]) from ``observation.prev_action``
(:func:`robot_rl.data.prev_action.chunk_reference`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from robot_rl.data.normalize import FeatureStats
from robot_rl.data.prev_action import chunk_reference
from robot_rl.keys import ACTION

if TYPE_CHECKING:
    from robot_rl.config import PolicyConfig


class ActionNormalization:
    """Mixin for an ``nn.Module`` policy: call :meth:`register_action_stats` in ``__init__``."""

    action_offset: torch.Tensor
    action_scale: torch.Tensor
    action_reference: str = ""
    action_reference_velocity: bool = False

    def register_policy_action_stats(
        self, cfg: PolicyConfig, stats: dict[str, FeatureStats], action_dim: int
    ) -> None:
        """:meth:`register_action_stats` with the normalisation, box and reference of ``cfg``, a
        :class:`robot_rl.config.PolicyConfig`; raises as that method does."""
        self.register_action_stats(
            stats,
            cfg.normalization,
            action_dim,
            cfg.action_low,
            cfg.action_high,
            cfg.action_reference,
            cfg.action_reference_velocity,
        )

    def register_action_stats(
        self,
        stats: dict[str, FeatureStats],
        normalization: str,
        action_dim: int,
        low: list[float] | None = None,
        high: list[float] | None = None,
        reference: str = "",
        velocity: bool = False,
    ) -> None:
        """Register ``action_offset`` / ``action_scale`` (d,) float32 buffers from ``stats['action']``, and
        the normalised action box ``action_low_norm`` / ``action_high_norm`` (d,) float32.

        Args:
            low, high: the action box in robot units, (d,) each; None or empty = the data's min/max.
            reference: observation key of relative actions (empty: absolute); ``stats['action']`` are then
                the relative actions' statistics, (d,) or per chunk step (h, d).
            velocity: the reference continues the last change of ``observation.prev_action`` at constant
                velocity (``policy.action_reference_velocity``); needs ``reference``.

        Raises:
            ValueError: no ``action`` statistics, or they are not (d,); a box that is not (d,), has
                low > high, or whose normalised image is not finite (a normalisation that cannot represent
                it); the message names ``policy.action_low/high`` and the dimension; ``velocity`` without
                ``reference``.
        """
        if velocity and not reference:
            raise ValueError("policy.action_reference_velocity needs policy.action_reference")
        if ACTION not in stats:
            raise ValueError(f"no normalization statistics for {ACTION!r}")
        offset, scale = stats[ACTION].affine(normalization)
        offset = torch.as_tensor(offset, dtype=torch.float32)
        scale = torch.as_tensor(scale, dtype=torch.float32)
        if offset.shape[-1:] != (action_dim,) or (
            offset.dim() != 1 and not (reference and offset.dim() == 2)
        ):
            raise ValueError(
                f"action statistics have shape {tuple(offset.shape)}, expected ({action_dim},) "
                f"(or (h, {action_dim}) per chunk step for relative actions)"
            )
        self.register_buffer("action_offset", offset)
        self.register_buffer("action_scale", scale)
        self.action_reference = reference
        self.action_reference_velocity = bool(velocity)
        if reference:
            self._register_relative_box(stats[ACTION], offset, scale, low, high, action_dim)
            return
        box = [stats[ACTION].min if not low else low, stats[ACTION].max if not high else high]
        lo, hi = (torch.as_tensor(np.asarray(b, np.float64), dtype=torch.float64).reshape(-1) for b in box)
        if lo.shape != (action_dim,) or hi.shape != (action_dim,):
            raise ValueError(
                f"policy.action_low/high must have {action_dim} values, got {lo.numel()} and {hi.numel()}"
            )
        bad = torch.nonzero(lo > hi).flatten()
        if len(bad):
            raise ValueError(f"policy.action_low > policy.action_high in action dimension {int(bad[0])}")
        lo_n = (lo - offset.double()) / scale.double()
        hi_n = (hi - offset.double()) / scale.double()
        bad = torch.nonzero(~torch.isfinite(lo_n) | ~torch.isfinite(hi_n)).flatten()
        if len(bad):
            raise ValueError(
                f"the {normalization} action normalisation cannot represent the action box in dimension "
                f"{int(bad[0])} (scale {float(scale[bad[0]])}); use policy.normalization=quantile or "
                "fix policy.action_low/high"
            )
        self.register_buffer("action_low_norm", lo_n.float(), persistent=False)
        self.register_buffer("action_high_norm", hi_n.float(), persistent=False)

    def _register_relative_box(self, stats, offset, scale, low, high, action_dim: int) -> None:
        """Relative actions: normalised box from the relative statistics' min/max ((d,) or (h, d)); a box
        in robot units is kept as ``action_low``/``action_high`` (d,) to clamp absolute actions."""
        lo_n = (torch.as_tensor(stats.min, dtype=torch.float32) - offset) / scale
        hi_n = (torch.as_tensor(stats.max, dtype=torch.float32) - offset) / scale
        self.register_buffer("action_low_norm", lo_n, persistent=False)
        self.register_buffer("action_high_norm", hi_n, persistent=False)
        self.action_box = None
        if low or high:
            lo, hi = (torch.as_tensor(np.asarray(b, np.float32)).reshape(-1) for b in (low, high))
            if lo.shape != (action_dim,) or hi.shape != (action_dim,):
                raise ValueError(
                    f"policy.action_low/high must have {action_dim} values, got {lo.numel()} and {hi.numel()}"
                )
            self.action_box = (lo, hi)

    def clip_normalized(self, actions: torch.Tensor) -> torch.Tensor:
        """Clip normalised actions to the normalised action box: (..., d) or flat chunks (B, h*d); with
        per-chunk-step bounds (h, d), chunks (..., h, d) or flat (B, h*d)."""
        shape, low = actions.shape, self.action_low_norm
        if low.dim() == 2:
            x = actions.reshape(-1, *low.shape)
        else:
            x = actions.reshape(*shape[:-1], -1, low.shape[0])
        return torch.clamp(x, low, self.action_high_norm).reshape(shape)

    def normalize_actions(self, actions: torch.Tensor, obs: dict | None = None) -> torch.Tensor:
        """Robot units (..., d) -> normalised (..., d); chunks (B, h, d) or steps (B, d) need ``obs`` with
        relative actions. Raises ValueError when ``obs`` lacks the reference key."""
        return (actions - self._reference(actions, obs) - self.action_offset) / self.action_scale

    def unnormalize_actions(self, actions: torch.Tensor, obs: dict | None = None) -> torch.Tensor:
        """Normalised (..., d) -> robot units (..., d); inverse of :meth:`normalize_actions` (relative
        actions given a box in robot units are clamped to it)."""
        out = actions * self.action_scale + self.action_offset + self._reference(actions, obs)
        box = getattr(self, "action_box", None) if self.action_reference else None
        return out if box is None else torch.clamp(out, box[0].to(out), box[1].to(out))

    def _reference(self, actions: torch.Tensor, obs: dict | None) -> torch.Tensor | float:
        """0 for absolute actions, else the reference from ``obs[action_reference]`` shaped to broadcast on
        ``actions``: its first d values (a[t−1] of ``observation.prev_action`` holding k commands, (B, k·d)),
        (B, d) for steps and (B, 1, d) for chunks (B, h, d); with ``action_reference_velocity``, chunks only,
        (B, h, d) (:func:`robot_rl.data.prev_action.chunk_reference`). Raises ValueError when ``obs`` lacks
        the key, or for steps with ``action_reference_velocity``."""
        key = self.action_reference
        if not key:
            return 0.0
        if obs is None or key not in obs:
            raise ValueError(f"relative actions (policy.action_reference={key!r}) need obs[{key!r}] (B, d)")
        ref = torch.as_tensor(obs[key], dtype=actions.dtype, device=actions.device)
        if actions.dim() != 3:
            if self.action_reference_velocity:
                raise ValueError("policy.action_reference_velocity: actions must be chunks (B, h, d)")
            return ref[..., : actions.shape[-1]]
        return chunk_reference(ref, actions.shape[-1], actions.shape[1], self.action_reference_velocity)
