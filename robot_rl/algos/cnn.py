"""The small image CNN shared by the policies' observation encoders and the compact progress critic
(:mod:`robot_rl.rewards.compact`): HWC uint8 images, scaled to CHW float in [0, 1] by the caller."""

from __future__ import annotations

import torch
from torch import nn


def conv_layers(channels: int) -> list[nn.Module]:
    """Three 3x3 stride-2 convs (3 -> ``channels`` -> ``channels``) with GELUs: (B, 3, H, W) float ->
    (B, channels, H/8, W/8); a list, so that callers' ``nn.Sequential`` keep flat parameter names."""
    return [
        nn.Conv2d(3, channels, 3, stride=2, padding=1),
        nn.GELU(),
        nn.Conv2d(channels, channels, 3, stride=2, padding=1),
        nn.GELU(),
        nn.Conv2d(channels, channels, 3, stride=2, padding=1),
        nn.GELU(),
    ]


class SmallCNN(nn.Module):
    """(B, 3, H, W) float in [0, 1] -> (B, out_dim): 3 stride-2 convs, 4x4 average pool, Linear, LayerNorm."""

    def __init__(self, out_dim: int, channels: int = 32):
        super().__init__()
        self.conv = nn.Sequential(*conv_layers(channels), nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(channels * 16, out_dim), nn.LayerNorm(out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x))
