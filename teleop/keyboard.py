"""Keyboard intervention device (``pynput`` listener; on Linux it needs an X11 display)."""

from __future__ import annotations

import time

import numpy as np

from robot_rl.runtime.intervention import DeviceError, HumanInput
from robot_rl.teleop.command import ActionMapper, ButtonState, missing_extra

MOVE_KEYS = {
    "up": (0, 1.0),
    "down": (0, -1.0),
    "left": (1, 1.0),
    "right": (1, -1.0),
    "page_up": (2, 1.0),
    "page_down": (2, -1.0),
}
"""Held key -> (axis, direction): x (away from the operator), y (to their left), z (up)."""
AUTOREPEAT_GAP_S = 0.03
"""A press this soon after the same key's release is X11 auto-repeat, not a new tap (s)."""


def key_name(key: object) -> str | None:
    """``pynput`` key -> name: special keys by their ``Key`` name (``"space"``, ``"up"``, ``"page_up"``),
    characters lower-cased (``"s"``); None for keys with neither."""
    char = getattr(key, "char", None)
    if char:
        return char.lower()
    name = getattr(key, "name", None)
    return name if isinstance(name, str) else None


def stop_listener(listener: object) -> None:
    """Stop a ``pynput`` keyboard listener and wait for its thread (up to 2 s).

    pynput's X11 stop only takes effect at the next X event (moses-palmer/pynput#583); disabling the record
    context on its second connection ends it now. Best effort: these are pynput internals.
    """
    listener.stop()
    display, context = getattr(listener, "_display_stop", None), getattr(listener, "_context", None)
    if display is not None and context is not None:
        try:
            display.record_disable_context(context)
            display.flush()
        except Exception:  # the listener thread may already have closed the connection
            pass
    listener.join(timeout=2.0)


class KeyboardDevice:
    """Intervention from the keyboard, read by a background ``pynput`` listener (global, no window focus
    needed). Key map:

    - ``space``: tap to take over / hand back (toggle; each episode starts with the policy driving);
    - ``Up`` / ``Down``: +x / -x (away from / towards an operator behind the robot), while held;
    - ``Left`` / ``Right``: +y / -y, while held;
    - ``Page Up`` / ``Page Down``: +z / -z (up / down), while held;
    - ``c`` / ``o``: close / open the gripper (latched; open at episode start);
    - ``s`` / ``f``: end the episode as a success / failure (one label, on the next :meth:`poll`).

    A held movement key is full deflection on that axis (opposite keys cancel), mapped by
    :class:`~robot_rl.teleop.command.ActionMapper`: ``scale * action_high[:3]`` per step (0.03 m for the
    built-in task at ``scale = 1``).

    Args:
        action_low, action_high: the env's action box ``[dx, dy, dz, ..., grip]``.
        scale: fraction of the largest step that a held key commands.

    Raises:
        DeviceError: ``pynput`` is missing (names the ``teleop`` extra) or has no keyboard backend (no X
            display: set ``DISPLAY``), or the listener failed to start.
        ValueError: a bad action box or scale.
    """

    def __init__(self, action_low: np.ndarray, action_high: np.ndarray, scale: float = 1.0) -> None:
        self.mapper = ActionMapper(action_low, action_high, scale)
        self.buttons = ButtonState()
        self._held: set[str] = set()
        self._released_at: dict[str, float] = {}
        try:
            from pynput import keyboard
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] == "pynput":
                raise missing_extra("keyboard", "pynput") from e
            raise DeviceError(f"keyboard: pynput cannot load its backend ({e})") from e
        except ImportError as e:
            raise DeviceError(
                f"keyboard: pynput has no keyboard backend here ({str(e).splitlines()[0]}); on Linux run "
                "under an X11 session"
                " (set DISPLAY, e.g. DISPLAY=:0) or a virtual one (Xvfb)"
            ) from e
        self._listener = keyboard.Listener(on_press=self._on_press, on_release=self._on_release)
        self._listener.start()
        self._listener.wait()
        if not self._listener.is_alive():
            raise DeviceError("keyboard: the pynput listener stopped at start; check the X display (DISPLAY)")

    def _on_press(self, key: object) -> None:
        name = key_name(key)
        if name is None:
            return
        repeat = name in self._held or time.monotonic() - self._released_at.get(name, -1.0) < AUTOREPEAT_GAP_S
        with self.buttons.lock:
            self._held.add(name)
        if repeat:
            return
        if name == "space":
            self.buttons.toggle_intervene()
        elif name in ("c", "o"):
            self.buttons.set_gripper(name == "c")
        elif name in ("s", "f"):
            self.buttons.push_label("success" if name == "s" else "failure")

    def _on_release(self, key: object) -> None:
        name = key_name(key)
        if name is None:
            return
        with self.buttons.lock:
            self._held.discard(name)
        self._released_at[name] = time.monotonic()

    def reset(self, env_seed: int) -> None:
        """Episode start: the policy drives, gripper open, pending label dropped (``env_seed`` unused)."""
        self.buttons.reset()

    def poll(self, obs: dict[str, np.ndarray]) -> HumanInput:
        """The keys' current command (``obs`` unused).

        Raises:
            DeviceError: the listener thread died (e.g. the X display went away).
        """
        if not self._listener.is_alive():
            raise DeviceError("keyboard: the pynput listener stopped (X display closed?)")
        translation = np.zeros(3)
        with self.buttons.lock:
            held = set(self._held)
        for name in held:
            if name in MOVE_KEYS:
                axis, sign = MOVE_KEYS[name]
                translation[axis] += sign
        return self.mapper(self.buttons.command(translation))

    def close(self) -> None:
        """Stop the listener thread and wait for it (up to 2 s)."""
        stop_listener(self._listener)
