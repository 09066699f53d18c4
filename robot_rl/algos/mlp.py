"""Plain MLP builder shared by policy and critic networks (optional LayerNorm, as QC/FQL critics)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn


def build_mlp(
    in_dim: int, hidden_dims: Sequence[int], out_dim: int, layer_norm: bool = False
) -> nn.Sequential:
    """Linear -> [LayerNorm] -> GELU for each hidden width, then a final Linear to ``out_dim``.

    Input (..., in_dim) float32 -> output (..., out_dim) float32.
    """
    layers: list[nn.Module] = []
    prev = in_dim
    for width in hidden_dims:
        layers.append(nn.Linear(prev, int(width)))
        if layer_norm:
            layers.append(nn.LayerNorm(int(width)))
        layers.append(nn.GELU())
        prev = int(width)
    layers.append(nn.Linear(prev, out_dim))
    return nn.Sequential(*layers)
