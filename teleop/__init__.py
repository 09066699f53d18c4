"""Human intervention input: the simulated human and real device readers (keyboard, gamepad, SpaceMouse).

:func:`~robot_rl.teleop.devices.make_device` builds the device named by ``InterventionConfig.device``; every
device implements :class:`robot_rl.runtime.intervention.InterventionDevice`. Device packages (pynput,
pygame, hidapi; extra ``teleop``) are imported only when their device is built.
"""

from robot_rl.teleop.devices import DEVICES, make_device

__all__ = ["DEVICES", "make_device"]
