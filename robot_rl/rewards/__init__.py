"""Progress critics as rewards (docs/algorithms.md §9): the ``ProgressCritic`` interface, the compact CPU
critic
and the VLM critic, potential-based shaping, evaluation metrics and the critic server."""

from robot_rl.rewards.base import CriticInputError, CriticOutput, CriticScoreError, ProgressCritic

__all__ = ["CriticInputError", "CriticOutput", "CriticScoreError", "ProgressCritic"]
