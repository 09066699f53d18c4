"""Action normalisation shared by the policies: robot units <-> the normalised space [-1, 1] policies act in.

The maps are ``a_norm = (a - offset) / scale`` with (offset, scale) from the dataset's action statistics
(``mean_std`` or ``quantile``: q01 -> -1, q99 -> +1; DESIGN.md §3). They are stored as buffers
``action_offset`` and ``action_scale``, so a checkpoint carries them. With an ``action_reference`` key
(relative actions, ``PolicyConfig.action_reference``) the observation ``obs[key]`` (B, d) is subtracted
from every step of a chunk before that map and added back after the inverse.
"""

from __future__ import annotations

import torch

from robot_rl.data.normalize import FeatureStats
from robot_rl.keys import ACTION


class ActionNormalization:
    """Mixin for an ``nn.Module`` policy: call :meth:`register_action_stats` in ``__init__``."""

    action_offset: torch.Tensor
    action_scale: torch.Tensor
    action_reference: str = ""

    def register_action_stats(
        self, stats: dict[str, FeatureStats], normalization: str, action_dim: int, reference: str = ""
    ) -> None:
        """Register ``action_offset`` / ``action_scale`` (d,) float32 buffers from ``stats['action']``; when
        ``reference`` names an observation key they are the relative actions' statistics, (d,) or per chunk
        step (h, d).

        Raises:
            ValueError: no ``action`` statistics, or they are not (d,) (or (h, d) with ``reference``).
        """
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

    def normalize_actions(self, actions: torch.Tensor, obs: dict | None = None) -> torch.Tensor:
        """Robot units (..., d) -> normalised (..., d); chunks (B, h, d) or steps (B, d) need ``obs`` with
        relative actions. Raises ValueError when ``obs`` lacks the reference key."""
        return (actions - self._reference(actions, obs) - self.action_offset) / self.action_scale

    def unnormalize_actions(self, actions: torch.Tensor, obs: dict | None = None) -> torch.Tensor:
        """Normalised (..., d) -> robot units (..., d); inverse of :meth:`normalize_actions`."""
        return actions * self.action_scale + self.action_offset + self._reference(actions, obs)

    def _reference(self, actions: torch.Tensor, obs: dict | None) -> torch.Tensor | float:
        """0 for absolute actions, else ``obs[action_reference]`` (B, d) shaped to broadcast on actions."""
        key = self.action_reference
        if not key:
            return 0.0
        if obs is None or key not in obs:
            raise ValueError(f"relative actions (policy.action_reference={key!r}) need obs[{key!r}] (B, d)")
        ref = torch.as_tensor(obs[key], dtype=actions.dtype, device=actions.device)
        return ref.unsqueeze(1) if actions.dim() == 3 else ref
