"""Gamepad intervention device (``pygame`` joystick API on SDL2)."""

from __future__ import annotations

import os

import numpy as np

from robot_rl.runtime.intervention import DeviceError, HumanInput
from robot_rl.teleop.command import ActionMapper, ButtonState, apply_deadzone, missing_extra

XBOX_AXES = ((1, -1.0), (0, -1.0), (4, -1.0))
"""Robot x, y, z <- (SDL joystick axis, sign): left stick up = +x, left stick left = +y, right stick up = +z
(Xbox-layout pads under SDL2 on Linux: axes 0/1 left stick, 3/4 right stick, 2/5 triggers)."""
XBOX_BUTTONS = {"intervene": 5, "close": 0, "open": 1, "success": 3, "failure": 2}
"""Role -> SDL joystick button: RB (hold to drive), A (close gripper), B (open), Y (success), X (failure)."""
FIX_HINT = (
    "plug in a gamepad (USB, or pair it over Bluetooth), check that it appears as /dev/input/js* or "
    "/dev/input/event* and that your user may read it (e.g. the 'input' group)"
)


def init_pygame_joystick():
    """Import pygame and start SDL's video (for the event queue; no window opens) and joystick subsystems.

    Sets ``SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS=1`` (joystick events without a focused window) and, with no
    X11/Wayland display, ``SDL_VIDEODRIVER=dummy``; existing values of these variables are kept.

    Raises:
        DeviceError: pygame is missing (names the ``teleop`` extra) or SDL fails to start.
    """
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    os.environ.setdefault("SDL_JOYSTICK_ALLOW_BACKGROUND_EVENTS", "1")
    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    try:
        import pygame
    except ModuleNotFoundError as e:
        raise missing_extra("gamepad", "pygame") from e
    try:
        if not pygame.display.get_init():
            try:
                pygame.display.init()
            except pygame.error:  # an unusable display: joysticks only need the event queue
                os.environ["SDL_VIDEODRIVER"] = "dummy"
                pygame.display.init()
        pygame.joystick.init()
    except pygame.error as e:
        raise DeviceError(f"gamepad: SDL could not start its joystick subsystem ({e})") from e
    return pygame


class GamepadDevice:
    """Intervention from a gamepad through SDL2's joystick API (``pygame``). Default map (Xbox layout):

    - hold ``RB``: the human drives (dead-man; release hands back to the policy);
    - left stick: x (up = away from an operator behind the robot) and y (left = +y);
    - right stick vertical: z (up = +z);
    - ``A`` / ``B``: close / open the gripper (latched; open at episode start);
    - ``Y`` / ``X``: end the episode as a success / failure (one label per press).

    Stick deflection passes a ``deadzone`` (:func:`~robot_rl.teleop.command.apply_deadzone`) and is mapped by
    :class:`~robot_rl.teleop.command.ActionMapper` (full deflection = ``scale * action_high[:3]`` per step,
    0.03 m for the built-in task at ``scale = 1``). Other pads: pass ``axes`` and ``buttons``.

    Args:
        action_low, action_high: the env's action box ``[dx, dy, dz, ..., grip]``.
        scale: fraction of the largest step at full deflection.
        joystick_index: which SDL joystick (0 = the first).
        deadzone: stick deflection ignored around the centre, in [0, 1).
        axes: robot x, y, z <- (SDL axis index, sign); default :data:`XBOX_AXES`.
        buttons: role -> SDL button index for ``intervene``, ``close``, ``open``, ``success``, ``failure``;
            default :data:`XBOX_BUTTONS`.

    Raises:
        DeviceError: pygame is missing (names the ``teleop`` extra), no joystick ``joystick_index`` is
            attached, or it has too few axes/buttons for the map.
        ValueError: a bad action box, scale or deadzone, or ``buttons`` lacks a role.
    """

    def __init__(
        self,
        action_low: np.ndarray,
        action_high: np.ndarray,
        scale: float = 1.0,
        joystick_index: int = 0,
        deadzone: float = 0.1,
        axes: tuple[tuple[int, float], ...] = XBOX_AXES,
        buttons: dict[str, int] | None = None,
    ) -> None:
        self.mapper = ActionMapper(action_low, action_high, scale)
        if not 0 <= deadzone < 1:
            raise ValueError(f"deadzone must be in [0, 1); got {deadzone}")
        self.buttons_map = dict(XBOX_BUTTONS if buttons is None else buttons)
        if set(self.buttons_map) != set(XBOX_BUTTONS):
            raise ValueError(
                f"buttons must map exactly {sorted(XBOX_BUTTONS)}; got {sorted(self.buttons_map)}"
            )
        self.axes, self.deadzone = tuple(axes), float(deadzone)
        self.state = ButtonState()
        self.pg = init_pygame_joystick()
        count = self.pg.joystick.get_count()
        if not 0 <= joystick_index < count:
            raise DeviceError(
                f"gamepad: no joystick {joystick_index} (SDL sees {count} joystick(s)); {FIX_HINT}"
            )
        self.joystick = self.pg.joystick.Joystick(joystick_index)
        self.joystick.init()
        self.name = self.joystick.get_name()
        self.instance_id = self.joystick.get_instance_id()
        need_axes = max(a for a, _ in self.axes) + 1
        need_buttons = max(self.buttons_map.values()) + 1
        if self.joystick.get_numaxes() < need_axes or self.joystick.get_numbuttons() < need_buttons:
            raise DeviceError(
                f"gamepad: '{self.name}' has {self.joystick.get_numaxes()} axes and "
                f"{self.joystick.get_numbuttons()} buttons; the map needs {need_axes} and {need_buttons} "
                "(pass axes= and buttons= for this pad)"
            )
        self._removed = False

    def reset(self, env_seed: int) -> None:
        """Episode start: gripper open, pending label dropped (``env_seed`` unused)."""
        self.state.reset()

    def poll(self, obs: dict[str, np.ndarray]) -> HumanInput:
        """Pump SDL events and read the pad (``obs`` unused).

        Raises:
            DeviceError: the gamepad was disconnected.
        """
        pg, roles = self.pg, {v: k for k, v in self.buttons_map.items()}
        for event in pg.event.get():
            if event.type == pg.JOYDEVICEREMOVED and event.instance_id == self.instance_id:
                self._removed = True
            elif event.type == pg.JOYBUTTONDOWN and event.instance_id == self.instance_id:
                role = roles.get(event.button)
                if role in ("close", "open"):
                    self.state.set_gripper(role == "close")
                elif role in ("success", "failure"):
                    self.state.push_label(role)
        if self._removed:
            raise DeviceError(f"gamepad: '{self.name}' was disconnected; {FIX_HINT}")
        raw = np.array([sign * self.joystick.get_axis(axis) for axis, sign in self.axes])
        self.state.set_intervene(bool(self.joystick.get_button(self.buttons_map["intervene"])))
        return self.mapper(self.state.command(apply_deadzone(raw, self.deadzone)))

    def close(self) -> None:
        """Release the joystick (SDL itself stays up for other users in this process)."""
        if not self._removed:
            self.joystick.quit()
