"""BC-anchored policy extraction for the one-step agents (QC-FQL, CO-RFT): the default offline-RL guard of
issue 38 ("the critic only chooses among BC samples").

With ``offline.extraction=bc_anchored`` an agent acts with QC's best-of-N operator (Li, Zhou & Levine 2025,
docs/algorithms.md §3(a)): N = ``offline.best_of_n`` chunks sampled from the behaviour flow, which keeps
training by flow BC on the demonstrations throughout offline RL, and the one the critic values most. Every
acted chunk is thus a sample of the BC policy, so the learned actor cannot carry the robot off the data's
support (where the critic's values are extrapolations); the critic only re-ranks BC's own proposals. N = 1
is the BC policy itself. It needs no environment, so it also holds for a real-robot dataset.
``offline.extraction=actor`` acts with the one-step policy μ_ω instead (the methods' own extraction).
"""

from __future__ import annotations

from typing import get_args

import torch

from robot_rl.algos.base import check_finite
from robot_rl.algos.one_step import OneStepAgent
from robot_rl.algos.protocols import Obs
from robot_rl.algos.qc import best_of_n
from robot_rl.config import Extraction

EXTRACTIONS: tuple[str, ...] = get_args(Extraction)


class BCAnchoredActing(OneStepAgent):
    """A :class:`OneStepAgent` whose :meth:`act` follows ``cfg.extraction`` (module docstring)."""

    inference_knobs = ("offline.best_of_n", "offline.extraction")

    @torch.no_grad()
    def act(self, obs: Obs, noise: torch.Tensor | None = None) -> torch.Tensor:
        """The acted chunk, (B, h, d) robot units.

        ``bc_anchored``: the best of ``cfg.best_of_n`` behaviour-flow samples under the critic's aggregated
        Q; ``noise`` optional (B, N, h, d) flow noise. ``actor``: ``clip(μ_ω(s, z))``; ``noise`` optional
        (B, h, d).

        Raises:
            ValueError: unknown ``cfg.extraction``; the chunk holds NaN or inf.
        """
        mode = self.cfg.extraction
        if mode == "actor":
            return super().act(obs, noise)
        if mode != "bc_anchored":
            raise ValueError(f"offline.extraction={mode!r}; expected one of {EXTRACTIONS}")
        chunks, _ = best_of_n(self.policy, self.critic, obs, self.cfg.best_of_n, noise)
        return check_finite(self.policy.unnormalize_actions(chunks, obs))
