"""``SafeRobot``: the safety layer between every policy or human and every robot (sim or real).

``SafeRobot(robot, cfg)`` wraps any :class:`~robot_rl.hardware.robot.Robot` and is itself one (so layers
stack). Per command it clips what can be clipped safely and counts it, and rejects what cannot
(:class:`~robot_rl.hardware.errors.CommandRejected`, then holds):

- **rejected**: a mode it does not pass (``joint_velocity``, ``ee_velocity``, rotation ``ee_delta``) or the
  robot lacks, a wrong shape, NaN/inf in the value or gripper, a latched e-stop, and (with a kinematic
  model) a switch from ``ee_delta`` to ``joint_position`` while the arm moves too fast to stop inside the
  box or the joint limits, and a switch from ``joint_position`` to ``ee_delta`` with a joint within
  ``ee_switch_room_periods`` full-speed periods of its limit (the robot's IK has no room there);
- **clipped**: ``ee_delta`` (3,): each axis to ``ee_step_max`` m, then the tracked end-effector target
  (start: the measured pose; then target + each delta sent) into the workspace box; ``joint_position``:
  into the joint limits (less ``joint_margin_rad``), the step velocity ``(q - q_prev) * control_hz`` to the
  speed limit and its change to ``acc * dt``, with braking look-ahead so the joint can always stop inside
  its limits (:mod:`~robot_rl.hardware.motion_limits`); when the robot has a kinematic model
  (:meth:`Robot.forward_kinematics`) the step is also shortened until the end effector, at the new
  target and at its stop point, stays in the box, and, when the robot also has a collision model
  (``link_clearance``), until no arm link comes closer than ``link_clearance_m`` to the table or
  another link there. A target that is already outside a limit (the robot started there) may not move
  further out. When a joint lags its target by more than
  ``max_tracking_error_rad`` (blocked by a contact), its target restarts from the measured pose, so the arm
  does not wind up and jump when it comes free. The gripper is clipped into [0, 1]. An ``ee_delta`` that
  arrives while the joint target still moves is sent as a braking step of the joint target (with its
  gripper) until that is at rest, so the robot's Cartesian controller does not take over its momentum.
- **measured-state feedback**: the arm lags its target (a PD or impedance controller's tracking error), so
  what the box bounds is the *measured* pose predicted from the target. The target's mirror image of the
  measured state, ``2 * target - measured``, stays in the box: an arm that lags by ``e`` when its target
  stops overshoots by less than ``e``, the peak overshoot of a damped second-order response being below
  its step (Ogata, *Modern Control Engineering*, 5th ed., sec. 5-3); so a target approaches a face at
  most half way from the arm. In joint mode that is the mirror of the measured joints, kept within the
  joint limits and, by forward kinematics, in the box and clear of contacts; in ``ee_delta`` mode the
  mirror of the measured pose ahead at its present velocity by the robot's tracking time
  (:attr:`tracking_time_s`, at least one period; the Cartesian controller has its own dynamics; per axis
  the farther of the last period's mean velocity and, with a kinematic model, the instantaneous one,
  ``J(q) dq`` from the measured joint velocities; on a real-time robot the horizon also has the last
  command's read-to-send time), and a
  target comes in by as far as that pose would be out. The target plus the
  current tracking error (measured minus the last target's pose: an offset that persists, e.g. while
  sliding along a face) stays in the box too. An ``ee_delta`` step is also shortened until the joints it
  takes, predicted by least squares on the kinematic model, and twice that move keep the links' clearance.

A **hold** brakes: in joint mode one maximum-deceleration step, in ``ee_delta`` mode the target moves at
most one step towards the measured pose. A background thread holds at ``control_hz`` while the
**watchdog** has tripped (no accepted command for ``watchdog_ms``) or the **e-stop** is latched. The
e-stop latches from :meth:`SafeRobot.estop` (thread- and signal-safe: the one trigger API for keys, GUI
and signals), a signal (``estop_signal``) or a key (``estop_key``), and only :meth:`SafeRobot.reset_estop`
releases it. A latched e-stop triggers the controller's own stop where the driver has one
(:attr:`~robot_rl.hardware.robot.Robot.vendor_stop`: a UR's protective stop, xArm's ``emergency_stop``,
franky's ``stop``), after which no holds are sent while it stays latched; otherwise it holds as above.
Every clip, rejection, watchdog trip and e-stop is one JSON line in ``fault_log``.

**Robot-side boundary**: at connect the layer hands its workspace box (the configured box intersected with the
robot's) to the robot's own controller where the driver can set one (``set_tcp_boundary(low, high)``: the
simulated Panda's physics, in process or behind the robot server; xArm's safety boundary in fence mode), which
enforces it in its own real-time loop. The checks above judge the arm from a reading that is already old when
the command arrives (more so on a loaded client host); the controller's boundary holds regardless (issue 35;
:mod:`robot_rl.hardware.tcp_boundary`). UR and Franka have no run-time call for it: docs/hardware.md.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

from robot_rl.config import RobotConfig, SafetyConfig
from robot_rl.config_checks import real_robot_problems, safety_problems
from robot_rl.hardware.errors import (
    CommandRejected,
    HardwareError,
    MissingExtraError,
    RobotConnectionError,
)
from robot_rl.hardware.factory import make_robot
from robot_rl.hardware.motion_limits import braking_path, braking_velocity, max_speed_within, stop_offset
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState, check_command
from robot_rl.teleop.keyboard import key_name, stop_listener

SAFE_MODES = (CommandMode.JOINT_POSITION, CommandMode.EE_DELTA)
"""The modes the safety layer can make safe; a robot's other modes are rejected."""
IK_DAMPING = 1e-4
"""Damping (m²) of the least-squares step that predicts an ``ee_delta``'s joints
(:meth:`SafeRobot._ee_link_scale`)."""


