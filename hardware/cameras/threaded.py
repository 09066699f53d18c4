"""``ThreadedCamera``: a background thread grabs frames as the device delivers them, and :meth:`read`
returns the newest one not yet returned, so a slow control loop never reads a stale, buffered frame."""

from __future__ import annotations

import abc
import threading

from robot_rl.hardware.camera import Camera, Frame
from robot_rl.hardware.errors import CameraError


class ThreadedCamera(Camera):
    """Base of the device cameras. Subclasses implement :meth:`_open` (raise ``CameraError`` naming the
    camera), :meth:`_grab` (block until the next frame; ``None`` for end of stream; may raise) and
    :meth:`_close`.

    Args:
        name: the camera's name in ``env.robot.cameras`` (every error message names it).
        source: the device, path or serial, for messages.
    """

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._latest: Frame | None = None
        self._count = 0
        self._returned = 0
        self._ended = False
        self._error: BaseException | None = None

    @abc.abstractmethod
    def _open(self) -> None: ...

    @abc.abstractmethod
    def _grab(self) -> Frame | None: ...

    @abc.abstractmethod
    def _close(self) -> None: ...

    @property
    def label(self) -> str:
        """``camera '<name>' (<source>)``, the prefix of every message."""
        return f"camera {self.name!r} ({self.source})"

    @property
    def frames_grabbed(self) -> int:
        """Frames the background thread has received since :meth:`connect`."""
        return self._count

    def connect(self) -> None:
        """Open the device and start the grabbing thread (no-op when already open).

        Raises:
            CameraError: the device cannot be opened (names the camera and its source).
            MissingExtraError: the camera's SDK is not installed (names the extra).
        """
        if self._thread is not None:
            return
        self._open()
        self._stop.clear()
        self._latest, self._count, self._returned, self._ended, self._error = None, 0, 0, False, None
        self._thread = threading.Thread(target=self._loop, name=f"camera-{self.name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                frame = self._grab()
                if frame is None:
                    break
                with self._cond:
                    self._latest = frame
                    self._count += 1
                    self._cond.notify_all()
        except Exception as err:  # kept and named by read(): a grabbing thread must not die silently
            self._error = err
        finally:
            with self._cond:
                self._ended = True
                self._cond.notify_all()

    def read(self, timeout_s: float = 1.0) -> Frame:
        """The newest frame not returned before (RGB uint8 (H, W, 3), capture time in s, monotonic).

        Raises:
            CameraError: not connected; no new frame within ``timeout_s``; or the stream ended (end of a
                recorded file, a device error), naming the camera and frames received so far.
        """
        if self._thread is None:
            raise CameraError(f"{self.label}: not connected (call connect() first)")
        with self._cond:
            fresh = self._cond.wait_for(lambda: self._count > self._returned or self._ended, timeout_s)
            if self._count > self._returned:
                self._returned = self._count
                return self._latest
        if not fresh:
            raise CameraError(
                f"{self.label}: no new frame within {timeout_s:g} s ({self._count} received since connect)"
            )
        why = f": {type(self._error).__name__}: {self._error}" if self._error is not None else ""
        raise CameraError(f"{self.label}: stopped delivering frames after {self._count}{why}")

    def disconnect(self) -> None:
        """Stop the grabbing thread and close the device; safe to call twice."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5.0)
        self._thread = None
        self._close()
