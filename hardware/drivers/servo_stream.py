"""``ServoStreamer``: a driver-side interpolator for arms whose servo mode wants a fast stream of near
setpoints (an xArm in mode 1: UFACTORY asks for 100-250 Hz and at most 10 mm between setpoints, and a
farther one is not executed). The control loop sets a target at its own rate (10-30 Hz); a daemon thread
moves the setpoint towards it by at most one step per period and sends each new setpoint, so the speed
is capped at ``step * rate_hz`` whatever the control loop asks.

Setpoints are float64 vectors: joint positions (n,) rad (:func:`joint_advance`) or a pose (7,): position
(m) then unit quaternion (w, x, y, z) (:func:`pose_advance`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from robot_rl.hardware.drivers.arm_common import quat_from_rotvec, quat_mul, rotvec_from_quat
from robot_rl.hardware.errors import HardwareError, RobotConnectionError

Advance = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""``(setpoint, target) -> next setpoint``, equal to ``target`` (the same values) once within one step."""


def joint_advance(max_step: float) -> Advance:
    """Joint setpoints (n,) rad moved by at most ``max_step`` rad per joint and period."""

    def advance(setpoint: np.ndarray, target: np.ndarray) -> np.ndarray:
        diff = target - setpoint
        if np.all(np.abs(diff) <= max_step):
            return target.copy()
        return setpoint + np.clip(diff, -max_step, max_step)

    return advance


def pose_advance(max_linear: float, max_angular: float) -> Advance:
    """Pose setpoints (7,) (position m, quaternion (w, x, y, z)): the position moved along the straight
    line by at most ``max_linear`` m, the orientation about the shortest axis by at most ``max_angular``
    rad, per period."""

    def advance(setpoint: np.ndarray, target: np.ndarray) -> np.ndarray:
        out = target.copy()
        move = target[:3] - setpoint[:3]
        dist = float(np.linalg.norm(move))
        if dist > max_linear:
            out[:3] = setpoint[:3] + move * (max_linear / dist)
        conj = setpoint[3:] * np.array([1.0, -1.0, -1.0, -1.0])
        turn = rotvec_from_quat(quat_mul(target[3:], conj))
        angle = float(np.linalg.norm(turn))
        if angle > max_angular:
            quat = quat_mul(quat_from_rotvec(turn * (max_angular / angle)), setpoint[3:])
            out[3:] = quat / np.linalg.norm(quat)
        return out

    return advance


class ServoStreamer:
    """Streams setpoints from ``start`` towards the latest :meth:`set_target` at ``rate_hz``.

    Args:
        name: the robot's name, for errors.
        start: the first setpoint (the measured joints or pose), float64.
        advance: one period's move (:func:`joint_advance`, :func:`pose_advance`).
        send: sends one setpoint to the arm; a :class:`HardwareError` it raises (any other exception
            becomes a ``RobotConnectionError``) stops the stream and is raised by the next
            :meth:`set_target`.
        rate_hz: setpoints per second while moving (nothing is sent once the target is reached).
    """

    def __init__(
        self,
        name: str,
        start: np.ndarray,
        advance: Advance,
        send: Callable[[np.ndarray], None],
        rate_hz: float,
    ) -> None:
        self.name, self.period = name, 1.0 / rate_hz
        self._advance, self._send = advance, send
        self._setpoint = np.asarray(start, dtype=np.float64).copy()
        self._target = self._setpoint.copy()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._error: HardwareError | None = None
        self._thread = threading.Thread(target=self._run, name=f"{name}-servo-stream", daemon=True)
        self._thread.start()

    def set_target(self, target: np.ndarray) -> None:
        """The setpoint to stream towards (same layout as ``start``).

        Raises:
            HardwareError: the error that stopped the stream (a failed send).
        """
        if self._error is not None:
            raise self._error
        with self._lock:
            self._target = np.asarray(target, dtype=np.float64).copy()

    def stop(self) -> None:
        """Stop streaming (the arm holds the last setpoint sent); safe to call twice."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        deadline = time.monotonic()
        while not self._stop.wait(max(0.0, deadline - time.monotonic())):
            now = time.monotonic()
            deadline = deadline + self.period if deadline + self.period > now else now + self.period
            with self._lock:
                target = self._target
            nxt = self._advance(self._setpoint, target)
            if np.array_equal(nxt, self._setpoint):
                continue
            try:
                self._send(nxt)
            except HardwareError as err:
                self._error = err
                return
            except Exception as err:  # an SDK that raises instead of returning a code: the link is gone
                self._error = RobotConnectionError(f"{self.name}: servo stream stopped: {err!r}")
                return
            self._setpoint = nxt
