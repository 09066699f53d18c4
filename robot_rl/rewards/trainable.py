"""Critics with torch weights: the training loss contract, checkpoint folders and the training loop.

Checkpoint folder (no pickle): ``critic.json`` (kind, RewardModelConfig, what the critic reads, and any
kind-specific fields) and ``model.safetensors`` (the trainable weights). ``load_critic`` dispatches on
``kind``.
"""

from __future__ import annotations

import json
import time
from abc import abstractmethod
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from robot_rl.config import RewardModelConfig
from robot_rl.data.lerobot.layout import staged_destination
from robot_rl.rewards.base import CriticInputError, ProgressCritic
from robot_rl.rewards.pairs import PairBatch, PairSampler

META_FILE = "critic.json"
WEIGHTS_FILE = "model.safetensors"


class TrainableCritic(ProgressCritic):
    """A ``ProgressCritic`` whose ``module`` is trained with ``loss`` and saved as a checkpoint folder."""

    kind: str
    cfg: RewardModelConfig
    module: nn.Module

    @abstractmethod
    def loss(self, batch: PairBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """Scalar training loss on one batch and its parts as floats (for the log)."""

    def extra_meta(self) -> dict[str, Any]:
        """Kind-specific fields stored in ``critic.json`` (what ``load`` needs to rebuild the module)."""
        return {}

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The weights saved in ``model.safetensors`` (default: the whole module)."""
        return self.module.state_dict()

    def save(self, path: str | Path) -> Path:
        """Write the checkpoint folder atomically: staged beside ``path``, then swapped in. An existing
        critic checkpoint at ``path`` is replaced; any other existing folder is refused.

        Raises:
            CriticInputError: ``path`` exists and is not a critic checkpoint.
        """
        path = Path(path)
        if path.exists() and not (path / META_FILE).is_file():
            raise CriticInputError(f"{path}: exists and is not a critic checkpoint; refusing to replace it")
        meta = {
            "kind": self.kind,
            "config": asdict(self.cfg),
            "image_keys": list(self.image_keys),
            "image_size": list(self.image_size),
            "state_key": self.state_key,
            **self.extra_meta(),
        }
        with staged_destination(
            path, True, lambda p: (p / META_FILE).is_file(), "a critic checkpoint"
        ) as stage:
            (stage / META_FILE).write_text(json.dumps(meta, indent=2))
            tensors = {k: v.detach().cpu().contiguous() for k, v in self.trainable_state().items()}
            save_file(tensors, str(stage / WEIGHTS_FILE))
        return path


def read_checkpoint(path: str | Path) -> tuple[dict[str, Any], RewardModelConfig, dict[str, torch.Tensor]]:
    """(meta, config, weights) of a critic checkpoint folder.

    Raises:
        CriticInputError: the folder or one of its files is missing or unreadable (names the file).
    """
    path = Path(path)
    meta_file = path / META_FILE
    if not meta_file.is_file():
        raise CriticInputError(
            f"{path}: not a critic checkpoint (no {META_FILE}); train one with robot-rl critic train"
        )
    try:
        meta = json.loads(meta_file.read_text())
        cfg = RewardModelConfig(**meta["config"])
        weights = load_file(str(path / WEIGHTS_FILE))
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise CriticInputError(f"{path}: unreadable critic checkpoint: {err}") from err
    return meta, cfg, weights


def train_critic(
    critic: TrainableCritic, sampler: PairSampler, steps: int, log_every: int = 100, progress=None
) -> list[dict[str, float]]:
    """AdamW on ``critic.loss`` for ``steps`` batches of ``cfg.batch_size`` pairs; batches are drawn with a
    generator seeded by ``cfg.seed``. Returns the log rows (step, losses, pairs/s) every ``log_every``."""
    cfg = critic.cfg
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    params = [p for p in critic.module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=1e-4)
    critic.module.train()
    log: list[dict[str, float]] = []
    start = time.time()
    for step in range(1, steps + 1):
        loss, parts = critic.loss(sampler.sample(cfg.batch_size, rng))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % log_every == 0 or step == steps:
            log.append({"step": step, **parts, "pairs_per_s": step * cfg.batch_size / (time.time() - start)})
        if progress is not None:
            progress(1)
    critic.module.eval()
    return log
