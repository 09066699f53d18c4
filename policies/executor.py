"""Executing action chunks step by step: open loop (QC default, ALGORITHMS.md §3) or ACT-style temporal
ensembling (Zhao et al. 2023, "Learning Fine-Grained Bimanual Manipulation ...": every step a new chunk is
predicted and the actions that target the current step are averaged with weights ``exp(-m * i)``, i = 0
for the oldest prediction)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

EXECUTIONS = ("open_loop", "temporal_ensemble")


def _as_numpy(chunk) -> np.ndarray:
    if hasattr(chunk, "detach"):
        chunk = chunk.detach().cpu().numpy()
    return np.asarray(chunk, dtype=np.float32)


class ChunkExecutor:
    """Turn chunks (h, d) or (B, h, d) into one action (d,) or (B, d) per control step.

    Use: ``action = ex.step(lambda: agent.act(obs))`` -- the callable is only invoked when a new chunk is
    needed (every h steps open loop; every step with temporal ensembling). Call :meth:`reset` at episode
    start (all batch rows share one schedule).
    """

    def __init__(self, horizon: int, mode: str = "open_loop", decay: float = 0.1):
        if mode not in EXECUTIONS:
            raise ValueError(f"unknown execution mode {mode!r}; expected one of {EXECUTIONS}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.horizon, self.mode, self.decay = int(horizon), mode, float(decay)
        self.reset()

    @classmethod
    def from_config(cls, policy_cfg) -> ChunkExecutor:
        """From a PolicyConfig: ``horizon``, ``execution`` and ``ensemble_decay``."""
        return cls(policy_cfg.horizon, policy_cfg.execution, policy_cfg.ensemble_decay)

    def reset(self) -> None:
        self._queue: deque[np.ndarray] = deque()
        self._chunks: list[tuple[int, np.ndarray]] = []  # (start step, chunk) oldest first
        self._t = 0

    def needs_chunk(self) -> bool:
        return self.mode == "temporal_ensemble" or not self._queue

    def push(self, chunk) -> None:
        """Add a chunk (h, d) or (B, h, d). Open loop: replaces what is left of the current chunk."""
        c = _as_numpy(chunk)
        if c.ndim not in (2, 3) or c.shape[-2] != self.horizon:
            raise ValueError(f"chunk must be (h={self.horizon}, d) or (B, h, d), got {c.shape}")
        if not np.isfinite(c).all():
            raise ValueError("chunk contains NaN or inf")
        if self.mode == "open_loop":
            self._queue = deque(np.moveaxis(c, -2, 0))
        else:
            self._chunks.append((self._t, c))

    def pop(self) -> np.ndarray:
        """The action for the current step, (d,) or (B, d) float32; advances one step."""
        if self.mode == "open_loop":
            if not self._queue:
                raise RuntimeError("no action left: push a new chunk first")
            self._t += 1
            return self._queue.popleft()
        self._chunks = [(s, c) for s, c in self._chunks if self._t - s < self.horizon]
        if not self._chunks:
            raise RuntimeError("no chunk covers this step: push a new chunk first")
        preds = np.stack([c[..., self._t - s, :] for s, c in self._chunks])  # (n, [B,] d), oldest first
        w = np.exp(-self.decay * np.arange(len(preds), dtype=np.float64))
        w = (w / w.sum()).reshape((-1,) + (1,) * (preds.ndim - 1))
        self._t += 1
        return (preds * w).sum(0).astype(np.float32)

    def step(self, get_chunk: Callable[[], object]) -> np.ndarray:
        """Fetch a new chunk via ``get_chunk()`` when needed, then :meth:`pop`."""
        if self.needs_chunk():
            self.push(get_chunk())
        return self.pop()
