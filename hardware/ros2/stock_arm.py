"""What a stock ros2_control + MoveIt Panda exchanges, for ``sim_robot_node mode:=stock``: Franka's joint
names, the fingers as joints in metres, and the messages of its controllers.

State: ``/joint_states`` with :data:`ARM_JOINTS` (rad) and :data:`FINGER_JOINTS` (m, each finger's opening
from the hand's centre, 0 closed to :data:`FINGER_OPEN_M` open), as ``joint_state_broadcaster`` publishes
them. The simulated hand is a Robotiq 2F-85 driven by a closure in [0, 1]; it is shown as the Panda's two
fingers at ``FINGER_OPEN_M * (1 - closure)`` each. Gripper commands: a JointTrajectory naming
``panda_finger_joint1`` (and optionally ``panda_finger_joint2`` at the same opening) in m, what a
JointTrajectoryController on the fingers takes (``control_msgs/GripperCommand`` has no PyPI wheel, so the
gripper action controller is not offered).
"""

from __future__ import annotations

import numpy as np

from robot_rl.hardware.robot import RobotState
from robot_rl.hardware.ros2 import msgs, validate

ARM_JOINTS = [f"panda_joint{i}" for i in range(1, 8)]
FINGER_JOINTS = ["panda_finger_joint1", "panda_finger_joint2"]
FINGER_OPEN_M = 0.04
"""Each Panda finger's travel (m): 0.04 open, 0 closed."""


def finger_opening(closure: float) -> float:
    """Each finger's opening (m) at gripper ``closure`` in [0, 1] (0 open)."""
    return FINGER_OPEN_M * (1.0 - float(np.clip(closure, 0.0, 1.0)))


def joint_state(state: RobotState, header: msgs.Header) -> msgs.JointState:
    """``/joint_states`` of ``state``: the arm (rad, rad/s) and both fingers (m; velocity 0)."""
    fingers = [finger_opening(state.gripper)] * 2
    return msgs.JointState(
        header,
        [*ARM_JOINTS, *FINGER_JOINTS],
        [*state.joint_pos.tolist(), *fingers],
        [*state.joint_vel.tolist(), 0.0, 0.0],
        [],
    )


def gripper_closure(msg: msgs.JointTrajectory) -> float:
    """The closure in [0, 1] a finger trajectory asks for (its last point; module doc).

    Raises:
        validate.Rejected: no points, ``panda_finger_joint1`` not named, positions not one per name,
            NaN/inf, an opening outside [0, FINGER_OPEN_M] m, or the two fingers asked apart.
    """
    names = list(msg.joint_names)
    if not msg.points:
        raise validate.Rejected("gripper trajectory has no points")
    if FINGER_JOINTS[0] not in names or any(n not in FINGER_JOINTS for n in names):
        raise validate.Rejected(
            f"gripper trajectory must name {FINGER_JOINTS[0]} (and {FINGER_JOINTS[1]}), got {names}"
        )
    pos = np.asarray(msg.points[-1].positions, dtype=np.float64)
    if pos.size != len(names) or not np.all(np.isfinite(pos)):
        raise validate.Rejected(f"gripper trajectory positions {pos.tolist()} do not match {names}")
    if np.any(pos < -1e-9) or np.any(pos > FINGER_OPEN_M + 1e-9) or np.ptp(pos) > 1e-6:
        raise validate.Rejected(
            f"gripper trajectory openings {pos.tolist()} m: each must be in [0, {FINGER_OPEN_M}] and equal"
        )
    return float(1.0 - pos[0] / FINGER_OPEN_M)
