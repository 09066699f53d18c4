"""Moved to :mod:`robot_rl.checkpoint`: the checkpoint format is core (the runtime, training and eval read
and write it; docs/design.md §2), so the core no longer imports ``robot_rl.policies`` for it (issue 36).

This module re-exports it for the importers not yet switched (``robot_rl/cli``, ``runtime/actor.py``,
``runtime/agents.py``, ``training/ppo.py``); delete it once they import :mod:`robot_rl.checkpoint`.
"""

from robot_rl.checkpoint import (
    CONFIG_FILE,
    FORMAT_KEY,
    FORMAT_VERSION,
    MODEL_FILE,
    NORM_FILE,
    Checkpoint,
    CheckpointError,
    CheckpointHeader,
    check_compatible,
    load_checkpoint,
    load_extra_state,
    load_module_state,
    read_config,
    read_header,
    save_checkpoint,
    weights_mismatch,
)

__all__ = [
    "CONFIG_FILE",
    "FORMAT_KEY",
    "FORMAT_VERSION",
    "MODEL_FILE",
    "NORM_FILE",
    "Checkpoint",
    "CheckpointError",
    "CheckpointHeader",
    "check_compatible",
    "load_checkpoint",
    "load_extra_state",
    "load_module_state",
    "read_config",
    "read_header",
    "save_checkpoint",
    "weights_mismatch",
]