@dataclasses.dataclass
class SafetyCounters:
    """What the safety layer did since :meth:`SafeRobot.connect`.

    ``commands``: commands received; ``clipped``: of those, sent changed; ``rejected``: refused
    (``CommandRejected``); ``holds``: hold commands sent (after a rejection, while the watchdog has
    tripped or the e-stop is latched); ``watchdog_trips``: lapses of ``watchdog_ms`` without a command;
    ``estops``: e-stop latches; ``tracking_resets``: joint targets restarted from the measured pose because
    a joint lagged its target by more than ``max_tracking_error_rad`` (blocked, in contact).
    """

    commands: int = 0
    clipped: int = 0
    rejected: int = 0
    holds: int = 0
    watchdog_trips: int = 0
    estops: int = 0
    tracking_resets: int = 0


def _jsonable(x: object) -> object:
    """``x`` as strict JSON: arrays as lists, NaN/inf as the strings ``"nan"``, ``"inf"``, ``"-inf"``."""
    try:
        arr = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        return repr(x)
    out = [v if np.isfinite(v) else str(v) for v in arr.ravel().tolist()]
    return out[0] if arr.ndim == 0 else out


class FaultLog:
    """Append-only JSON Lines file: one object per event with ``time`` (s since the epoch), ``kind``
    (``clipped``, ``rejected``, ``watchdog``, ``estop``, ``estop_reset``, ``hold_failed``), ``reason`` and
    ``command`` (``mode``, ``value``, ``gripper``, ``timestamp``, or null). ``path`` empty: nothing is
    written. Each line is flushed, so a crash keeps every event before it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path) if path else None
        self._file: IO[str] | None = None

    def open(self) -> None:
        if self.path is not None and self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")

    def write(self, kind: str, reason: str, cmd: Command | None = None) -> None:
        if self._file is None:
            return
        command = None
        if cmd is not None:
            command = {
                "mode": str(cmd.mode),
                "value": _jsonable(cmd.value),
                "gripper": None if cmd.gripper is None else _jsonable(cmd.gripper),
                "timestamp": _jsonable(cmd.timestamp),
            }
        record = {"time": time.time(), "kind": kind, "reason": reason, "command": command}
        self._file.write(json.dumps(record, allow_nan=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _in_box(p: np.ndarray, low: np.ndarray, high: np.ndarray) -> bool:
    return bool(np.all(p >= low) and np.all(p <= high))


class SafeRobot(Robot):
    """A :class:`Robot` that enforces ``cfg`` (:class:`~robot_rl.config.SafetyConfig`) on ``robot``; see
    the module docstring for the rules. Thread-safe: commands, holds and the watchdog share one lock.

    Args:
        robot: the robot to protect (any driver, or another ``SafeRobot``).
        cfg: limits and triggers; default ``SafetyConfig()`` (the robot's own limits, 500 ms watchdog,
            SIGUSR1 e-stop, no fault log).

    Raises:
        ValueError: a bad ``cfg`` (names the ``env.robot.safety`` key); at :meth:`connect`, a joint margin
            or workspace box that leaves no room.
        HardwareError: at :meth:`connect`, the robot offers no mode the layer passes, ``estop_signal`` set
            but not on the main thread, or ``estop_key`` set without an X display.
        MissingExtraError: ``estop_key`` set without ``pynput`` (the ``teleop`` extra).
    """

    def __init__(self, robot: Robot, cfg: SafetyConfig | None = None) -> None:
        self.cfg = cfg or SafetyConfig()
        bad = safety_problems(self.cfg)
        if bad:
            raise ValueError("; ".join(bad))
        self.robot = robot
        self.name = f"{robot.name}+safety"
        self._lock = threading.Lock()
        self._connected = False
        self._log = FaultLog(self.cfg.fault_log)
        self._counters = SafetyCounters()
        self._lim: RobotLimits | None = None
        self._estop_reason: str | None = None
        self._vendor_stopped = False  # the latched e-stop was taken by the controller's own stop
        self._robot_boundary = self._has_clearance = False  # found at connect
        self._stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._listener = None
        self._prev_handler = None

    @classmethod
    def from_config(cls, cfg: RobotConfig, control_hz: float | None = None, moving: bool = True) -> SafeRobot:
        """The robot of ``cfg.driver`` at ``control_hz`` (see :func:`~robot_rl.hardware.factory.make_robot`)
        behind ``cfg.safety``; ``moving``: it will be commanded (False: only read and held).

        Raises:
            ValueError: a vendor arm with a speed or acceleration scale above 0.25, or one to be moved
                without a workspace box (:func:`~robot_rl.config_checks.real_robot_problems`; names the
                key)."""
        bad = real_robot_problems(cfg, moving)
        if bad:
            raise ValueError("; ".join(bad))
        return cls(make_robot(cfg, control_hz), cfg.safety)

    @property
    def simulated(self) -> bool:
        """Whether the wrapped robot is simulated (its default speed scales are then 1.0, not 0.25)."""
        return bool(self.robot.simulated)

    @property
    def lockstep(self) -> bool:
        """Whether the wrapped robot is a lock-step simulator (each command advances its physics)."""
        return bool(self.robot.lockstep)

    @property
    def reset_scene(self) -> Callable[[int | None], None] | None:
        """The wrapped robot's ``reset_scene(seed)`` (the sim-backed robots re-place the cube and home the
        arm), after which tracked targets restart from the measured pose; ``None`` when it has none."""
        inner = getattr(self.robot, "reset_scene", None)
        if not callable(inner):
            return None

        def reset(seed: int | None = None) -> None:
            with self._lock:
                inner(seed)
                self._last_mode, self._anchored = None, None
                self._last_fresh = time.monotonic()

        return reset

    # --- Robot interface ----------------------------------------------------------------------------

    @property
    def modes(self) -> tuple[CommandMode, ...]:  # type: ignore[override]
        return tuple(m for m in self.robot.modes if m in SAFE_MODES)

    @property
    def limits(self) -> RobotLimits:
        """The enforced limits: the robot's, less the joint margin, scaled, with the configured box
        intersected with the robot's."""
        return self._lim if self._lim is not None else self._effective_limits()

    @property
    def is_connected(self) -> bool:
        return self._connected and self.robot.is_connected

    @property
    def counters(self) -> SafetyCounters:
        """A copy of the :class:`SafetyCounters`."""
        with self._lock:
            return dataclasses.replace(self._counters)

    @property
    def estopped(self) -> bool:
        """Whether the e-stop is latched."""
        return self._estop_reason is not None

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray | None:
        return self.robot.forward_kinematics(joint_pos)

    @property
    def tracking_time_s(self) -> float:
        """The wrapped robot's :attr:`~robot_rl.hardware.robot.Robot.tracking_time_s` (s)."""
        return float(self.robot.tracking_time_s)

    def link_clearance(self, joint_pos: np.ndarray) -> float | None:
        """The wrapped robot's :meth:`~robot_rl.hardware.robot.Robot.link_clearance` (m, or ``None``)."""
        return self.robot.link_clearance(joint_pos)

    @property
    def robot_side_boundary(self) -> bool:
        """Whether the robot's own controller enforces the layer's workspace box (set at :meth:`connect`
        through :meth:`~robot_rl.hardware.robot.Robot.set_tcp_boundary`); False before connect."""
        return self._robot_boundary

    def _clearance(self) -> Callable[[np.ndarray], float | None] | None:
        """The robot's collision model when it has one (found at connect), else ``None``."""
        return self.robot.link_clearance if self._has_clearance else None

    def connect(self) -> None:
        """Connect the robot, take the measured state as the start of every tracked target, open the
        fault log, install the e-stop signal/key hooks and start the watchdog thread."""
        if self._connected:
            return
        self.robot.connect()
        try:
            if not self.modes:  # some drivers learn their modes from the robot at connect
                raise HardwareError(
                    f"{self.name}: the robot offers {[str(m) for m in self.robot.modes]}, none of which the "
                    f"safety layer passes ({[str(m) for m in SAFE_MODES]})"
                )
            self._lim = self._effective_limits()
            # the controller's own boundary, where the robot has one: the backstop under a late client
            self._robot_boundary = bool(self.robot.set_tcp_boundary(self._lim.ee_low, self._lim.ee_high))
            state = self.robot.read()
            self._has_fk = self.robot.forward_kinematics(state.joint_pos) is not None
            self._has_clearance = self.robot.link_clearance(state.joint_pos) is not None
            self._counters = SafetyCounters()
            self._last_mode: CommandMode | None = None
            self._sent = 0  # commands sent to the robot, so an anchor is taken once per mode switch
            self._anchored: tuple[CommandMode, int] | None = None
            self._estop_logged = self._vendor_stopped = False
            self._tripped = False
            self._last_fresh = self._last_hold = time.monotonic()
            self._log.open()
            self._install_signal()
            self._start_key_listener()
        except BaseException:
            self._teardown()
            self.robot.disconnect()
            raise
        self._connected = True
        self._stop.clear()
        self._monitor = threading.Thread(target=self._watch, name=f"{self.name}-watchdog", daemon=True)
        self._monitor.start()

    def disconnect(self) -> None:
        """Stop the watchdog thread and hooks, close the log and disconnect the robot (which holds)."""
        self._stop.set()
        if self._monitor is not None:
            self._monitor.join(timeout=5.0)
            self._monitor = None
        with self._lock:
            self._connected = False
            self._teardown()
        self.robot.disconnect()

    def read(self) -> RobotState:
        with self._lock:
            return self.robot.read()

    def command(self, cmd: Command) -> None:
        """Check, clip and forward ``cmd``; see the module docstring.

        Raises:
            CommandRejected: unsupported mode, wrong shape, NaN/inf, or e-stop latched (the robot then
                holds; the message names the robot and the reason).
            RobotConnectionError: not connected (from the robot).
        """
        with self._lock:
            self._require()
            self._counters.commands += 1
            try:
                cmd, reasons = self._checked(cmd)
            except CommandRejected as err:
                self._counters.rejected += 1
                self._log.write("rejected", str(err), cmd)
                self._try_hold()
                raise
            if self._switch_waits(cmd):
                self._counters.clipped += 1
                self._log.write("clipped", "switch to ee_delta: the joint target brakes to rest first", cmd)
                self._brake(cmd.gripper, cmd.timestamp)
            else:
                if cmd.mode == CommandMode.EE_DELTA:
                    value, reasons_mode = self._plan_ee(np.asarray(cmd.value, dtype=np.float64))
                else:
                    value, reasons_mode = self._plan_joint(np.asarray(cmd.value, dtype=np.float64))
                reasons += reasons_mode
                if reasons:
                    self._counters.clipped += 1
                    self._log.write("clipped", "; ".join(reasons), cmd)
                self._send(Command(cmd.mode, value, cmd.gripper, cmd.timestamp))
            self._last_fresh = time.monotonic()
            self._tripped = False

    def hold(self) -> None:
        """Brake towards a stop (see the module docstring); counts in ``holds``."""
        with self._lock:
            self._require()
            self._hold()

    # --- e-stop -------------------------------------------------------------------------------------

    def estop(self, reason: str = "estop() called") -> None:
        """Latch the e-stop: every later command is rejected and the robot holds until
        :meth:`reset_estop`. Safe from any thread and from a signal handler (it only sets a flag; the
        watchdog thread holds within 10 ms, and the next command is rejected)."""
        if self._estop_reason is None:
            self._estop_reason = reason

    def reset_estop(self) -> None:
        """Release a latched e-stop (a human's decision); tracked targets restart from the measured pose."""
        with self._lock:
            if self._estop_reason is None:
                return
            self._service_estop()
            self._log.write("estop_reset", f"released after: {self._estop_reason}")
            self._estop_reason = None
            self._estop_logged = self._vendor_stopped = False
            self._last_mode, self._anchored = None, None
            self._last_fresh = time.monotonic()
            self._tripped = False

    # --- internals (called with the lock held) -------------------------------------------------------

    def _require(self) -> None:
        if not self._connected:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")

    def _effective_limits(self) -> RobotLimits:
        lim, c = self.robot.limits, self.cfg
        low, high = lim.joint_low + c.joint_margin_rad, lim.joint_high - c.joint_margin_rad
        if np.any(low >= high):
            joint = lim.joint_names[int(np.argmax(low >= high))]
            raise ValueError(
                f"env.robot.safety.joint_margin_rad={c.joint_margin_rad}: leaves no range for {joint} of "
                f"{self.robot.name}"
            )
        vel_scale, acc_scale = c.motion_scales(self.simulated)
        box_low, box_high = lim.ee_low.copy(), lim.ee_high.copy()
        if c.workspace_low:
            box_low = np.maximum(box_low, c.workspace_low)
        if c.workspace_high:
            box_high = np.minimum(box_high, c.workspace_high)
        if np.any(box_low >= box_high):
            raise ValueError(
                f"env.robot.safety.workspace_low/high={c.workspace_low}/{c.workspace_high}: no overlap with "
                f"{self.robot.name}'s box {lim.ee_low.tolist()}..{lim.ee_high.tolist()}"
            )
        return dataclasses.replace(
            lim,
            joint_low=low,
            joint_high=high,
            joint_vel_max=lim.joint_vel_max * vel_scale,
            joint_acc_max=lim.joint_acc_max * acc_scale,
            ee_low=box_low,
            ee_high=box_high,
            ee_step_max=lim.ee_step_max * c.ee_step_scale,
        )

    def _checked(self, cmd: Command) -> tuple[Command, list[str]]:
        """``cmd`` with its gripper clipped into [0, 1], and the clip reasons; raises CommandRejected."""
        self._service_estop()
        if self._estop_reason is not None:
            raise CommandRejected(f"{self.name}: e-stop latched ({self._estop_reason}); call reset_estop()")
        reasons = []
        gripper = cmd.gripper
        if gripper is not None and np.isfinite(gripper) and not 0.0 <= gripper <= 1.0:
            gripper = float(np.clip(gripper, 0.0, 1.0))
            reasons.append("gripper")
        cmd = dataclasses.replace(cmd, gripper=gripper)
        value = check_command(cmd, self.modes, self._lim.num_joints, self.name)
        if cmd.mode == CommandMode.EE_DELTA and value.shape != (3,):
            raise CommandRejected(f"{self.name}: rotation ee_delta (6,) is not passed by the safety layer")
        if cmd.mode == CommandMode.JOINT_POSITION and self._last_mode not in (cmd.mode, None):
            self._anchor(cmd.mode)
            lim = self._lim
            stop = self._q + stop_offset(self._v, lim.joint_acc_max, 1.0 / lim.control_hz)
            out_box = self._has_fk and not (
                np.array_equal(self._box_low, lim.ee_low) and np.array_equal(self._box_high, lim.ee_high)
            )
            q = self._q  # a joint already out (it overshot) may stop no further out
            if (
                out_box
                or np.any(stop < np.minimum(lim.joint_low, q))
                or np.any(stop > np.maximum(lim.joint_high, q))
            ):
                raise CommandRejected(
                    f"{self.name}: switch to joint_position while the arm moves too fast to stop inside the "
                    "workspace box and the joint limits; hold and retry"
                )
        if cmd.mode == CommandMode.EE_DELTA and self._last_mode == CommandMode.JOINT_POSITION:
            self._check_ee_switch()
        return cmd, reasons

    def _switch_waits(self, cmd: Command) -> bool:
        """Whether ``cmd`` switches from joint targets to ``ee_delta`` while the joint target still moves:
        the robot's Cartesian controller would take over the arm's momentum, so the joint target brakes
        instead (one step per such command) until it is at rest."""
        return (
            cmd.mode == CommandMode.EE_DELTA
            and self._last_mode == CommandMode.JOINT_POSITION
            and self._v.any()
        )

    def _check_ee_switch(self) -> None:
        """Refuse a switch from joint targets to ``ee_delta`` while a joint is less than
        ``cfg.ee_switch_room_periods`` periods' move at full speed from its limit (the robot's IK has no room
        there and may swing the arm)."""
        lim, q = self._lim, self._q
        reach = self.cfg.ee_switch_room_periods * lim.joint_vel_max / lim.control_hz  # rad
        room = np.minimum(q - lim.joint_low, lim.joint_high - q) - reach
        if np.any(room < 0.0):
            joint = lim.joint_names[int(np.argmin(room))]
            raise CommandRejected(
                f"{self.name}: switch to ee_delta with {joint} at its limit (the Cartesian controller has no "
                "room); move it in with joint_position first"
            )

    def _anchor(self, mode: CommandMode) -> None:
        """Start tracking ``mode``'s target from the measured state when the last command had another."""
        if self._last_mode == mode or self._anchored == (mode, self._sent):
            return
        self._anchored = (mode, self._sent)
        state = self.robot.read()
        lim = self._lim
        if mode == CommandMode.EE_DELTA:
            after_joints = self._last_mode == CommandMode.JOINT_POSITION and self._has_fk
            # After joint commands the robot's target is where the joints were sent, not where they are.
            self._target = self.robot.forward_kinematics(self._q) if after_joints else state.ee_pos.copy()
            self._ee_measured = state.ee_pos.copy()
            self._ee_latency_s = 0.0  # s, read to send of the last ee_delta (_plan_ee)
        else:
            self._q = state.joint_pos.astype(np.float64).copy()
            self._v = np.clip(state.joint_vel, -lim.joint_vel_max, lim.joint_vel_max).astype(np.float64)
            if self._has_fk:  # a start outside the box may stay there, but not move further out
                dt = 1.0 / lim.control_hz
                start = [self._q, *braking_path(self._q, self._v, lim.joint_acc_max, dt)]
                ends = [self.robot.forward_kinematics(q) for q in start]
                self._box_low = np.minimum.reduce([lim.ee_low, *ends])
                self._box_high = np.maximum.reduce([lim.ee_high, *ends])

    def _plan_ee(self, delta: np.ndarray) -> tuple[np.ndarray, list[str]]:
        self._anchor(CommandMode.EE_DELTA)
        lim, target = self._lim, self._target
        step = np.clip(delta, -lim.ee_step_max, lim.ee_step_max)
        reasons = ["ee step"] if not np.array_equal(step, delta) else []
        # the measured pose predicted from the target (module docstring) stays in the box too; a target
        # beyond that comes back by one step at most
        read_at = time.monotonic()
        state = self.robot.read()
        measured = state.ee_pos
        # where the arm gets at its present speed within its tracking time (at least one period), plus, on
        # a real-time robot, the last command's read-to-send time: the arm moves on while this is computed
        lag_s = 0.0 if self.lockstep else self._ee_latency_s
        periods = max(1.0, self.tracking_time_s * lim.control_hz) + lag_s * lim.control_hz
        ahead = measured + periods * (measured - self._ee_measured)
        if self._has_fk:  # or at its instantaneous velocity (J dq), per axis the farther: a target change
            # accelerates the arm past its last period's mean (random/ee: 6.2 mm out before, 4.2 mm after)
            fk, h, q = self.robot.forward_kinematics, 1e-6, state.joint_pos
            here = fk(q)
            jac = np.stack([(fk(q + h * e) - here) / h for e in np.eye(q.size)], axis=1)
            now_ahead = measured + (periods / lim.control_hz) * (jac @ state.joint_vel)
            ahead = np.where(np.abs(now_ahead - measured) > np.abs(ahead - measured), now_ahead, ahead)
        self._ee_measured = measured
        # a persistent offset, or the arm heading out at its present speed: the target comes in as far
        error = measured - target
        out_low, out_high = np.maximum(lim.ee_low - ahead, 0.0), np.maximum(ahead - lim.ee_high, 0.0)
        low = np.clip(lim.ee_low + np.maximum(-error, out_low), lim.ee_low, lim.ee_high)
        high = np.clip(lim.ee_high - np.maximum(error, out_high), lim.ee_low, lim.ee_high)
        low = np.maximum(low, np.minimum(0.5 * (lim.ee_low + ahead), lim.ee_high))
        high = np.minimum(high, np.maximum(0.5 * (lim.ee_high + ahead), lim.ee_low))
        back = np.clip(target, low, high)
        back = np.clip(back, target - lim.ee_step_max, target + lim.ee_step_max)
        new = np.clip(target + step, np.minimum(low, back), np.maximum(high, back))
        free = new == target + step
        if not free.all():
            reasons.append("workspace")
        scale = self._ee_link_scale(state.joint_pos, new - measured)
        if scale < 1.0:
            reasons.append("links")
            new, free = target + scale * (new - target), np.zeros(3, dtype=bool)
        # the step itself where the workspace did not bind: (target + step) - target can differ from step in
        # the last bit, and a stacked SafeRobot would count that as an over-limit step
        self._ee_latency_s = time.monotonic() - read_at
        return np.where(free, step, new - target), reasons

    def _ee_link_scale(self, joint_pos: np.ndarray, move: np.ndarray) -> float:
        """The largest of 1, 1/2, 1/4, 0 by which an ``ee_delta`` step can be scaled so that the joints the
        arm will take to move its end effector by ``move`` (3,) m from the measured ``joint_pos`` (n,) rad,
        and twice that (the overshoot, module docstring), keep ``cfg.link_clearance_m`` between links and
        the table (or no less than they have now). The joints are a first-order prediction: damped least
        squares on the forward kinematics' Jacobian, by finite differences (Buss, "Introduction to inverse
        kinematics with Jacobian transpose, pseudoinverse and damped least squares methods", 2004).
        1 without a kinematic or collision model."""
        clearance = self._clearance()
        if clearance is None or not self._has_fk:
            return 1.0
        floor = min(self.cfg.link_clearance_m, clearance(joint_pos))
        fk, h = self.robot.forward_kinematics, 1e-6
        here = fk(joint_pos)
        jac = np.stack([(fk(joint_pos + h * e) - here) / h for e in np.eye(joint_pos.size)], axis=1)
        dq = jac.T @ np.linalg.solve(jac @ jac.T + IK_DAMPING * np.eye(3), move)
        for scale in (1.0, 0.5, 0.25):
            if all(clearance(joint_pos + k * scale * dq) >= floor for k in (1.0, 2.0)):
                return scale
        return 0.0

    def _plan_joint(self, q_des: np.ndarray) -> tuple[np.ndarray, list[str]]:
        self._anchor(CommandMode.JOINT_POSITION)
        reasons = []
        max_lag = self.cfg.max_tracking_error_rad
        state = self.robot.read()
        measured = state.joint_pos
        if max_lag > 0:
            lag = np.abs(measured - self._q)
            if np.max(lag) > max_lag:  # blocked (contact): restart the target from where the arm is
                joint = self._lim.joint_names[int(np.argmax(lag))]
                reasons.append(f"tracking: {joint} {np.max(lag):.3f} rad behind its target")
                self._counters.tracking_resets += 1
                self._anchored = None
                self._last_mode = None
                self._anchor(CommandMode.JOINT_POSITION)
        lim, q, v_prev = self._lim, self._q, self._v
        dt, acc, vmax = 1.0 / lim.control_hz, lim.joint_acc_max, lim.joint_vel_max
        target = np.clip(q_des, lim.joint_low, lim.joint_high)
        if not np.array_equal(target, q_des):
            reasons.append("joint limits")
        v = np.clip((target - q) / dt, -vmax, vmax)
        if not np.array_equal(v, (target - q) / dt):
            reasons.append("joint velocity")
        v_acc = np.clip(v, v_prev - acc * dt, v_prev + acc * dt)
        if not np.array_equal(v_acc, v):
            reasons.append("joint acceleration")
        # Braking look-ahead: the stop point stays within the limits (or no further out than it was).
        stop_prev = q + stop_offset(v_prev, acc, dt)
        low, high = np.minimum(lim.joint_low, stop_prev), np.maximum(lim.joint_high, stop_prev)
        v_brake = braking_velocity(v_prev, acc, dt)
        # and the target's mirror image of the measured joint stays within them (the overshoot of a lag)
        up = np.minimum(max_speed_within(high - q, acc, dt), (0.5 * (high + measured) - q) / dt)
        down = np.maximum(-max_speed_within(q - low, acc, dt), (0.5 * (low + measured) - q) / dt)
        up, down = np.maximum(up, v_brake), np.minimum(down, v_brake)
        v_lim = np.clip(v_acc, down, up)
        if not np.array_equal(v_lim, v_acc):
            reasons.append("joint braking distance")
        v_safe = self._box_step(v_lim, v_brake, state, reasons)
        self._pending_q, self._pending_v = q + v_safe * dt, v_safe
        return self._pending_q, reasons

    def _box_step(
        self, v: np.ndarray, v_brake: np.ndarray, state: RobotState, reasons: list[str]
    ) -> np.ndarray:
        """Shorten the step velocity ``v`` towards ``v_brake`` (whose braking path is the tail of the last
        accepted one) until the end effector is in the box, and (with a collision model) the links keep
        their clearance, at the new target, along its braking path and at the target's mirror image of the
        ``state``'s measured joints (the overshoot of an arm that lags its target; module docstring); the
        new target's end effector plus the measured one's offset from the last target's is in the box too."""
        lim, q, measured = self._lim, self._q, state.joint_pos
        if not self._has_fk:  # no kinematic model: react to the measured pose
            if not _in_box(state.ee_pos, lim.ee_low, lim.ee_high):
                reasons.append("workspace (measured)")
                return v_brake
            return v
        dt, acc, fk = 1.0 / lim.control_hz, lim.joint_acc_max, self.robot.forward_kinematics
        clearance = self._clearance()
        # a target that is already closer than link_clearance_m (the arm started there) may not get closer
        floor = min(self.cfg.link_clearance_m, clearance(q)) if clearance is not None else 0.0
        error = state.ee_pos - fk(q)  # the measured end effector's offset from the target's
        box_low, box_high = self._box_low, self._box_high

        def inside(vc: np.ndarray) -> bool:
            qn = q + vc * dt
            ee = fk(qn)
            if not (_in_box(ee, box_low, box_high) and _in_box(ee + error, box_low, box_high)):
                return False
            points = [2.0 * qn - measured, *braking_path(qn, vc, acc, dt)]
            if not all(_in_box(fk(p), box_low, box_high) for p in points):
                return False
            points.append(qn)
            return clearance is None or all(clearance(p) >= floor for p in points)

        if inside(v):
            return v
        reasons.append("workspace")
        best, lo, hi = v_brake, 0.0, 1.0
        for _ in range(6):
            mid = 0.5 * (lo + hi)
            vc = v_brake + mid * (v - v_brake)
            if inside(vc):
                lo, best = mid, vc
            else:
                hi = mid
        return best

    def _send(self, cmd: Command) -> None:
        """Forward ``cmd`` (already made safe) and, once the robot took it, commit the tracked targets."""
        self.robot.command(cmd)
        self._sent += 1
        if cmd.mode == CommandMode.EE_DELTA:
            self._target = self._target + cmd.value
        else:
            self._q, self._v = self._pending_q, self._pending_v
        self._last_mode = cmd.mode

    def _hold(self) -> None:
        lim = self._lim
        mode = self._last_mode or (
            CommandMode.JOINT_POSITION if CommandMode.JOINT_POSITION in self.modes else CommandMode.EE_DELTA
        )
        self._anchor(mode)
        if mode == CommandMode.EE_DELTA:
            target = self._target
            step = np.clip(self.robot.read().ee_pos - target, -lim.ee_step_max, lim.ee_step_max)
            new = np.clip(target + step, np.minimum(lim.ee_low, target), np.maximum(lim.ee_high, target))
            self._send(Command(mode, new - target, timestamp=time.monotonic()))
        else:
            self._brake(None, time.monotonic())
        self._counters.holds += 1
        self._last_hold = time.monotonic()

    def _brake(self, gripper: float | None, timestamp: float) -> None:
        """Send one maximum-deceleration step of the joint target (with ``gripper``, 0..1 or None)."""
        dt = 1.0 / self._lim.control_hz
        v = braking_velocity(self._v, self._lim.joint_acc_max, dt)
        self._pending_q, self._pending_v = self._q + v * dt, v
        self._send(Command(CommandMode.JOINT_POSITION, self._pending_q, gripper, timestamp))

    def _try_hold(self) -> None:
        try:
            self._hold()
        except HardwareError as err:
            self._log.write("hold_failed", str(err))

    def _service_estop(self) -> None:
        """Count, log and act on an e-stop latched since the last check (it may come from a signal): the
        robot's own stop where its driver has one (:attr:`Robot.vendor_stop`; the arm then stays stopped
        on the controller's side, so no holds follow while latched), else a hold."""
        if self._estop_reason is not None and not self._estop_logged:
            self._estop_logged = True
            self._counters.estops += 1
            self._log.write("estop", self._estop_reason)
            if self.robot.vendor_stop:
                try:
                    self.robot.emergency_stop()
                    self._vendor_stopped = True
                    self._log.write("estop", f"{self.robot.name}: the controller's own stop was triggered")
                    return
                except HardwareError as err:
                    self._log.write("hold_failed", f"the controller's stop failed ({err}); holding instead")
            self._try_hold()

    def _watch(self) -> None:
        """Watchdog thread: service e-stops within 10 ms; hold at ``control_hz`` while latched or while no
        accepted command came for ``watchdog_ms``."""
        period = 1.0 / self._lim.control_hz
        timeout_s = self.cfg.watchdog_ms / 1000.0
        while not self._stop.wait(min(0.01, period)):
            with self._lock:
                if not self._connected:
                    continue
                self._service_estop()
                now = time.monotonic()
                latched = self._estop_reason is not None
                if timeout_s > 0 and not latched and not self._tripped and now - self._last_fresh > timeout_s:
                    self._tripped = True
                    self._counters.watchdog_trips += 1
                    self._log.write("watchdog", f"no command for {1000 * (now - self._last_fresh):.0f} ms")
                held_by_controller = latched and self._vendor_stopped
                if (latched or self._tripped) and not held_by_controller and now - self._last_hold >= period:
                    self._try_hold()

    # --- hooks ------------------------------------------------------------------------------------------

    def _install_signal(self) -> None:
        name = self.cfg.estop_signal
        if not name:
            return
        if threading.current_thread() is not threading.main_thread():
            raise HardwareError(
                f"{self.name}: env.robot.safety.estop_signal={name} needs connect() on the main thread "
                "(Python runs signal handlers there); set it to '' and call estop() instead"
            )
        signum = getattr(signal, name)
        prev = signal.getsignal(signum)

        def handler(sig: int, frame: object) -> None:
            self.estop(f"signal {name}")
            if callable(prev):
                prev(sig, frame)

        signal.signal(signum, handler)
        self._prev_handler = (signum, prev, handler)

    def _start_key_listener(self) -> None:
        key = self.cfg.estop_key
        if not key:
            return
        if importlib.util.find_spec("pynput") is None:
            raise MissingExtraError(
                f"{self.name}: env.robot.safety.estop_key needs pynput: pip install 'robot-rl[teleop]'"
            )
        try:
            from pynput import keyboard
        except ImportError as err:  # pynput raises ImportError when it finds no X display
            raise HardwareError(
                f"{self.name}: env.robot.safety.estop_key={key!r} needs a keyboard backend "
                f"(set DISPLAY): {err}"
            ) from err
        self._listener = keyboard.Listener(on_press=self._on_key)
        self._listener.start()
        self._listener.wait()

    def _on_key(self, key: object) -> None:
        if key_name(key) == self.cfg.estop_key.lower():
            self.estop(f"key {self.cfg.estop_key}")

    def _teardown(self) -> None:
        if self._listener is not None:
            stop_listener(self._listener)
            self._listener = None
        if self._prev_handler is not None:
            signum, prev, handler = self._prev_handler
            if signal.getsignal(signum) is handler and threading.current_thread() is threading.main_thread():
                signal.signal(signum, prev)
            self._prev_handler = None
        self._log.close()
