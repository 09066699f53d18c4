"""3Dconnexion SpaceMouse intervention device (``hidapi``), with a pure parser of its HID input reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from robot_rl.runtime.intervention import DeviceError, HumanInput
from robot_rl.teleop.command import ActionMapper, ButtonState, apply_deadzone, missing_extra

VENDOR_3DCONNEXION = 0x256F
VENDOR_LOGITECH = 0x046D
"""3Dconnexion's own vendor id, and Logitech's (older SpaceNavigator / SpaceExplorer / SpaceMouse Pro)."""
LOGITECH_3DX_PRODUCTS = frozenset(
    {0xC603, 0xC605, 0xC606, 0xC621, 0xC623, 0xC625, 0xC626, 0xC627, 0xC628, 0xC629, 0xC62B}
)
"""3Dconnexion product ids sold under Logitech's vendor id (every 0x256F product is accepted)."""
FULL_SCALE = 350.0
"""Raw axis count at full deflection (about +-350 on current models)."""
HID_AXES = ((1, -1.0), (0, -1.0), (2, -1.0))
"""Robot x, y, z <- (HID translation axis, sign). HID axes: +x right, +y towards the user, +z down; so for
an operator behind the robot: push away = +x, push left = +y, pull up = +z."""
UDEV_HINT = (
    "on Linux give your user access, e.g. a udev rule "
    '\'SUBSYSTEM=="hidraw", ATTRS{idVendor}=="256f", MODE="0660", GROUP="plugdev"\' '
    '(and SUBSYSTEM=="usb" for the libusb backend), then replug'
)


@dataclass(frozen=True)
class SpaceMouseReport:
    """One parsed HID input report; fields the report does not carry are None.

    ``translation``, ``rotation``: raw int16 counts (x, y, z) in the device's HID frame (+x right,
    +y towards the user, +z down; rotations about those axes). ``buttons``: bitmask (bit 0 = left button,
    bit 1 = right button on two-button models).
    """

    translation: tuple[int, int, int] | None = None
    rotation: tuple[int, int, int] | None = None
    buttons: int | None = None


def _int16s(data: bytes, start: int) -> tuple[int, int, int]:
    return tuple(int.from_bytes(data[i : i + 2], "little", signed=True) for i in range(start, start + 6, 2))


def parse_report(data: bytes | bytearray | list[int]) -> SpaceMouseReport:
    """Parse one SpaceMouse HID input report (first byte = report id).

    - id 1: translation x, y, z as int16 little-endian (7 bytes); models that send all six axes in one
      report (13 bytes, e.g. SpaceMouse Wireless / Compact) add rotation x, y, z;
    - id 2: rotation x, y, z as int16 little-endian (7 bytes);
    - id 3: buttons, a little-endian bitmask over the remaining bytes;
    - any other id (battery, LEDs, vendor reports) or an empty read: an empty report.

    Raises:
        ValueError: a report with id 1, 2 or 3 too short for its fields.
    """
    data = bytes(data)
    if not data:
        return SpaceMouseReport()
    rid, size = data[0], len(data)
    if (rid in (1, 2) and size < 7) or (rid == 3 and size < 2):
        raise ValueError(f"SpaceMouse HID report {rid} truncated: {size} bytes ({data.hex()})")
    if rid == 1:
        return SpaceMouseReport(_int16s(data, 1), _int16s(data, 7) if size >= 13 else None)
    if rid == 2:
        return SpaceMouseReport(rotation=_int16s(data, 1))
    if rid == 3:
        return SpaceMouseReport(buttons=int.from_bytes(data[1:], "little"))
    return SpaceMouseReport()


def is_spacemouse(info: dict[str, Any]) -> bool:
    """True for a ``hid.enumerate()`` entry of a 3Dconnexion device."""
    vid, pid = info.get("vendor_id"), info.get("product_id")
    return vid == VENDOR_3DCONNEXION or (vid == VENDOR_LOGITECH and pid in LOGITECH_3DX_PRODUCTS)


