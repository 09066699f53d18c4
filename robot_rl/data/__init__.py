"""Datasets (LeRobot v3.0 writer, v3.0/v2.1 reader), the zarr replay buffer and the chunk sampler.

Names are imported lazily so that ``robot_rl.data.normalize`` stays light (no torch, PyAV or zarr).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "DatasetError": "robot_rl.data.errors",
    "LeRobotWriter": "robot_rl.data.lerobot_writer",
    "LeRobotDataset": "robot_rl.data.lerobot_dataset",
    "ZarrReplayBuffer": "robot_rl.data.replay",
    "ChunkSampler": "robot_rl.data.sampler",
    "VideoDecoder": "robot_rl.data.video",
    "encode_video": "robot_rl.data.video",
    "default_codec": "robot_rl.data.video",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'robot_rl.data' has no attribute {name!r}")
