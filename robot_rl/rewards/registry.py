"""The progress critics by kind: build a fresh one from config or rebuild a trained one from its checkpoint.

The only module that names the concrete critics (``compact``: CNN + MiniLM; ``vlm``: a Hugging Face VLM),
imported lazily, so the base and trainable modules never import them and nothing imports in a circle.
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from robot_rl.config import ConfigError, RewardModelConfig, RewardModelKind
from robot_rl.rewards.base import CriticInputError
from robot_rl.rewards.compact import CompactProgressCritic
from robot_rl.rewards.trainable import META_FILE, TrainableCritic, read_checkpoint
from robot_rl.rewards.vlm import VLMProgressCritic

CRITIC_KINDS: tuple[str, ...] = get_args(RewardModelKind)


def build_critic(cfg: RewardModelConfig, state_dim: int, device: str = "cpu") -> TrainableCritic:
    """A fresh critic of ``cfg.kind``; ``state_dim`` is the proprio state size it reads (0 = images only).

    Raises:
        ConfigError: unknown kind, or ``vlm`` without ``reward_model.model``.
    """
    if cfg.kind == "compact":
        return CompactProgressCritic(cfg, state_dim=state_dim, device=device)
    if cfg.kind == "vlm":
        if not cfg.model:
            raise ConfigError("reward_model.model: a vlm critic needs a Hugging Face model id or local path")
        return VLMProgressCritic.from_pretrained(cfg.model, cfg, device=device)
    raise ConfigError(f"reward_model.kind={cfg.kind!r}; expected one of {CRITIC_KINDS}")


def load_critic(path: str | Path, device: str = "cpu") -> TrainableCritic:
    """Rebuild a trained critic from its checkpoint folder.

    Raises:
        CriticInputError: not a checkpoint, or an unknown ``kind``.
    """
    meta, cfg, weights = read_checkpoint(path)
    kind = meta.get("kind")
    if kind == "compact":
        return CompactProgressCritic.from_checkpoint(meta, cfg, weights, device)
    if kind == "vlm":
        return VLMProgressCritic.from_checkpoint(meta, cfg, weights, device)
    raise CriticInputError(f"{path}/{META_FILE}: unknown critic kind {kind!r} (one of {CRITIC_KINDS})")