def open_spacemouse(path: bytes | None = None) -> Any:
    """Open the first SpaceMouse found by ``hidapi`` (or the one at ``path``), non-blocking.

    Prefers the interface whose HID usage is multi-axis controller (page 1, usage 8) on multi-interface
    receivers.

    Raises:
        DeviceError: ``hidapi`` is missing (names the ``teleop`` extra), no 3Dconnexion device is attached,
            or it cannot be opened (permissions).
    """
    try:
        import hid
    except ModuleNotFoundError as e:
        raise missing_extra("spacemouse", "hidapi") from e
    if path is None:
        found = [d for vid in (VENDOR_3DCONNEXION, VENDOR_LOGITECH) for d in hid.enumerate(vid, 0)]
        found = [d for d in found if is_spacemouse(d)]
        if not found:
            raise DeviceError(
                "spacemouse: no 3Dconnexion HID device found (vendor 0x256f or 0x046d); plug it in (for a "
                f"wireless model, its receiver) and check `lsusb`; {UDEV_HINT}"
            )
        found.sort(key=lambda d: (d.get("usage_page"), d.get("usage")) != (1, 8))
        path = found[0]["path"]
    device = hid.device()
    try:
        device.open_path(path)
        device.set_nonblocking(1)
    except OSError as e:
        raise DeviceError(f"spacemouse: cannot open HID device {path!r} ({e}); {UDEV_HINT}") from e
    return device


class SpaceMouseDevice:
    """Intervention from a 3Dconnexion SpaceMouse over ``hidapi`` (translation only; rotation is read but
    unused). Map:

    - push / pull the cap: translation (:data:`HID_AXES`: away = +x, left = +y, up = +z), full deflection
      (:data:`FULL_SCALE` counts) = ``scale * action_high[:3]`` per step (0.03 m for the built-in task);
      moving the cap beyond ``deadzone`` also takes over;
    - right button: take over / hand back (toggle; each episode starts with the policy driving);
    - left button: toggle the gripper (open at episode start);
    - buttons 3 / 4 (bits 2 / 3; models with more buttons): success / failure label.

    Args:
        action_low, action_high: the env's action box ``[dx, dy, dz, ..., grip]``.
        scale: fraction of the largest step at full deflection.
        deadzone: ignored deflection around the centre, as a fraction of full scale in [0, 1).
        axes: robot x, y, z <- (HID translation axis, sign); default :data:`HID_AXES`.
        device: an open ``hid.device``-like handle (``read(max_length) -> list[int]`` non-blocking,
            ``close()``); default: :func:`open_spacemouse`.

    Raises:
        DeviceError: as :func:`open_spacemouse`.
        ValueError: a bad action box, scale or deadzone.
    """

    def __init__(
        self,
        action_low: np.ndarray,
        action_high: np.ndarray,
        scale: float = 1.0,
        deadzone: float = 0.05,
        axes: tuple[tuple[int, float], ...] = HID_AXES,
        device: Any = None,
    ) -> None:
        self.mapper = ActionMapper(action_low, action_high, scale)
        if not 0 <= deadzone < 1:
            raise ValueError(f"deadzone must be in [0, 1); got {deadzone}")
        self.deadzone, self.axes = float(deadzone), tuple(axes)
        self.state = ButtonState()
        self.device = open_spacemouse() if device is None else device
        self.raw = np.zeros(3)
        self.pressed = 0
        self.bad_reports = 0

    def reset(self, env_seed: int) -> None:
        """Episode start: the policy drives, gripper open, pending label dropped (``env_seed`` unused)."""
        self.state.reset()

    def poll(self, obs: dict[str, np.ndarray]) -> HumanInput:
        """Drain the pending HID reports and return the latest command (``obs`` unused).

        Raises:
            DeviceError: reading failed (the SpaceMouse was unplugged).
        """
        for _ in range(256):
            try:
                data = self.device.read(64)
            except (OSError, ValueError) as e:
                raise DeviceError(f"spacemouse: read failed, device disconnected? ({e})") from e
            if not data:
                break
            try:
                report = parse_report(data)
            except ValueError:
                self.bad_reports += 1
                continue
            if report.translation is not None:
                self.raw = np.array(report.translation, dtype=np.float64)
            if report.buttons is not None:
                self._buttons(report.buttons)
        t = apply_deadzone(np.array([s * self.raw[a] for a, s in self.axes]) / FULL_SCALE, self.deadzone)
        if np.any(t != 0):
            self.state.set_intervene(True)
        return self.mapper(self.state.command(t))

    def _buttons(self, mask: int) -> None:
        down, self.pressed = mask & ~self.pressed, mask
        if down & 1:
            self.state.toggle_gripper()
        if down & 2:
            self.state.toggle_intervene()
        if down & 4:
            self.state.push_label("success")
        if down & 8:
            self.state.push_label("failure")

    def close(self) -> None:
        """Close the HID handle."""
        self.device.close()
