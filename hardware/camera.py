"""The ``Camera`` interface (OpenCV/V4L2, RealSense, recorded video, the sim-backed robot's renders).

A frame is RGB uint8 (H, W, 3) with the capture time in s (``time.monotonic()`` of the host), the form
``observation.images.<cam>`` takes in environments and datasets (docs/design.md §3).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Frame:
    """``image``: uint8 (H, W, 3) RGB; ``timestamp``: capture time (s, monotonic); ``depth``: optional
    float32 (H, W) depth (m) for cameras that have it."""

    image: np.ndarray
    timestamp: float
    depth: np.ndarray | None = None


class Camera(abc.ABC):
    """A camera. Use as a context manager to open and close it.

    :meth:`read` raises :class:`~robot_rl.hardware.errors.CameraError` naming the camera when it cannot
    open or when no new frame arrives within ``timeout_s``.
    """

    name: str = "camera"

    @abc.abstractmethod
    def connect(self) -> None: ...

    @abc.abstractmethod
    def disconnect(self) -> None: ...

    @abc.abstractmethod
    def read(self, timeout_s: float = 1.0) -> Frame:
        """The next frame (RGB uint8 (H, W, 3)); raises ``CameraError`` after ``timeout_s`` without one."""

    def __enter__(self) -> Camera:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.disconnect()
