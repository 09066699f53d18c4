"""Action normalisation shared by the policies: robot units <-> the normalised space [-1, 1] policies act in.

The maps are ``a_norm = (a - offset) / scale`` with (offset, scale) from the dataset's action statistics
(``mean_std`` or ``quantile``: q01 -> -1, q99 -> +1; DESIGN.md §3). They are stored as buffers
``action_offset`` and ``action_scale``, so a checkpoint carries them.
"""

from __future__ import annotations

import torch

from robot_rl.data.normalize import FeatureStats
from robot_rl.keys import ACTION


class ActionNormalization:
    """Mixin for an ``nn.Module`` policy: call :meth:`register_action_stats` in ``__init__``."""

    action_offset: torch.Tensor
    action_scale: torch.Tensor

    def register_action_stats(
        self, stats: dict[str, FeatureStats], normalization: str, action_dim: int
    ) -> None:
        """Register ``action_offset`` / ``action_scale`` (d,) float32 buffers from ``stats['action']``.

        Raises:
            ValueError: no ``action`` statistics, or they are not (d,).
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

    def normalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Robot units (..., d) -> normalised (..., d)."""
        return (actions - self.action_offset) / self.action_scale

    def unnormalize_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """Normalised (..., d) -> robot units (..., d)."""
        return actions * self.action_scale + self.action_offset
