"""Typed hardware errors: every driver, the safety layer and the robot server raise these, so callers can
tell a lost link (hold and retry) from a fault (stop and ask a human) from a refused command."""

from __future__ import annotations

from robot_rl.extras import MissingExtraError

__all__ = [
    "CalibrationError",
    "CameraError",
    "CommandRejected",
    "HardwareError",
    "MissingExtraError",
    "RobotConnectionError",
    "RobotFault",
    "RobotTimeoutError",
]


class HardwareError(RuntimeError):
    """Base of every hardware error; the message names the device (robot, port, camera) involved.
    A driver whose vendor SDK is missing raises :class:`robot_rl.extras.MissingExtraError` (also importable
    from here), which names the ``pip install`` extra."""


class RobotConnectionError(HardwareError):
    """The robot cannot be reached, refused the connection, or the link dropped (port missing or busy,
    server down, no reply within the timeout)."""


class RobotTimeoutError(RobotConnectionError):
    """A read or command got no answer within its deadline (a servo that does not answer, a dropped
    packet)."""


class RobotFault(HardwareError):
    """The robot reports a fault (protective stop, servo error flag, checksum error) or is in a state
    where it must not move until a human resets it."""


class CommandRejected(HardwareError):
    """A command was refused before it reached the robot (wrong shape, non-finite, unsupported mode, or
    latched e-stop). The robot keeps its last safe command."""


class CalibrationError(HardwareError):
    """A calibration file is missing, malformed, or does not match the robot (joint names or count)."""


class CameraError(HardwareError):
    """A camera cannot be opened or stopped delivering frames; the message names the camera."""
