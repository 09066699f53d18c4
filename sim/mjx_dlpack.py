"""Zero-copy exchange between the MJX sim's JAX arrays and a torch policy's tensors via DLPack (the
array-exchange protocol both libraries implement: ``torch.from_dlpack``, ``jax.dlpack.from_dlpack``), so a
policy reads the observations where the sim wrote them and hands its action back the same way, with no
host round-trip (:meth:`robot_rl.sim.batched_mjx.MjxBatchedEnv.step_device`).

The tensor and the array share one buffer on one device (the CPU here; the GPU with ``jax[cuda]`` and a
CUDA torch). JAX arrays are immutable: a torch tensor made from one must not be written to.
"""

from __future__ import annotations

from typing import Any

import torch


def to_torch(array: Any) -> torch.Tensor:
    """The torch tensor viewing the JAX array ``array`` (same shape, dtype, device and buffer; no copy).

    Raises:
        TypeError: ``array`` does not implement ``__dlpack__`` (not a JAX array).
    """
    if not hasattr(array, "__dlpack__"):
        raise TypeError(f"to_torch needs a JAX array, got {type(array).__name__}")
    return torch.from_dlpack(array)


def to_jax(tensor: torch.Tensor) -> Any:
    """The JAX array viewing the torch tensor ``tensor`` (same shape, dtype, device and buffer; no copy
    when ``tensor`` is contiguous and its device is one JAX runs on).

    Raises:
        TypeError: ``tensor`` is not a torch tensor.
    """
    import jax.dlpack

    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"to_jax needs a torch tensor, got {type(tensor).__name__}")
    return jax.dlpack.from_dlpack(tensor.detach().contiguous())
