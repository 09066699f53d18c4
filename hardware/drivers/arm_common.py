"""Shared by the vendor arm drivers (UR, xArm, Franka): the controller's host from ``env.robot.address``,
orientation conversions between the vendors' forms and the interface's unit quaternion (w, x, y, z), and
the check of joint targets against an arm's hard limits before a command is sent."""

from __future__ import annotations

import numpy as np

from robot_rl.config_checks import controller_host_problem
from robot_rl.hardware.errors import CommandRejected
from robot_rl.hardware.robot import RobotLimits


def controller_host(address: str, driver: str) -> str:
    """The controller's IP or hostname from ``env.robot.address`` (``"192.168.1.10"``, or with a
    ``tcp://`` prefix). The vendor SDKs use fixed ports, so a port is an error.

    Raises:
        ValueError: empty address or one with a port, naming ``env.robot.address``.
    """
    reason = controller_host_problem(address)
    if reason is not None:
        raise ValueError(f"env.robot.address={address!r}: driver {driver} {reason}")
    return address.removeprefix("tcp://").strip()


def quat_from_rotvec(rotvec: np.ndarray) -> np.ndarray:
    """Rotation vector (3,) (axis times angle, rad) -> unit quaternion (4,) (w, x, y, z)."""
    rotvec = np.asarray(rotvec, dtype=np.float64)
    angle = float(np.linalg.norm(rotvec))
    if angle < 1e-12:
        return np.array([1.0, 0.0, 0.0, 0.0])
    return np.array([np.cos(angle / 2), *(np.sin(angle / 2) * rotvec / angle)])


def rotvec_from_quat(quat: np.ndarray) -> np.ndarray:
    """Unit quaternion (4,) (w, x, y, z) -> rotation vector (3,) (rad), angle in [0, pi]."""
    w, xyz = float(quat[0]), np.asarray(quat[1:], dtype=np.float64)
    if w < 0:
        w, xyz = -w, -xyz
    s = float(np.linalg.norm(xyz))
    if s < 1e-12:
        return 2.0 * xyz
    return 2.0 * np.arctan2(s, w) * xyz / s


def quat_from_rpy(rpy: np.ndarray) -> np.ndarray:
    """Roll, pitch, yaw (3,) (rad; fixed axes x, y, z: R = Rz(yaw) Ry(pitch) Rx(roll), xArm's convention)
    -> unit quaternion (4,) (w, x, y, z)."""
    r, p, y = (0.5 * float(a) for a in rpy)
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array(
        [
            cr * cp * cy + sr * sp * sy,
            sr * cp * cy - cr * sp * sy,
            cr * sp * cy + sr * cp * sy,
            cr * cp * sy - sr * sp * cy,
        ]
    )


def rpy_from_quat(quat: np.ndarray) -> np.ndarray:
    """Unit quaternion (4,) (w, x, y, z) -> roll, pitch, yaw (3,) (rad), the inverse of
    :func:`quat_from_rpy` (pitch in [-pi/2, pi/2])."""
    w, x, y, z = (float(q) for q in quat)
    roll = np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = np.arcsin(np.clip(2 * (w * y - z * x), -1.0, 1.0))
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return np.array([roll, pitch, yaw])


def check_joint_targets(q: np.ndarray, limits: RobotLimits, robot: str) -> None:
    """Refuse joint targets (n,) (rad) outside the arm's hard limits; the safety layer clips well inside
    them, this is the driver's last check before the vendor controller.

    Raises:
        CommandRejected: naming the robot, the joint and its limits (rad).
    """
    bad = np.flatnonzero((q < limits.joint_low) | (q > limits.joint_high))
    if bad.size:
        i = int(bad[0])
        raise CommandRejected(
            f"{robot}: joint {limits.joint_names[i]} target {q[i]:.4f} rad outside its limits "
            f"[{limits.joint_low[i]:.4f}, {limits.joint_high[i]:.4f}] rad"
        )


def check_joint_speeds(qd: np.ndarray, limits: RobotLimits, robot: str) -> None:
    """Refuse joint velocities (n,) (rad/s) beyond the arm's speed limits.

    Raises:
        CommandRejected: naming the robot, the joint and its limit (rad/s).
    """
    bad = np.flatnonzero(np.abs(qd) > limits.joint_vel_max)
    if bad.size:
        i = int(bad[0])
        raise CommandRejected(
            f"{robot}: joint {limits.joint_names[i]} speed {qd[i]:.4f} rad/s beyond its limit "
            f"{limits.joint_vel_max[i]:.4f} rad/s"
        )


def quat_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Hamilton product ``a * b`` of quaternions (4,) (w, x, y, z): rotation ``b`` then ``a``."""
    aw, ax, ay, az = a
    bw, bx, by, bz = b
    return np.array(
        [
            aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
        ]
    )


def apply_ee_delta(pos: np.ndarray, quat: np.ndarray, delta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """An ``ee_delta`` command applied to a target pose: position (3,) m plus ``delta[:3]`` (m, base
    frame); for a (6,) delta the orientation is rotated by the rotation vector ``delta[3:]`` (rad, base
    frame). Returns the new (position (3,), unit quaternion (4,) (w, x, y, z))."""
    new_pos = np.asarray(pos, dtype=np.float64) + delta[:3]
    new_quat = np.asarray(quat, dtype=np.float64)
    if delta.shape == (6,):
        new_quat = quat_mul(quat_from_rotvec(delta[3:]), new_quat)
        new_quat /= np.linalg.norm(new_quat)
    return new_pos, new_quat
