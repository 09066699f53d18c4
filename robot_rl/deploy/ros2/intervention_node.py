"""``intervention_node``: a gamepad on ``sensor_msgs/Joy`` (ROS 2's ``joy_node``) turned into intervention
commands and episode labels for ``actor_node`` (:mod:`robot_rl.hardware.ros2.intervention_device`).

Publishes under ``prefix`` (default ``/robot_rl/intervention``):

- ``<prefix>/twist`` (geometry_msgs/TwistStamped, every ``1/rate_hz`` s): the end-effector translation the
  human asks for as **unitless** deflection in [-1, 1] per base-frame axis in ``twist.linear`` (MoveIt
  Servo's ``command_in_type: unitless``); the actor scales it to its action box exactly as the gamepad
  device does (:class:`~robot_rl.teleop.command.ActionMapper`: full deflection = ``intervention.scale *
  action_high[:3]`` per step). Zero while nobody intervenes.
- ``<prefix>/active`` (std_msgs/Bool, every ``1/rate_hz`` s): the human drives (dead-man button held and a
  valid Joy message within ``joy_timeout_s``); start/stop of an intervention are its edges.
- ``<prefix>/gripper`` (std_msgs/Float32, on a press of ``button_close``/``button_open``): closure 1/0.
- ``<prefix>/label`` (std_msgs/String, on a press of ``button_success``/``button_failure``): ``success`` /
  ``failure``, which ends the actor's episode with that outcome.

The default map is :mod:`robot_rl.teleop.gamepad`'s Xbox layout as ROS 2's ``joy_node`` reports it (SDL
joystick indices; joy_node flips SDL's axis signs, so stick up/left are positive): hold RB (button 5) to
drive, left stick x/y (axes 1, 0), right stick vertical z (axis 4), A/B (0/1) close/open, Y/X (3/2)
success/failure. Stick values pass a further ``deadzone`` (:func:`~robot_rl.teleop.command.apply_deadzone`).

Every Joy message is checked (:func:`robot_rl.hardware.ros2.validate.joy`): a stale one, one with NaN/inf
or out-of-range axes, or with fewer axes/buttons than the map needs is logged (``rejected /joy: ...``),
counted and never used; with no valid message for ``joy_timeout_s`` (a dead driver, a stream of bad ones)
``active`` goes false, so the policy drives again. A message of another type on ``joy_topic`` never reaches
the node (DDS matches readers to writers by type).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from robot_rl.deploy.ros2.cli import run_node
from robot_rl.hardware.ros2 import msgs, validate
from robot_rl.hardware.ros2.node import Node
from robot_rl.teleop.command import apply_deadzone
from robot_rl.teleop.gamepad import XBOX_AXES, XBOX_BUTTONS

ROLES = ("intervene", "close", "open", "success", "failure")
PARAMETERS: dict = {
    "joy_topic": "/joy",
    "prefix": "/robot_rl/intervention",
    "rate_hz": 20.0,
    "joy_timeout_s": 0.5,
    "stale_s": 0.5,
    "deadzone": 0.1,
    "axes": [axis for axis, _ in XBOX_AXES],
    "axis_signs": [-sign for _, sign in XBOX_AXES],  # joy_node negates SDL's axis values
    **{f"button_{role}": XBOX_BUTTONS[role] for role in ROLES},
    "frame_id": "base_link",
}
"""The node's parameters and defaults (module doc): ``axes`` robot x, y, z <- Joy axis index, times
``axis_signs``; ``button_<role>`` Joy button indices; ``rate_hz`` Hz; ``joy_timeout_s``, ``stale_s`` s;
``deadzone`` in [0, 1)."""


class InterventionNode:
    """The node's state and callbacks on ``node`` (module doc).

    Raises:
        ParameterError: a wrongly typed or unknown parameter. ValueError: ``axes``/``axis_signs`` not 3
            values, a negative index, a bad deadzone or rate.
    """

    def __init__(self, node: Node) -> None:
        self.node = node
        p = node.params(PARAMETERS)
        if len(p["axes"]) != 3 or len(p["axis_signs"]) != 3:
            raise ValueError(
                f"intervention_node: axes and axis_signs need 3 values (x, y, z), got {p['axes']}"
            )
        self.axes = [int(a) for a in p["axes"]]
        self.signs = np.asarray(p["axis_signs"], dtype=np.float64)
        self.buttons = {role: p[f"button_{role}"] for role in ROLES}
        if min(self.axes) < 0 or min(self.buttons.values()) < 0:
            raise ValueError(
                f"intervention_node: negative axis or button index in {self.axes} {self.buttons}"
            )
        if not 0 <= p["deadzone"] < 1:
            raise ValueError(f"intervention_node: deadzone must be in [0, 1), got {p['deadzone']}")
        self.deadzone, self.stale_s, self.joy_timeout_s = p["deadzone"], p["stale_s"], p["joy_timeout_s"]
        self.frame_id, self.joy_topic = p["frame_id"], p["joy_topic"]
        self.rejected = 0
        self._axes: np.ndarray | None = None
        self._pressed = np.zeros(0, dtype=np.int64)
        self._joy_time = -np.inf
        prefix = p["prefix"]
        self.pub_twist = node.publisher(msgs.TwistStamped, f"{prefix}/twist")
        self.pub_active = node.publisher(msgs.Bool, f"{prefix}/active")
        self.pub_gripper = node.publisher(msgs.Float32, f"{prefix}/gripper")
        self.pub_label = node.publisher(msgs.String, f"{prefix}/label")
        node.subscribe(msgs.Joy, self.joy_topic, self._on_joy)
        node.timer(1.0 / p["rate_hz"], self._tick)

    def _on_joy(self, msg: msgs.Joy) -> None:
        try:
            axes, buttons = validate.joy(
                msg, max(self.axes) + 1, max(self.buttons.values()) + 1, self.node.now(), self.stale_s
            )
        except validate.Rejected as err:
            self.rejected += 1
            self.node.log.warning("rejected %s: %s", self.joy_topic, err)
            return
        previous = np.zeros_like(buttons)
        previous[: min(len(previous), len(self._pressed))] = self._pressed[: len(previous)]
        pressed = {role: buttons[i] == 1 and previous[i] == 0 for role, i in self.buttons.items()}
        if pressed["close"] or pressed["open"]:
            self.pub_gripper.publish(msgs.Float32(1.0 if pressed["close"] else 0.0))
        for label in ("success", "failure"):
            if pressed[label]:
                self.pub_label.publish(msgs.String(label))
        self._axes, self._pressed, self._joy_time = axes, buttons, time.monotonic()

    def _tick(self) -> None:
        fresh = time.monotonic() - self._joy_time <= self.joy_timeout_s
        active = bool(fresh and self._pressed[self.buttons["intervene"]] == 1)
        t = np.zeros(3)
        if active:
            t = apply_deadzone(self.signs * self._axes[self.axes], self.deadzone)
        twist = msgs.TwistStamped(
            msgs.Header(msgs.stamp(), self.frame_id), msgs.Twist(msgs.Vector3(*t.tolist()))
        )
        # the twist before a start and after a stop, so the actor never pairs "active" with a stale twist
        # (it reads the two topics in that order too); a reader may still see them one tick apart
        if active:
            self.pub_twist.publish(twist)
            self.pub_active.publish(msgs.Bool(True))
        else:
            self.pub_active.publish(msgs.Bool(False))
            self.pub_twist.publish(twist)

    def close(self) -> None:
        self.node.close()


def main(argv: list[str] | None = None) -> int:
    """``robot-rl ros2 intervention_node [--ros-args -p name:=value ...]``; runs until SIGINT/SIGTERM."""
    return run_node("intervention_node", InterventionNode, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
