"""The VLA trunk as a critic's observation encoder: CO-RFT's "critic head on the VLA trunk" (Huang et al.
2025; docs/algorithms.md §6).

:class:`VLATrunkFeatures` runs the policy's own trunk (:meth:`VLAPolicy.encode`: the VLM pass and the
expert's prefix projection) under no_grad and pools its prefix tokens into one vector
(:meth:`VLAPolicy.pool_features`: the state token beside the mean of the others), so the critic's MLP is a
head on the features the action expert reads. The trunk is trained by the policy's
losses only (stop-gradient: the TD loss does not reshape the VLA's features), and it is the *current*
trunk for the Polyak target critic too (only the head is averaged). It owns no parameters and is not a
registered submodule of the policy's, so checkpoints do not store the VLA twice.
"""

from __future__ import annotations

import torch
from torch import nn


class VLATrunkFeatures(nn.Module):
    """obs dict (batch B) -> (B, F) float32: the VLA's pooled prefix (``policy.feature_dim``, F = 2 W with a
    state token, W = expert width).

    Args:
        policy: the :class:`~.policy.VLAPolicy` whose trunk is read (held by reference, shared by deep
            copies such as the target critic's).
    """

    def __init__(self, policy: nn.Module):
        super().__init__()
        self._policy = [policy]  # a list: not a submodule (no second copy in state dicts or optimizers)
        self.out_dim = int(policy.feature_dim)

    def __deepcopy__(self, memo) -> VLATrunkFeatures:
        return VLATrunkFeatures(self._policy[0])

    @torch.no_grad()
    def forward(self, obs: dict) -> torch.Tensor:
        policy = self._policy[0]
        return policy.pool_features(policy.encode(obs))
