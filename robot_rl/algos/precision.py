"""Reduced-precision matrix products for the offline-RL learners (``offline.learner_dtype``).

``bfloat16`` runs the learner's matrix products (``linear``, ``baddbmm``, ...) under ``torch.autocast``:
inputs rounded to bfloat16, products accumulated in float32 by oneDNN/cuBLAS. Parameters, Adam state,
losses, the flow's Euler state and the critic's output layer stay float32 (:class:`ChunkCritic`), so the
update follows the same equations (docs/algorithms.md §2-4) with 8-bit-mantissa products, the precision a
TPU's default matmul uses for QC's and FQL's JAX code. ``auto`` picks bfloat16 only where the hardware has
native bfloat16 products (a CPU with AMX or AVX512-BF16, a CUDA device with bfloat16 support); elsewhere
autocast would emulate them and be slower than float32.
"""

from __future__ import annotations

import contextlib
from typing import get_args

import torch

from robot_rl.config import LearnerDtype

LEARNER_DTYPES: tuple[str, ...] = get_args(LearnerDtype)


def native_bfloat16(device: torch.device | str) -> bool:
    """Whether ``device`` has native bfloat16 matrix products (CPU: AMX tiles or AVX512-BF16; CUDA:
    ``torch.cuda.is_bf16_supported()``); False for other device types."""
    kind = torch.device(device).type
    if kind == "cpu":
        return bool(torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())
    if kind == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return False


def resolve_learner_dtype(name: str, device: torch.device | str) -> torch.dtype:
    """``offline.learner_dtype`` -> the dtype of the learner's matrix products on ``device``.

    Raises:
        ValueError: ``name`` is not one of LEARNER_DTYPES.
    """
    if name not in LEARNER_DTYPES:
        raise ValueError(f"offline.learner_dtype={name!r}; expected one of {LEARNER_DTYPES}")
    if name == "auto":
        return torch.bfloat16 if native_bfloat16(device) else torch.float32
    return torch.bfloat16 if name == "bfloat16" else torch.float32


def learner_autocast(dtype: torch.dtype, device: torch.device | str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to ``dtype`` on ``device``'s type, or a no-op context for float32."""
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)
