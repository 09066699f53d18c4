"""``OpenCVCamera``: a USB/V4L2 camera by device index (``"0"``) or path (``/dev/video2``,
``/dev/v4l/by-id/...``) through OpenCV (extra ``cameras``: ``opencv-python-headless``). A path that is a
regular file (a recorded video) is opened with OpenCV's FFmpeg backend and read as fast as it decodes.

Frames are converted from OpenCV's BGR to RGB uint8 (H, W, 3); the capture timestamp is the host's
``time.monotonic()`` when the grab returned (OpenCV exposes no device clock for V4L2).
"""

from __future__ import annotations

import os
import sys
import time

from robot_rl.config import CameraConfig, RobotConfig
from robot_rl.hardware.camera import Frame
from robot_rl.hardware.cameras.threaded import ThreadedCamera
from robot_rl.hardware.errors import CameraError
from robot_rl.hardware.sdk import import_sdk

GRAB_RETRY_S = 0.01
"""Pause (s) after a failed grab before trying again (a USB hiccup or the end of a file)."""


class OpenCVCamera(ThreadedCamera):
    """A camera OpenCV can open.

    Args:
        name: camera name (in every error message).
        source: device index as a string of digits, or a device or file path.
        width, height: requested frame size (pixels); the device may pick another, reported by the frames.
        fps: requested rate (Hz).

    Raises (from :meth:`connect`):
        MissingExtraError: opencv-python-headless is not installed (``pip install 'robot-rl[cameras]'``).
        CameraError: the path does not exist or OpenCV cannot open the device (names camera and source).
    """

    def __init__(self, name: str, source: str = "0", width: int = 640, height: int = 480, fps: float = 30.0):
        super().__init__(name, source)
        self.width, self.height, self.fps = width, height, fps
        self._cap = None
        self._cv2 = None

    @classmethod
    def from_config(cls, name: str, cfg: CameraConfig, robot: RobotConfig) -> OpenCVCamera:
        """The camera of ``env.robot.cameras.<name>`` (``driver: opencv``)."""
        return cls(name, cfg.source, cfg.width, cfg.height, cfg.fps)

    def _open(self) -> None:
        cv2 = self._cv2 = import_sdk("cv2", "cameras", f"{self.label} (driver opencv)")
        is_index = self.source.isdigit()
        if not is_index and not os.path.exists(self.source):
            raise CameraError(f"{self.label}: no such device or file {self.source!r}")
        is_file = not is_index and os.path.isfile(self.source)
        backend = cv2.CAP_V4L2 if sys.platform.startswith("linux") and not is_file else cv2.CAP_ANY
        cap = cv2.VideoCapture(int(self.source) if is_index else self.source, backend)
        if not cap.isOpened():
            cap.release()
            raise CameraError(f"{self.label}: OpenCV cannot open it (busy, not a camera, or no permission)")
        if not is_file:
            cap.set(cv2.CAP_PROP_FRAME_WIDTH, self.width)
            cap.set(cv2.CAP_PROP_FRAME_HEIGHT, self.height)
            cap.set(cv2.CAP_PROP_FPS, self.fps)
            cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)
        self._cap = cap

    def _grab(self) -> Frame | None:
        while not self._stop.is_set():
            ok, bgr = self._cap.read()
            stamp = time.monotonic()
            if ok:
                return Frame(image=self._cv2.cvtColor(bgr, self._cv2.COLOR_BGR2RGB), timestamp=stamp)
            self._stop.wait(GRAB_RETRY_S)  # no frame: read() times out and names the camera
        return None

    def _close(self) -> None:
        if self._cap is not None:
            self._cap.release()
            self._cap = None
