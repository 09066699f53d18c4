"""The compact progress critic: a small CNN per camera plus a frozen MiniLM task embedding, CPU-fast.

It is a VLAC-style pairwise critic (docs/algorithms.md §9) sized to score every control step of the simulated
task on a CPU: the delta head sees both frames' features, their difference and the task; the done head
sees the second frame and the task. Trained on ``PairBatch``es (time-progress hops plus negatives).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robot_rl import keys
from robot_rl.algos.cnn import SmallCNN
from robot_rl.config import RewardModelConfig
from robot_rl.rewards.base import CriticOutput
from robot_rl.rewards.pairs import PairBatch
from robot_rl.rewards.text import TextEmbedder
from robot_rl.rewards.trainable import TrainableCritic

WIDTH = 128
SHIFT_PX = 4  # random-shift augmentation (DrQ) while training
ORDER_TEMPERATURE = 20.0  # logit scale of the order loss: a delta of 0.05 is a 73% vote for "forward"
ORDER_WEIGHT = 0.2


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(inp, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, out)
    )


class CompactNet(nn.Module):
    """(obs_i, obs_j, text (B, E)) -> (delta pre-tanh (B,), done logit (B,)).

    Images (B, H, W, 3) uint8 go through one ``SmallCNN`` per camera; ``observation.state`` (B, D), when
    used, is standardised with the training data's mean/std (buffers) and embedded by a Linear layer.
    """

    def __init__(self, image_keys: list[str], state_dim: int, text_dim: int) -> None:
        super().__init__()
        self.image_keys = list(image_keys)
        self.cnns = nn.ModuleList(SmallCNN(WIDTH) for _ in self.image_keys)
        self.state = nn.Sequential(nn.Linear(state_dim, WIDTH), nn.LayerNorm(WIDTH)) if state_dim else None
        self.register_buffer("state_mean", torch.zeros(state_dim))
        self.register_buffer("state_std", torch.ones(state_dim))
        self.text = nn.Sequential(nn.Linear(text_dim, WIDTH), nn.LayerNorm(WIDTH))
        feat = WIDTH * (len(self.cnns) + (1 if state_dim else 0))
        self.delta_head = _mlp(3 * feat + WIDTH, 256, 1)
        self.done_head = _mlp(feat + WIDTH, 256, 1)

    def encode(self, obs: dict[str, torch.Tensor], augment: bool) -> torch.Tensor:
        parts = []
        for key, cnn in zip(self.image_keys, self.cnns, strict=True):
            x = obs[key].permute(0, 3, 1, 2).float().div(255.0)
            parts.append(cnn(_random_shift(x) if augment else x))
        if self.state is not None:
            parts.append(self.state((obs[keys.STATE] - self.state_mean) / self.state_std))
        return torch.cat(parts, dim=-1)

    def forward(
        self,
        obs_i: dict[str, torch.Tensor],
        obs_j: dict[str, torch.Tensor],
        text: torch.Tensor,
        augment: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        z_i, z_j, t = self.encode(obs_i, augment), self.encode(obs_j, augment), self.text(text)
        delta = self.delta_head(torch.cat([z_i, z_j, z_j - z_i, t], dim=-1)).squeeze(-1)
        done = self.done_head(torch.cat([z_j, t], dim=-1)).squeeze(-1)
        return delta, done


def _random_shift(x: torch.Tensor) -> torch.Tensor:
    """Pad by SHIFT_PX (edge replicate) and crop back at a random offset per image (DrQ augmentation)."""
    b, _, h, w = x.shape
    padded = F.pad(x, (SHIFT_PX,) * 4, mode="replicate")
    dx, dy = torch.randint(0, 2 * SHIFT_PX + 1, (2, b))
    rows = (dy[:, None] + torch.arange(h)[None])[:, None, :, None].expand(b, x.shape[1], h, w + 2 * SHIFT_PX)
    cols = (dx[:, None] + torch.arange(w)[None])[:, None, None, :].expand(b, x.shape[1], h, w)
    return padded.gather(2, rows).gather(3, cols)


class CompactProgressCritic(TrainableCritic):
    """Compact CPU progress critic (see module docstring); ``kind = 'compact'``.

    Reads ``observation.images.<cam>`` for ``cfg.cameras`` at ``cfg.image_size`` square, and
    ``observation.state`` when ``cfg.use_state``.
    """

    kind = "compact"

    def __init__(self, cfg: RewardModelConfig, state_dim: int = 0, device: str = "cpu") -> None:
        self.cfg, self.device = cfg, device
        self.image_keys = tuple(keys.image_key(c) for c in cfg.cameras)
        self.image_size = (cfg.image_size, cfg.image_size)
        self.state_key = keys.STATE if cfg.use_state else None
        self.text = TextEmbedder(cfg.model)
        self.module = CompactNet(list(self.image_keys), state_dim if cfg.use_state else 0, self.text.dim).to(
            device
        )
        self.module.eval()

    def fit_state_stats(self, states: np.ndarray) -> None:
        """Set the state standardisation from training states (N, D) float32."""
        self.module.state_mean.copy_(torch.as_tensor(states.mean(0)))
        self.module.state_std.copy_(torch.as_tensor(states.std(0) + 1e-6))

    def _tensors(self, obs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
        return {k: torch.as_tensor(np.ascontiguousarray(obs[k])).to(self.device) for k in self.input_keys}

    def _text(self, tasks: list[str]) -> torch.Tensor:
        return torch.as_tensor(self.text(tasks)).to(self.device)

    @torch.no_grad()
    def _score(
        self, obs_i: dict[str, np.ndarray], obs_j: dict[str, np.ndarray], tasks: list[str]
    ) -> CriticOutput:
        delta, done = self.module(self._tensors(obs_i), self._tensors(obs_j), self._text(tasks))
        return CriticOutput(torch.tanh(delta).cpu().numpy(), torch.sigmoid(done).cpu().numpy())

    def loss(self, batch: PairBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """MSE on tanh(delta) against the hop target, BCE of the done logit, and an order loss.

        The order loss is a Bradley-Terry term (as in RL-VLM-F) on the sign of the delta for pairs whose
        target is not 0: consecutive frames early in a demo have hop targets near 1/T, too small for MSE
        to get their sign right, and a wrong sign is what bends a reconstructed progress curve down.
        """
        delta, done = self.module(
            self._tensors(batch.obs_i), self._tensors(batch.obs_j), self._text(batch.tasks), augment=True
        )
        target = torch.as_tensor(batch.delta, device=self.device)
        delta_loss = F.mse_loss(torch.tanh(delta), target)
        done_loss = F.binary_cross_entropy_with_logits(done, torch.as_tensor(batch.done, device=self.device))
        moving = target != 0
        order_loss = (
            F.binary_cross_entropy_with_logits(
                ORDER_TEMPERATURE * delta[moving], (target[moving] > 0).float()
            )
            if moving.any()
            else delta.sum() * 0.0
        )
        parts = {
            "delta_loss": delta_loss.item(),
            "done_loss": done_loss.item(),
            "order_loss": order_loss.item(),
        }
        return delta_loss + done_loss + ORDER_WEIGHT * order_loss, parts

    def extra_meta(self) -> dict[str, Any]:
        return {"state_dim": int(self.module.state_mean.numel()), "text_model": self.text.model}

    @classmethod
    def from_checkpoint(
        cls,
        meta: dict[str, Any],
        cfg: RewardModelConfig,
        weights: dict[str, torch.Tensor],
        device: str = "cpu",
    ) -> CompactProgressCritic:
        """Rebuild from ``critic.json`` fields and ``model.safetensors`` weights (registry.load_critic)."""
        critic = cls(cfg, state_dim=int(meta.get("state_dim", 0)), device=device)
        critic.module.load_state_dict(weights)
        return critic
