"""Leader-arm teleoperation: a second SO-101, limp, moved by a person, mapped joint to joint onto a follower.

Both arms are calibrated to the same zero pose (the SO-101 URDF's; see
:mod:`robot_rl.hardware.drivers.so101`), so the leader's joint angles are the follower's joint targets,
clipped to the follower's joint limits, and the leader's gripper closure (0 open, 1 closed) is the
follower's gripper target. As an intervention device (``robot-rl record --teleop leader``), each
:meth:`LeaderArm.poll` returns the action ``[q_1..q_5 (rad), gripper (0..1)]`` float32 (6,) of a follower
driven in ``joint_position`` mode; the human drives every step (the leader has no buttons, so episode
labels come from another device).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from robot_rl.config import RobotConfig
from robot_rl.hardware.drivers.so101 import SO101Robot
from robot_rl.hardware.errors import HardwareError
from robot_rl.hardware.robot import Command, CommandMode, RobotLimits, RobotState
from robot_rl.runtime.intervention import DeviceError, HumanInput


class LeaderArm:
    """A leader SO-101 read as a teleop device (an ``InterventionDevice``).

    Args:
        port: serial device of the leader's bus.
        calibration: the leader's calibration JSON file.
        follower_limits: the follower's :class:`RobotLimits` (joint targets are clipped to its
            ``joint_low``/``joint_high``); ``None`` leaves them unclipped (the follower clips to its own
            calibrated range anyway).
        timeout_s: the bus's status-packet timeout (s); ``None``: the SDK's 34 ms.

    Raises:
        CalibrationError: the leader's calibration file is missing or malformed.
        ValueError: ``follower_limits`` is not a 5-joint arm.
    """

    def __init__(
        self,
        port: str,
        calibration: str | Path,
        follower_limits: RobotLimits | None = None,
        timeout_s: float | None = None,
    ) -> None:
        if follower_limits is not None and follower_limits.num_joints != 5:
            raise ValueError(
                f"the SO-101 leader maps 5 arm joints; the follower has {follower_limits.num_joints} "
                f"({follower_limits.joint_names})"
            )
        self.arm = SO101Robot(port, calibration, torque=False, name="so101 leader", timeout_s=timeout_s)
        self.follower_limits = follower_limits

    @classmethod
    def from_config(
        cls, cfg: RobotConfig, follower_limits: RobotLimits | None = None, timeout_s: float | None = None
    ) -> LeaderArm:
        """The leader at ``cfg.port`` with ``cfg.calibration`` (an ``so101`` robot config of the leader).

        Raises:
            ValueError: ``port`` or ``calibration`` is empty (names the key).
        """
        for key in ("port", "calibration"):
            if not getattr(cfg, key):
                raise ValueError(f"the leader arm's {key} is required")
        return cls(cfg.port, cfg.calibration, follower_limits, timeout_s)

    def connect(self) -> None:
        """Open the leader's bus and make it limp. Raises like ``SO101Robot.connect``."""
        self.arm.connect()

    def close(self) -> None:
        self.arm.disconnect()

    def __enter__(self) -> LeaderArm:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self) -> RobotState:
        """The leader's state (rad, gripper closure)."""
        return self.arm.read()

    def command(self, state: RobotState | None = None) -> Command:
        """The follower's ``joint_position`` command for the leader's ``state`` (read now when None):
        joint angles clipped to the follower's limits, gripper closure passed through, timestamp of the
        reading."""
        state = self.read() if state is None else state
        q = state.joint_pos
        if self.follower_limits is not None:
            q = np.clip(q, self.follower_limits.joint_low, self.follower_limits.joint_high)
        return Command(CommandMode.JOINT_POSITION, q, gripper=state.gripper, timestamp=state.timestamp)

    def reset(self, env_seed: int) -> None:
        """Episode start: connect if needed (the leader has no episode state)."""
        if not self.arm.is_connected:
            self._guard(self.connect)

    def poll(self, obs: dict[str, np.ndarray]) -> HumanInput:
        """The human's action for this step: ``[q_1..q_5, gripper]`` float32 (6,), always driving.

        Raises:
            DeviceError: the leader cannot be read (port lost, servo silent or faulty); the message names
                the leader and the cause.
        """
        cmd = self._guard(self.command)
        return HumanInput(np.append(cmd.value, cmd.gripper).astype(np.float32), None)

    def _guard(self, fn):
        try:
            return fn()
        except HardwareError as e:
            raise DeviceError(f"leader arm on {self.arm.bus.port!r}: {e}") from e
