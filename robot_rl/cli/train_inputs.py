"""``robot-rl train``'s report of the dataset columns the policy is fed and the ones it ignores."""

from __future__ import annotations

from robot_rl.data.training.features import FeatureUse


def print_train_inputs(use: FeatureUse) -> None:
    """Print :meth:`FeatureUse.lines` (inputs with shapes, targets, ignored columns with reasons)."""
    for line in use.lines():
        print(line, flush=True)
