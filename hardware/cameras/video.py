"""``VideoCamera``: a recorded video file played at its own frame rate through PyAV (a core dependency),
for tests and for replaying a session. Frames are RGB uint8 (H, W, 3) at the file's size (``width``,
``height`` and ``fps`` of the camera config are not used); frame i is released ``pts_i`` seconds after
:meth:`connect`, stamped with the host's ``time.monotonic()`` at release. At the end of the file the
camera stops delivering frames and :meth:`read` raises ``CameraError`` naming it.
"""

from __future__ import annotations

import os
import time

import av

from robot_rl.config import CameraConfig, RobotConfig
from robot_rl.hardware.camera import Frame
from robot_rl.hardware.cameras.threaded import ThreadedCamera
from robot_rl.hardware.errors import CameraError


class VideoCamera(ThreadedCamera):
    """A video file as a camera.

    Args:
        name: camera name (in every error message).
        path: the video file.

    Raises (from :meth:`connect`):
        CameraError: the file is missing, not a video, or has no video stream (names camera and path).
    """

    def __init__(self, name: str, path: str) -> None:
        super().__init__(name, path)
        self._container = None
        self._frames = None
        self._start = 0.0

    @classmethod
    def from_config(cls, name: str, cfg: CameraConfig, robot: RobotConfig) -> VideoCamera:
        """The camera of ``env.robot.cameras.<name>`` (``driver: video``, ``source``: the file)."""
        return cls(name, cfg.source)

    @property
    def fps(self) -> float:
        """The file's average frame rate (Hz); valid after :meth:`connect`."""
        return float(self._container.streams.video[0].average_rate)

    def _open(self) -> None:
        if not os.path.isfile(self.source):
            raise CameraError(f"{self.label}: no such video file")
        try:
            self._container = av.open(self.source)
            stream = self._container.streams.video[0]
        except (av.FFmpegError, IndexError) as err:
            raise CameraError(f"{self.label}: not a readable video: {err}") from err
        self._frames = self._container.decode(stream)
        self._start = time.monotonic()

    def _grab(self) -> Frame | None:
        try:
            frame = next(self._frames)
        except StopIteration:
            return None
        due = self._start + float(frame.time or 0.0)
        self._stop.wait(max(0.0, due - time.monotonic()))
        return Frame(image=frame.to_ndarray(format="rgb24"), timestamp=time.monotonic())

    def _close(self) -> None:
        if self._container is not None:
            self._container.close()
            self._container = None
