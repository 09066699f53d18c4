"""The actor's side of ``intervention_node``: its topics as an
:class:`~robot_rl.runtime.intervention.InterventionDevice`, which the online actor polls each control step
like any gamepad (``actor_node`` plugs it in; docs/design.md §4: the human wins within one control step).

Subscribes under ``prefix`` (:mod:`robot_rl.deploy.ros2.intervention_node` documents the topics):
``active`` (Bool) and ``twist`` (TwistStamped, unitless [-1, 1]) count while younger than ``timeout_s``
(a dead intervention node hands control back to the policy); ``gripper`` (Float32 closure in [0, 1]) is
latched, open at each episode start; ``label`` (String ``success``/``failure``) ends the episode once.
The action is built by :class:`~robot_rl.teleop.command.ActionMapper`, as for the gamepad device. Every
message is checked: NaN/inf or out-of-range twists or gripper values and unknown labels are logged
(``rejected <topic>: ...``), counted and never used.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from robot_rl.config import Ros2Config
from robot_rl.hardware.ros2 import msgs, validate
from robot_rl.hardware.ros2.bridge import acquire, release
from robot_rl.runtime.intervention import LABELS, HumanInput
from robot_rl.teleop.command import ActionMapper, ButtonState


def _unit_twist(msg: msgs.TwistStamped) -> np.ndarray:
    t = validate.twist(msg, time.time(), 1e9)[:3]  # freshness is judged by arrival time
    if np.any(np.abs(t) > 1.0 + 1e-6):
        raise validate.Rejected(f"unitless twist outside [-1, 1]: {t.tolist()}")
    return t


def _closure(msg: msgs.Float32) -> float:
    if not (np.isfinite(msg.data) and 0.0 <= msg.data <= 1.0):
        raise validate.Rejected(f"gripper closure must be in [0, 1], got {msg.data}")
    return float(msg.data)


def _label(msg: msgs.String) -> str:
    if msg.data not in LABELS:
        raise validate.Rejected(f"label must be one of {LABELS}, got {msg.data!r:.40}")
    return msg.data


class RosInterventionDevice:
    """Intervention from ``intervention_node``'s topics (module doc).

    Args:
        ros2: the transport/domain (the robot bridge's ``env.robot.ros2``; the process shares one node).
        prefix: the intervention node's topic prefix.
        action_low, action_high: the env's action box ``[dx, dy, dz, ..., grip]``.
        scale: fraction of ``action_high[:3]`` that full deflection commands (``intervention.scale``).
        timeout_s: largest age (s) of the last ``active``/``twist`` message that still counts.

    Raises:
        ValueError: a bad action box or scale (:class:`ActionMapper`), ``timeout_s`` <= 0.
    """

    def __init__(
        self,
        ros2: Ros2Config,
        prefix: str,
        action_low: np.ndarray,
        action_high: np.ndarray,
        scale: float = 1.0,
        timeout_s: float = 0.5,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"intervention timeout_s must be > 0, got {timeout_s}")
        self.mapper = ActionMapper(action_low, action_high, scale)
        self.ros2, self.timeout_s = ros2, timeout_s
        self.state = ButtonState()
        self._lock = threading.Lock()
        self._active = (False, -np.inf)
        self._twist = (np.zeros(3), -np.inf)
        self.shared = acquire(ros2)
        sub = self.shared.subscribe
        sub(msgs.TwistStamped, f"{prefix}/twist", self._on_twist, _unit_twist)  # before active: see the node
        sub(msgs.Bool, f"{prefix}/active", self._on_active, lambda m: bool(m.data))
        sub(msgs.Float32, f"{prefix}/gripper", lambda g: self.state.set_gripper(g >= 0.5), _closure)
        sub(msgs.String, f"{prefix}/label", self.state.push_label, _label)

    def _on_active(self, on: bool) -> None:
        with self._lock:
            self._active = (on, time.monotonic())

    def _on_twist(self, t: np.ndarray) -> None:
        with self._lock:
            self._twist = (t, time.monotonic())

    def reset(self, env_seed: int) -> None:
        """Episode start: gripper open, pending label dropped (``env_seed`` unused)."""
        self.state.reset()

    def poll(self, obs: dict[str, np.ndarray]) -> HumanInput:
        """The latest fresh command (``obs`` unused); the policy drives when nothing fresh says otherwise."""
        now = time.monotonic()
        with self._lock:
            (on, t_on), (twist, t_twist) = self._active, self._twist
        self.state.set_intervene(on and now - t_on <= self.timeout_s)
        translation = twist if now - t_twist <= self.timeout_s else np.zeros(3)
        return self.mapper(self.state.command(translation))

    def close(self) -> None:
        """Release the shared ROS 2 node (safe to call twice)."""
        if self.shared is not None:
            self.shared = None
            release(self.ros2)
