"""Build the robot and cameras an ``env.robot`` config names, importing each driver lazily.

Every driver class has ``from_config(cfg: RobotConfig, control_hz: float = <its default>) -> Robot``;
every camera class has ``from_config(name: str, cfg: CameraConfig, robot: RobotConfig) -> Camera``. A
driver whose vendor SDK is missing raises :class:`~robot_rl.hardware.errors.MissingExtraError` naming
the extra.
"""

from __future__ import annotations

import importlib

from robot_rl.config import CameraConfig, RobotConfig
from robot_rl.hardware.camera import Camera
from robot_rl.hardware.robot import Robot

ROBOTS = {
    "sim": "robot_rl.hardware.sim_robot:MujocoRobot",
    "sim_server": "robot_rl.hardware.drivers.sim_server:SimServerRobot",
    "so101": "robot_rl.hardware.drivers.so101:SO101Robot",
    "ur": "robot_rl.hardware.drivers.ur:URRobot",
    "xarm": "robot_rl.hardware.drivers.xarm:XArmRobot",
    "franka": "robot_rl.hardware.drivers.franka:FrankaRobot",
    "ros2": "robot_rl.hardware.ros2.bridge:RosRobot",
}
"""``env.robot.driver`` -> ``module:Class`` of its :class:`Robot`."""
GRIPPERLESS_DRIVERS = ("ur",)
"""Drivers that drive no gripper (a UR's RTDE link carries none)."""
CAMERAS = {
    "opencv": "robot_rl.hardware.cameras.opencv:OpenCVCamera",
    "realsense": "robot_rl.hardware.cameras.realsense:RealSenseCamera",
    "video": "robot_rl.hardware.cameras.video:VideoCamera",
    "sim": "robot_rl.hardware.drivers.sim_server:SimServerCamera",
    "ros2": "robot_rl.hardware.ros2.bridge:RosCamera",
}
"""``env.robot.cameras.<name>.driver`` -> ``module:Class`` of its :class:`Camera`."""


def _load(table: dict[str, str], name: str, what: str) -> type:
    if name not in table:
        raise ValueError(f"unknown {what} {name!r}; available: {sorted(table)}")
    module, cls = table[name].split(":")
    return getattr(importlib.import_module(module), cls)


def make_robot(cfg: RobotConfig, control_hz: float | None = None) -> Robot:
    """The (unconnected) :class:`Robot` of ``cfg.driver``, commanded at ``control_hz`` (Hz; None: the
    driver's default rate).

    Raises:
        ValueError: unknown driver.
        MissingExtraError: the driver's SDK is not installed (names the extra).
    """
    cls = _load(ROBOTS, cfg.driver, "env.robot.driver")
    return cls.from_config(cfg) if control_hz is None else cls.from_config(cfg, control_hz=control_hz)


def has_gripper(cfg: RobotConfig) -> bool:
    """Whether the env drives a gripper: ``env.robot.gripper=auto`` on a driver with one (all but
    :data:`GRIPPERLESS_DRIVERS`); ``none`` never."""
    return cfg.gripper == "auto" and cfg.driver not in GRIPPERLESS_DRIVERS


def make_cameras(cfg: RobotConfig) -> dict[str, Camera]:
    """The (unopened) cameras of ``cfg.cameras``, by name. Raises like :func:`make_robot`."""
    return {name: make_camera(name, cam, cfg) for name, cam in cfg.cameras.items()}


def make_camera(name: str, cam: CameraConfig, robot: RobotConfig) -> Camera:
    """One camera; raises like :func:`make_robot`."""
    return _load(CAMERAS, cam.driver, f"env.robot.cameras.{name}.driver").from_config(name, cam, robot)
