"""The normalised command every human input device produces, and its mapping to env actions.

A device reads its hardware into a :class:`DeviceCommand`: a translation in [-1, 1] per axis (x, y, z in
the robot base frame), a gripper command (0 open, 1 closed), whether the human drives this step
(``intervene``) and an optional episode label (``"success"`` / ``"failure"``). :class:`ActionMapper`
turns it into a :class:`~robot_rl.runtime.intervention.HumanInput` for an env whose action box is
``[dx, dy, dz, (other dims...), grip]``:

- ``action[:3] = clip(translation, -1, 1) * scale * action_high[:3]`` (full deflection at ``scale = 1``
  is the largest step the env allows, e.g. 0.03 m for ``robot_rl/PandaPickCube-v0``), then clipped to
  the box;
- ``action[-1] = low[-1] + gripper * (high[-1] - low[-1])`` (0 open, 1 closed for the built-in task);
- any dims between them (e.g. rotation deltas) are 0 clipped to the box;
- ``action`` is ``None`` (the policy drives) unless ``intervene``; the label passes through either way.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from robot_rl.runtime.intervention import LABELS, DeviceError, HumanInput

TELEOP_EXTRA = "pip install 'robot-rl[teleop]'"


def missing_extra(device: str, package: str) -> DeviceError:
    """The error for a missing optional package ``package`` that ``device`` needs (names the extra)."""
    return DeviceError(f"{device}: the optional package '{package}' is not installed; run {TELEOP_EXTRA}")


@dataclass
class DeviceCommand:
    """One reading of a device, normalised.

    ``translation``: float (3,) in [-1, 1]: x, y, z deflection in the robot base frame (+x away from an
    operator standing behind the robot, +y to their left, +z up). ``gripper``: 0 open .. 1 closed.
    ``intervene``: the human drives this step. ``label``: ``"success"``, ``"failure"`` or None.
    """

    translation: np.ndarray = field(default_factory=lambda: np.zeros(3))
    gripper: float = 0.0
    intervene: bool = False
    label: str | None = None


class ActionMapper:
    """Maps a :class:`DeviceCommand` to a :class:`HumanInput` in the env's action units (module docstring).

    Args:
        action_low, action_high: the env's action box, shape (d,): ``[dx, dy, dz, ..., grip]`` (d >= 4),
            or ``[dx, dy, dz]`` (d = 3) for a robot without a gripper (``env.robot.gripper: none``, a UR),
            whose actions then carry no gripper; ``action_high[:3]`` (m per step) must be > 0.
        scale: fraction of ``action_high[:3]`` that full deflection commands (> 0).

    Raises:
        ValueError: a box that is not (d,) with d >= 3, non-finite bounds, ``action_high[:3] <= 0``,
            ``low > high``, or ``scale`` not a positive finite number.
    """

    def __init__(self, action_low: np.ndarray, action_high: np.ndarray, scale: float = 1.0) -> None:
        low = np.asarray(action_low, dtype=np.float64)
        high = np.asarray(action_high, dtype=np.float64)
        if low.ndim != 1 or low.shape != high.shape or low.shape[0] < 3:
            raise ValueError(
                f"teleop devices need an action box [dx, dy, dz, ..., grip] or [dx, dy, dz] of shape (d,) "
                f"with d >= 3; got low {low.shape}, high {high.shape}"
            )
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))) or np.any(low > high):
            raise ValueError(f"action box must be finite with low <= high; got low {low}, high {high}")
        if np.any(high[:3] <= 0):
            raise ValueError(f"action_high[:3] (largest xyz step) must be > 0; got {high[:3]}")
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"intervention.scale must be a positive number; got {scale}")
        self.low, self.high, self.scale = low, high, float(scale)
        self.gripper = low.shape[0] >= 4

    def action(self, cmd: DeviceCommand) -> np.ndarray:
        """The float32 (d,) action for ``cmd`` (ignores ``cmd.intervene``)."""
        t = np.clip(np.nan_to_num(np.asarray(cmd.translation, dtype=np.float64)), -1.0, 1.0)
        action = np.zeros_like(self.low)
        action[:3] = t * self.scale * self.high[:3]
        if self.gripper:
            g = float(np.clip(cmd.gripper, 0.0, 1.0))
            action[-1] = self.low[-1] + g * (self.high[-1] - self.low[-1])
        return np.clip(action, self.low, self.high).astype(np.float32)

    def __call__(self, cmd: DeviceCommand) -> HumanInput:
        """``HumanInput(action if cmd.intervene else None, cmd.label)``.

        Raises:
            ValueError: ``cmd.label`` is not None, ``"success"`` or ``"failure"``.
        """
        if cmd.label is not None and cmd.label not in LABELS:
            raise ValueError(f"label must be one of {LABELS} or None; got {cmd.label!r}")
        return HumanInput(self.action(cmd) if cmd.intervene else None, cmd.label)


class ButtonState:
    """The latched part of a device's command, shared by a reader thread and :meth:`poll` (thread-safe).

    Holds the gripper command (open at episode start), the intervene flag (off at episode start) and one
    pending label, which :meth:`take_label` hands out once.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        """Episode start: policy drives, gripper open, no pending label."""
        with self.lock:
            self.gripper = 0.0
            self.intervene = False
            self._label: str | None = None

    def toggle_intervene(self) -> None:
        with self.lock:
            self.intervene = not self.intervene

    def set_intervene(self, on: bool) -> None:
        with self.lock:
            self.intervene = bool(on)

    def set_gripper(self, closed: bool) -> None:
        with self.lock:
            self.gripper = 1.0 if closed else 0.0

    def toggle_gripper(self) -> None:
        with self.lock:
            self.gripper = 0.0 if self.gripper >= 0.5 else 1.0

    def push_label(self, label: str) -> None:
        with self.lock:
            self._label = label

    def command(self, translation: np.ndarray) -> DeviceCommand:
        """Snapshot with ``translation`` (3,); consumes the pending label."""
        with self.lock:
            label, self._label = self._label, None
            return DeviceCommand(
                np.asarray(translation, dtype=np.float64), self.gripper, self.intervene, label
            )


def apply_deadzone(values: np.ndarray, deadzone: float) -> np.ndarray:
    """Analog axes in [-1, 1] with ``|v| <= deadzone`` set to 0 and the rest rescaled to reach 0..1 again:
    ``sign(v) * (|v| - deadzone) / (1 - deadzone)``, clipped to [-1, 1]. ``deadzone`` in [0, 1)."""
    v = np.clip(np.asarray(values, dtype=np.float64), -1.0, 1.0)
    mag = np.maximum(np.abs(v) - deadzone, 0.0) / (1.0 - deadzone)
    return np.clip(np.sign(v) * mag, -1.0, 1.0)
