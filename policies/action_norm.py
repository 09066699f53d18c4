"""Action normalisation shared by the policies: robot units <-> the normalised space [-1, 1] policies act in.

The maps are ``a_norm = (a - offset) / scale`` with (offset, scale) from the dataset's action statistics
(``mean_std`` or ``quantile``: q01 -> -1, q99 -> +1; DESIGN.md §3). They are stored as buffers
``action_offset`` and ``action_scale``, so a checkpoint carries them.

Policies act inside the normalised image of the **action box** [low, high] (robot units), not inside
[-1, 1]: [-1, 1] is the demos' q01..q99 (or mean ± 1 std), so clipping there would keep RL from ever
acting outside the demos' 1-99% range. The box is ``PolicyConfig.action_low/high`` (the env's action
space when training on a run's own data), else the dataset's min/max. Its normalised image is computed
at construction (non-persistent buffers ``action_low_norm``/``action_high_norm``), so older checkpoints
load unchanged.
"""

from __future__ import annotations

import numpy as np
import torch

from robot_rl.data.normalize import FeatureStats
from robot_rl.keys import ACTION


class ActionNormalization:
    """Mixin for an ``nn.Module`` policy: call :meth:`register_action_stats` in ``__init__``."""

    action_offset: torch.Tensor
    action_scale: torch.Tensor

    def register_action_stats(
        self,
        stats: dict[str, FeatureStats],
        normalization: str,
        action_dim: int,
        low: list[float] | None = None,
        high: list[float] | None = None,
    ) -> None:
        """Register ``action_offset`` / ``action_scale`` (d,) float32 buffers from ``stats['action']``, and
        the normalised action box ``action_low_norm`` / ``action_high_norm`` (d,) float32.

        Args:
            low, high: the action box in robot units, (d,) each; None or empty = the data's min/max.

        Raises:
            ValueError: no ``action`` statistics, or they are not (d,); a box that is not (d,), has
                low > high, or whose normalised image is not finite (a normalisation that cannot represent
                it); the message names ``policy.action_low/high`` and the dimension.
        """
        if ACTION not in stats:
            raise ValueError(f"no normalization statistics for {ACTION!r}")
        offset, scale = stats[ACTION].affine(normalization)
        offset = torch.as_tensor(offset, dtype=torch.float32).reshape(-1)
        scale = torch.as_tensor(scale, dtype=torch.float32).reshape(-1)
        if offset.shape != (action_dim,):
            raise ValueError(f"action statistics have shape {tuple(offset.shape)}, expected ({action_dim},)")
        self.register_buffer("action_offset", offset)
        self.register_buffer("action_scale", scale)
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

    def clip_normalized(self, actions: torch.Tensor) -> torch.Tensor:
        """Clip normalised actions to the normalised action box: (..., d) or flat chunks (B, h*d)."""
        shape = actions.shape
        x = actions.reshape(*shape[:-1], -1, self.action_low_norm.shape[0])
        return torch.clamp(x, self.action_low_norm, self.action_high_norm).reshape(shape)

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Robot units (..., d) -> normalised (..., d)."""
        return (actions - self.action_offset) / self.action_scale

    def unnormalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised (..., d) -> robot units (..., d)."""
        return actions * self.action_scale + self.action_offset
