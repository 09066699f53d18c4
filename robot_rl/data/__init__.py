"""Datasets: ``lerobot/`` (the LeRobot format: reader, writer, video, validation, operations), ``convert/``
(other demo formats), ``training/`` (training set, frames, chunk sampler, loader), the zarr replay buffer
(``replay``) and normalisation statistics (``normalize``).

Names are imported lazily so that ``robot_rl.data.normalize`` stays light (no torch, PyAV or zarr).
"""

from __future__ import annotations

from robot_rl.lazy import lazy_getattr

_EXPORTS = {
    "DatasetError": "robot_rl.data.errors",
    "LeRobotWriter": "robot_rl.data.lerobot.writer",
    "LeRobotDataset": "robot_rl.data.lerobot.reader",
    "ZarrReplayBuffer": "robot_rl.data.replay",
    "ChunkSampler": "robot_rl.data.training.sampler",
    "VideoDecoder": "robot_rl.data.lerobot.video",
    "encode_video": "robot_rl.data.lerobot.video",
    "default_codec": "robot_rl.data.lerobot.video",
}
__all__ = list(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
