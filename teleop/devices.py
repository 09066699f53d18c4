"""``make_device``: the intervention device named by ``InterventionConfig.device``."""

from __future__ import annotations

from typing import get_args

import numpy as np

from robot_rl.config import InterventionConfig, InterventionDeviceName
from robot_rl.runtime.intervention import InterventionDevice
from robot_rl.teleop.gamepad import GamepadDevice
from robot_rl.teleop.gui.device import GuiDevice
from robot_rl.teleop.keyboard import KeyboardDevice
from robot_rl.teleop.spacemouse import SpaceMouseDevice

DEVICES: tuple[str, ...] = get_args(InterventionDeviceName)


def make_device(
    cfg: InterventionConfig,
    action_low: np.ndarray,
    action_high: np.ndarray,
    actor_id: int = 0,
    control_hz: float = 10.0,
    task_id: str = "",
) -> InterventionDevice | None:
    """Build the device ``cfg.device`` for an env with action box ``[action_low, action_high]``.

    ``none`` -> None (no intervention); ``sim_human`` -> the scripted simulated human of the env ``task_id``
    (thresholds from ``cfg``): :class:`~robot_rl.teleop.task_human.TaskHuman` for place-in-bin, stack,
    push-to-target and open-drawer, else :class:`~robot_rl.teleop.sim_human.SimulatedHuman` (pick-cube,
    pick-colour, and the robot-server and ROS 2 sims of pick-cube); ``keyboard``, ``gamepad``,
    ``spacemouse`` -> the real device readers, with ``cfg.scale`` (fraction of the largest step at full
    deflection). Optional packages are imported only when the device is built. ``gui`` ->
    :class:`~robot_rl.teleop.gui.device.GuiDevice`, actor ``actor_id`` of the web GUI at
    ``cfg.gui_host:cfg.gui_port``, paced to ``control_hz`` (Hz).

    Raises:
        ValueError: an unknown ``intervention.device`` (the message lists the choices), a bad action box or
            threshold, or ``sim_human`` with an action box other than the built-in task's (4,).
        DeviceError: the device's optional package is missing (names ``pip install 'robot-rl[teleop]'``, or
            ``[gui]`` for ``gui``),
            or the device is not attached / not accessible (names the device and the fix).
    """
    name = cfg.device
    if name == "none":
        return None
    if name == "sim_human":
        # MuJoCo-backed: imported here so that building any other device (and the CLI) stays MuJoCo-free
        from robot_rl.teleop.task_human import simulated_human

        if np.shape(action_low) != (4,) or np.shape(action_high) != (4,):
            raise ValueError(
                "intervention.device=sim_human drives the built-in Panda tasks (action shape (4,)); "
                f"got an action box of shape {np.shape(action_low)}"
            )
        return simulated_human(task_id, cfg)
    if name == "keyboard":
        return KeyboardDevice(action_low, action_high, cfg.scale)
    if name == "gamepad":
        return GamepadDevice(action_low, action_high, cfg.scale)
    if name == "spacemouse":
        return SpaceMouseDevice(action_low, action_high, cfg.scale)
    if name == "gui":
        return GuiDevice.from_config(cfg, action_low, action_high, actor_id, control_hz)
    raise ValueError(f"intervention.device must be one of {', '.join(DEVICES)}; got {name!r}")
