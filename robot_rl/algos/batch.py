"""Convert the chunk sampler's numpy batch (docs/algorithms.md §1) to torch tensors on a device."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

_FLOAT_KEYS = ("actions", "rewards", "masks", "valid", "critic_valid")


def _to_tensor(x: Any, device: torch.device | str) -> Any:
    if isinstance(x, dict):
        return {k: _to_tensor(v, device) for k, v in x.items()}
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, np.ndarray) and x.dtype.kind in "biuf":
        if x.dtype == np.uint8:
            return torch.from_numpy(np.ascontiguousarray(x)).to(device)
        if x.dtype.kind == "f":
            return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(device)
        return torch.from_numpy(np.ascontiguousarray(x)).to(device)
    return x  # strings, object arrays (e.g. ``source``) pass through


def batch_to_torch(np_batch: dict[str, Any], device: torch.device | str = "cpu") -> dict[str, Any]:
    """Numpy chunk batch -> torch batch.

    Floats become float32; uint8 images stay uint8; ``actions``, ``rewards``, ``masks``, ``valid`` and
    ``critic_valid`` are always float32 (``valid`` may arrive as bool). Nested dicts (``observations``,
    ``next_observations``) recurse. Non-numeric entries pass through unchanged.

    Raises:
        KeyError: a required key (observations, actions, rewards, masks, next_observations, valid,
            critic_valid) is missing.
    """
    required = ("observations", "actions", "rewards", "masks", "next_observations", "valid", "critic_valid")
    missing = [k for k in required if k not in np_batch]
    if missing:
        raise KeyError(f"batch lacks keys {missing}; has {sorted(np_batch)}")
    out = {k: _to_tensor(v, device) for k, v in np_batch.items()}
    for key in _FLOAT_KEYS:
        out[key] = torch.as_tensor(out[key], device=device).to(torch.float32)
    return out
