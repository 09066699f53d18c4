"""SO-101 kinematics: joint names, joint limits and forward kinematics, shared by the driver
(:mod:`robot_rl.hardware.drivers.so101`) and the servo-bus emulator's MuJoCo arm.

The kinematic chain is TheRobotStudio's ``Simulation/SO101/so101_new_calib.urdf`` (SO-ARM100 repository,
Apache-2.0): each joint's origin (``xyz`` m, ``rpy`` rad, URDF fixed-axis roll-pitch-yaw) in its parent
link and a revolute axis along the joint frame's z. In that URDF every joint is 0 in the pose LeRobot's
SO-101 calibration calls the middle of the range, which is the zero pose
:func:`robot_rl.hardware.drivers.so101.calibrate` records. The end-effector frame is the URDF's
``gripperframe`` (between the jaws' tips), fixed in the ``gripper`` link (the wrist-roll link). Only the
five arm joints move it; the sixth joint, ``gripper``, is the moving jaw.

The chain is not checked against a real arm here (only against the emulator's MuJoCo model built from the
same table): a real arm's ee pose is right only if its calibration zero pose and joint directions match
the URDF's.
"""

from __future__ import annotations

import math

import numpy as np

JOINT_NAMES = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
"""The SO-101's joints in bus order (servo ids 1..6 on a stock arm), named as LeRobot names them."""
ARM_JOINTS = JOINT_NAMES[:5]
"""The five joints that move the end effector; ``RobotState.joint_pos`` holds these (rad)."""
DEFAULT_IDS = (1, 2, 3, 4, 5, 6)
"""Servo ids of a stock SO-101 (one per joint of :data:`JOINT_NAMES`)."""

JOINT_ORIGINS = (
    ((0.0207909, -0.0230745, 0.0948817), (-3.14159, 6.03684e-16, 1.5708)),
    ((-0.0303992, -0.0182778, -0.0542), (-1.5708, -1.5708, 0.0)),
    ((-0.11257, -0.028, 2.46331e-16), (-1.22818e-15, 5.75928e-16, 1.5708)),
    ((-0.1349, 0.0052, 1.65232e-16), (3.2474e-15, 2.86219e-15, -1.5708)),
    ((0.0, -0.0611, 0.0181), (1.5708, -9.38083e-08, 3.14159)),
    ((0.0202, 0.0188, -0.0234), (1.5708, -5.14108e-17, -1.38655e-14)),
)
"""Per joint of :data:`JOINT_NAMES`: (xyz (m), rpy (rad)) of the joint frame in its parent link (URDF). The
gripper jaw's parent is the wrist-roll link."""
EE_ORIGIN = ((-0.0079, -0.000218121, -0.0981274), (1.5708, 1.22465e-16, 1.5708))
"""``gripperframe`` in the wrist-roll link: (xyz (m), rpy (rad))."""
JOINT_LOW = np.array([-1.91986, -1.74533, -1.69, -1.65806, -2.79253, -0.174533])
"""URDF lower limits (rad), per joint of :data:`JOINT_NAMES` (the jaw is closed at its lower limit)."""
JOINT_HIGH = np.array([1.91986, 1.74533, 1.69, 1.65806, 2.79253, 1.74533])
"""URDF upper limits (rad) (the jaw is fully open at its upper limit)."""
REACH_M = sum(math.dist((0, 0, 0), xyz) for xyz, _ in JOINT_ORIGINS[2:5]) + math.dist((0, 0, 0), EE_ORIGIN[0])
"""Upper bound of the end effector's distance from the shoulder-lift axis (m): the link lengths summed."""


def rpy_matrix(rpy: tuple[float, float, float]) -> np.ndarray:
    """URDF roll-pitch-yaw (rad, fixed axes x then y then z) -> 3x3 rotation ``Rz(y) @ Ry(p) @ Rx(r)``."""
    r, p, y = rpy
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def _transform(xyz: tuple[float, float, float], rpy: tuple[float, float, float]) -> np.ndarray:
    t = np.eye(4)
    t[:3, :3] = rpy_matrix(rpy)
    t[:3, 3] = xyz
    return t


def _rot_z(q: float) -> np.ndarray:
    t = np.eye(4)
    c, s = math.cos(q), math.sin(q)
    t[:2, :2] = [[c, -s], [s, c]]
    return t


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """3x3 rotation -> unit quaternion (w, x, y, z) with w >= 0 (Shepperd's method)."""
    tr = np.trace(m)
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = np.array([0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s])
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(1.0 + m[i, i] - m[j, j] - m[k, k])
        q = np.empty(4)
        q[0] = (m[k, j] - m[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (m[j, i] + m[i, j]) / s
        q[1 + k] = (m[k, i] + m[i, k]) / s
    q /= np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def forward_kinematics(arm_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """End-effector pose of the SO-101 in its base frame.

    Args:
        arm_q: float (5,) positions (rad) of :data:`ARM_JOINTS`, URDF zero and axis directions.

    Returns:
        (ee_pos float64 (3,) in m, ee_quat float64 (4,) unit (w, x, y, z)) of ``gripperframe``.

    Raises:
        ValueError: ``arm_q`` is not (5,).
    """
    q = np.asarray(arm_q, dtype=np.float64)
    if q.shape != (5,):
        raise ValueError(f"forward_kinematics needs the 5 arm joint positions, got shape {q.shape}")
    t = np.eye(4)
    for (xyz, rpy), angle in zip(JOINT_ORIGINS[:5], q, strict=True):
        t = t @ _transform(xyz, rpy) @ _rot_z(angle)
    t = t @ _transform(*EE_ORIGIN)
    return t[:3, 3].copy(), matrix_to_quat(t[:3, :3])
