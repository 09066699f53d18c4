"""``RealSenseCamera``: an Intel RealSense (D400/D405/L500 series) through ``pyrealsense2`` (extra
``realsense``), colour as RGB uint8 (H, W, 3) and, when ``depth`` is on, depth aligned to the colour frame
as float32 (H, W) in metres (0 where the sensor has no reading). The capture timestamp is the host's
``time.monotonic()`` when the frameset arrived (the device clock is not the host's).

Untested on a real device here: CI has no RealSense; the tests cover the missing-device error only.
"""

from __future__ import annotations

import time

import numpy as np

from robot_rl.config import CameraConfig, RobotConfig
from robot_rl.hardware.camera import Frame
from robot_rl.hardware.cameras.threaded import ThreadedCamera
from robot_rl.hardware.errors import CameraError
from robot_rl.hardware.sdk import import_sdk

WAIT_MS = 1000
"""How long the grabbing thread waits for one frameset (ms) before trying again."""


class RealSenseCamera(ThreadedCamera):
    """A RealSense camera.

    Args:
        name: camera name (in every error message).
        serial: the device's serial number; empty for the first one found.
        width, height: colour (and depth) stream size (pixels), one the device supports (e.g. 640x480).
        fps: stream rate (Hz), one the device supports (6, 15, 30, 60, 90).
        depth: also stream depth aligned to colour.

    Raises (from :meth:`connect`):
        MissingExtraError: pyrealsense2 is not installed (``pip install 'robot-rl[realsense]'``).
        CameraError: no RealSense (or none with ``serial``) is connected, or the stream cannot start.
    """

    def __init__(
        self, name: str, serial: str = "", width: int = 640, height: int = 480, fps: float = 30.0, depth=False
    ) -> None:
        super().__init__(name, serial or "first RealSense found")
        self.serial, self.width, self.height, self.fps, self.depth = serial, width, height, fps, depth
        self._pipeline = None
        self._align = None
        self._depth_scale = 0.0

    @classmethod
    def from_config(cls, name: str, cfg: CameraConfig, robot: RobotConfig) -> RealSenseCamera:
        """The camera of ``env.robot.cameras.<name>`` (``driver: realsense``, ``source``: serial or empty)."""
        return cls(name, cfg.source, cfg.width, cfg.height, cfg.fps, cfg.depth)

    def _open(self) -> None:
        rs = import_sdk("pyrealsense2", "realsense", f"{self.label} (driver realsense)")
        serials = [d.get_info(rs.camera_info.serial_number) for d in rs.context().query_devices()]
        # pipeline.start() waits ~15 s before saying "No device connected": check first
        if not serials or (self.serial and self.serial not in serials):
            raise CameraError(f"{self.label}: no such RealSense connected (found: {serials or 'none'})")
        config = rs.config()
        if self.serial:
            config.enable_device(self.serial)
        config.enable_stream(rs.stream.color, self.width, self.height, rs.format.rgb8, int(self.fps))
        if self.depth:
            config.enable_stream(rs.stream.depth, self.width, self.height, rs.format.z16, int(self.fps))
            self._align = rs.align(rs.stream.color)
        pipeline = rs.pipeline()
        try:
            profile = pipeline.start(config)
        except RuntimeError as err:
            raise CameraError(f"{self.label}: cannot start the stream: {err}") from err
        if self.depth:
            self._depth_scale = profile.get_device().first_depth_sensor().get_depth_scale()
        self._pipeline = pipeline

    def _grab(self) -> Frame | None:
        while not self._stop.is_set():
            ok, frames = self._pipeline.try_wait_for_frames(WAIT_MS)
            if not ok:
                continue  # read() times out and names the camera
            stamp = time.monotonic()
            if self._align is not None:
                frames = self._align.process(frames)
            image = np.asanyarray(frames.get_color_frame().get_data()).copy()
            depth = None
            if self._align is not None:
                raw = np.asanyarray(frames.get_depth_frame().get_data())
                depth = raw.astype(np.float32) * np.float32(self._depth_scale)
            return Frame(image=image, timestamp=stamp, depth=depth)
        return None

    def _close(self) -> None:
        if self._pipeline is not None:
            self._pipeline.stop()
            self._pipeline = None
