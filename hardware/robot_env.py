"""``RobotEnv``: the pick-cube task on a :class:`~robot_rl.hardware.robot.Robot` plus cameras, with exactly
the observation and action keys of the simulated ``robot_rl/PandaPickCube-v0``, so every stage (collect,
online, eval, record) runs on a robot by config (``env.robot``).

Action (``env.robot.action``), float32:

- ``ee_delta`` (the default), (4,): ``[dx, dy, dz, grip]``, dx/dy/dz in [-0.03, 0.03] m, grip in [0, 1],
  sent as ``Command(EE_DELTA, [dx, dy, dz], gripper=grip)``;
- ``joint_position``, (n + 1,): target joint positions (rad) within the robot's (safety-margined) joint
  limits, then the gripper closure in [0, 1] (the :class:`Robot` interface's gripper unit), sent as
  ``Command(JOINT_POSITION, q, gripper=grip)``; what a leader arm drives. The safety layer's joint limits
  and per-step velocity/acceleration limits apply to every target.

Without a gripper (``env.robot.gripper=none``, or a driver with none such as ``ur``,
:func:`~robot_rl.hardware.factory.has_gripper`) the action is (3,) ``[dx, dy, dz]`` or (n,) joint targets,
``observation.state`` loses its gripper entry ((2n + 7,) or (n,)), and no command carries a gripper target.

Out-of-bounds or non-finite actions raise ``ValueError`` like the simulated env (nothing is silently
clipped here).

Observation (gymnasium ``Dict``):

- ``observation.state`` float32, from the :class:`RobotState`: for ``ee_delta`` (2n + 8,): joint positions
  (rad), joint velocities (rad/s), end-effector position (m), quaternion (w, x, y, z), gripper closure in
  [0, 1] (n = 7 for the Panda: (22,), the simulated task's layout); for ``joint_position`` (n + 1,): joint
  positions (rad) and the gripper closure, the action's layout. :attr:`RobotEnv.feature_names` then names
  both LeRobot-style, ``<joint>.pos`` per joint and ``gripper.pos`` (an SO-101: ``shoulder_pan.pos`` ..
  ``wrist_roll.pos``, ``gripper.pos``, LeRobot's names; its units are degrees or [-100, 100] and a
  0..100 gripper, ours rad and a closure in [0, 1]);
- ``observation.environment_state`` float32 (7,): the robot's ``extra["environment_state"]`` when it has
  one (the sim-backed robot; a motion-capture system on hardware), else absent;
- ``observation.images.<cam>`` uint8 (image_size, image_size, 3) for each camera of ``env.cameras``,
  resized with swscale's area filter (PyAV).

Control loop: each :meth:`RobotEnv.step` sends the command, sleeps to the next deadline of a fixed-rate
:class:`~robot_rl.hardware.rate.RateLoop` at ``env.control_hz`` (no sleep for the in-process lock-step
simulator), then reads the robot and the cameras. ``info["control"]`` (on the last step of an episode) and
:meth:`RobotEnv.control_stats` give the achieved rate, wake-up jitter, deadline misses and robot I/O latency.

Success (``env.robot.success``): ``lifted`` (the robot's ``extra["lifted"]`` held for
``env.success_hold_steps`` steps), ``critic`` (a progress critic's done head, held as long) or ``operator``
(the env never decides; the human's label from the teleop device does). Reward: 1.0 on the success step,
else 0.0; success terminates. Truncation after ``env.max_episode_steps``.

Reset: a scripted, rate-limited joint-position move to the home posture, then the scene reset
(``env.robot.reset``): the sim-backed robot's ``reset_scene(seed)``, or a human (Enter on the terminal).

A hardware error mid-episode (lost link, fault, camera timeout) gives a safe stop: the robot is told to hold
(if it still answers), the step returns the last observation with ``truncated=True`` and
``info["robot_error"]`` naming the robot and the error, so the episode so far is kept by the caller; the
next :meth:`RobotEnv.reset` raises that error (same class) instead of moving again.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from robot_rl import keys
from robot_rl.config import EnvConfig
from robot_rl.hardware.camera import Camera
from robot_rl.hardware.errors import CommandRejected, HardwareError, RobotFault
from robot_rl.hardware.factory import has_gripper, make_cameras
from robot_rl.hardware.rate import RateLoop
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotState
from robot_rl.hardware.safety import SafeRobot
from robot_rl.sim.panda_pick_cube import ENV_STATE_DIM, MAX_DELTA_M, TASK, check_action

log = logging.getLogger(__name__)
CAMERA_TIMEOUT_S = 1.0
HOME_STALL_PERIODS = 10
"""Control periods without a joint nearer home after which the home motion counts as blocked."""
HOME_PROGRESS_RAD = 1e-3
"""Least decrease (rad) of the largest joint error from home that counts as progress."""
HOME_APPROACH_TOL_M = 0.01
"""How near (m) the blocked home motion's Cartesian approach brings the end effector to home's position."""


def state_vector(state: RobotState, gripper: bool = True) -> np.ndarray:
    """float32 (2n + 8,): joint positions (rad), joint velocities (rad/s), ee position (m), ee quaternion
    (w, x, y, z), gripper closure [0, 1]: the simulated task's ``observation.state`` layout; (2n + 7,)
    without the gripper when ``gripper`` is False."""
    grip = [state.gripper] if gripper else []
    return np.concatenate([state.joint_pos, state.joint_vel, state.ee_pos, state.ee_quat, grip]).astype(
        np.float32
    )


def joint_state_vector(state: RobotState, gripper: bool = True) -> np.ndarray:
    """float32 (n + 1,): joint positions (rad) and gripper closure [0, 1], the ``joint_position`` layout;
    (n,) without the gripper when ``gripper`` is False."""
    grip = [state.gripper] if gripper else []
    return np.append(state.joint_pos, grip).astype(np.float32)


def joint_feature_names(joint_names: tuple[str, ...], gripper: bool = True) -> list[str]:
    """LeRobot-style names of a ``joint_position`` state/action: ``<joint>.pos`` each, then ``gripper.pos``
    when ``gripper``."""
    return [f"{name}.pos" for name in joint_names] + (["gripper.pos"] if gripper else [])


def resize_image(image: np.ndarray, size: int) -> np.ndarray:
    """RGB uint8 (H, W, 3) -> uint8 (size, size, 3) with swscale's area filter (PyAV); unchanged if already
    that size. Raises ValueError for anything but (H, W, 3) uint8."""
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"camera frames must be uint8 (H, W, 3), got {image.dtype} {image.shape}")
    if image.shape[:2] == (size, size):
        return image
    import av

    frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
    return frame.reformat(width=size, height=size, interpolation="AREA").to_ndarray()


def ask_operator(prompt: str) -> None:
    """Print ``prompt`` and wait for Enter on the terminal (the human reset).

    Raises:
        HardwareError: stdin is not a terminal (nobody can press Enter).
    """
    if not sys.stdin.isatty():
        raise HardwareError(
            "env.robot.reset=human waits for Enter on a terminal, but stdin is not one; run from a terminal "
            "or use env.robot.reset=none"
        )
    input(prompt)


class CriticSuccess:
    """Success from a progress critic: the done head on (previous, current) observation >= ``threshold``.

    Raises:
        ValueError: the env's observations lack a key the critic reads.
    """

    def __init__(self, critic, threshold: float, task: str, obs_keys: list[str]) -> None:
        missing = sorted(set(critic.input_keys) - set(obs_keys))
        if missing:
            raise ValueError(f"env.robot.success=critic: the critic reads {missing}, which the env lacks")
        self.critic, self.threshold, self.task = critic, float(threshold), task
        self._prev: dict[str, np.ndarray] | None = None

    def _view(self, obs: dict) -> dict[str, np.ndarray]:
        return {k: np.asarray(obs[k])[None] for k in self.critic.input_keys}

    def reset(self, obs: dict) -> None:
        self._prev = self._view(obs)

    def __call__(self, obs: dict) -> bool:
        view = self._view(obs)
        out = self.critic.predict(self._prev, view, self.task)
        self._prev = view
        return float(out.done[0]) >= self.threshold


class RobotEnv(gym.Env):
    """The pick-cube task on a robot; see the module docstring for spaces, success, reset and errors.

    The robot and cameras are connected here (the observation space depends on the robot's joint count
    and extras) and disconnected by :meth:`close`.

    Args:
        robot: the (connected or not) robot; it must offer ``joint_position`` (the home motion) and, for
            ``env.robot.action=ee_delta``, ``ee_delta``.
        cameras: one camera per name of ``cfg.cameras``.
        cfg: the env section: ``control_hz``, ``max_episode_steps``, ``success_hold_steps``,
            ``image_size``, ``cameras`` and ``robot`` (:class:`~robot_rl.config.RobotConfig`).
        critic: a progress critic for ``success=critic``.
        wait_for_human: called with a prompt for ``reset=human`` (default: :func:`ask_operator`).
        render_mode: ``None`` or ``"rgb_array"`` (the first camera's last frame).

    Raises:
        ValueError: ``cfg.robot`` missing, ``env.kwargs`` set (simulator only), a camera of ``env.cameras``
            without a device, a success/reset mode the robot cannot do, home joints of the wrong length, a
            lock-step simulator at another rate than ``env.control_hz``, or a robot without the mode of
            ``env.robot.action``.
        HardwareError: connecting the robot or a camera failed (names the device).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        robot: Robot,
        cameras: dict[str, Camera],
        cfg: EnvConfig,
        critic=None,
        wait_for_human: Callable[[str], None] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if cfg.robot is None:
            raise ValueError("RobotEnv needs env.robot")
        if cfg.kwargs:
            raise ValueError(f"env.kwargs={cfg.kwargs!r}: simulator options; a robot (env.robot) takes none")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        missing = [c for c in cfg.cameras if c not in cameras]
        if missing:
            raise ValueError(f"env.cameras: env.robot.cameras has no device for {missing}")
        self.robot, self.cfg, self.rcfg = robot, cfg, cfg.robot
        self.cameras = {name: cameras[name] for name in cfg.cameras}
        self.task, self.render_mode = TASK, render_mode
        self.metadata = {**self.metadata, "render_fps": cfg.control_hz}
        self.image_size = int(cfg.image_size)
        self._wait_for_human = wait_for_human or ask_operator
        self._fault: HardwareError | None = None
        self._last_obs: dict[str, np.ndarray] | None = None
        self._steps = self._held = 0
        self._connect()
        try:
            self._setup(robot.read(), critic)
        except BaseException:
            self.close()
            raise

    def _setup(self, first: RobotState, critic) -> None:
        robot, cfg = self.robot, self.cfg
        self.action_mode = CommandMode(self.rcfg.action)
        if self.action_mode not in robot.modes:  # after connect: networked robots learn their modes then
            raise ValueError(
                f"{robot.name}: env.robot.action={self.action_mode!s}, a mode this robot lacks "
                f"(it has {[str(m) for m in robot.modes]})"
            )
        lockstep = bool(robot.lockstep)
        self._check_rate(lockstep)
        realtime = self.rcfg.realtime
        self.rate = RateLoop(cfg.control_hz, realtime == "always" or (realtime == "auto" and not lockstep))
        self.home = self._home_posture(first)
        self.reset_mode = self._reset_mode()
        self._has_env_state = "environment_state" in first.extra
        self._success = self._success_rule(first, critic)

        self.feature_names: dict[str, list[str]] | None = None
        """LeRobot ``names`` of ``observation.state`` and ``action`` (``joint_position`` only; else None)."""
        self.gripper = has_gripper(self.rcfg)
        """Whether the action, the state and the commands carry the gripper."""
        grip_low, grip_high = ([0.0], [1.0]) if self.gripper else ([], [])
        if self.action_mode == CommandMode.EE_DELTA:
            self._state_vector = functools.partial(state_vector, gripper=self.gripper)
            low, high = [-MAX_DELTA_M] * 3 + grip_low, [MAX_DELTA_M] * 3 + grip_high
        else:
            self._state_vector = functools.partial(joint_state_vector, gripper=self.gripper)
            lim = robot.limits
            low, high = np.append(lim.joint_low, grip_low), np.append(lim.joint_high, grip_high)
            names = joint_feature_names(lim.joint_names, self.gripper)
            self.feature_names = {keys.STATE: names, keys.ACTION: names}
        self.action_space = spaces.Box(
            np.asarray(low, np.float32), np.asarray(high, np.float32), dtype=np.float32
        )
        obs = {keys.STATE: spaces.Box(-np.inf, np.inf, self._state_vector(first).shape, np.float32)}
        if self._has_env_state:
            obs[keys.ENV_STATE] = spaces.Box(-np.inf, np.inf, (ENV_STATE_DIM,), np.float32)
        for cam in self.cameras:
            obs[keys.image_key(cam)] = spaces.Box(0, 255, (self.image_size, self.image_size, 3), np.uint8)
        self.observation_space = spaces.Dict(obs)

    # -- construction helpers ------------------------------------------------------------------------
    def _connect(self) -> None:
        if not self.robot.is_connected:
            self.robot.connect()
        try:
            for cam in self.cameras.values():
                cam.connect()
        except BaseException:
            self.robot.disconnect()
            raise

    def _check_rate(self, lockstep: bool) -> None:
        robot_hz = self.robot.limits.control_hz
        if lockstep and abs(robot_hz - self.cfg.control_hz) > 1e-9:
            raise ValueError(
                f"env.control_hz={self.cfg.control_hz:g} but the lock-step simulator {self.robot.name} "
                f"advances {robot_hz:g} Hz per command; set env.control_hz={robot_hz:g}"
            )

    def _home_posture(self, first: RobotState) -> np.ndarray:
        """The home posture (n,) rad: ``env.robot.home_joints``, else the measured start posture ``first``
        clipped into the joint limits when it is out by at most ``home_tolerance`` (an arm stopped at a limit
        sits a little past it: it lags or overshoots a target clipped there, as a restarted node finds it).

        Raises:
            ValueError: home joints of the wrong length, a robot without ``joint_position`` commands, or a
                home outside the joint limits (names the joint, its value and the limit)."""
        n, limits = self.robot.limits.num_joints, self.robot.limits
        low, high = np.asarray(limits.joint_low, np.float64), np.asarray(limits.joint_high, np.float64)
        if self.rcfg.home_joints:
            home, what = np.asarray(self.rcfg.home_joints, dtype=np.float64), "env.robot.home_joints"
            if home.shape != (n,):
                raise ValueError(
                    f"env.robot.home_joints has {home.size} values; {self.robot.name} has {n} joints "
                    f"{list(limits.joint_names)}"
                )
        else:
            home, what = np.asarray(first.joint_pos, dtype=np.float64).copy(), "the measured start posture"
            inside = np.clip(home, low, high)
            if np.max(np.abs(inside - home)) <= self.rcfg.home_tolerance:
                home = inside
        if CommandMode.JOINT_POSITION not in self.robot.modes:
            raise ValueError(f"{self.robot.name}: the home motion needs joint_position commands")
        out = np.flatnonzero((home < low) | (home > high))
        if len(out):
            j = int(out[0])
            raise ValueError(
                f"{what} is outside the joint limits: {limits.joint_names[j]} at {home[j]:.4f} rad, limits "
                f"[{low[j]:.4f}, {high[j]:.4f}] (home {home.tolist()}); set env.robot.home_joints inside them"
            )
        return home

    def _reset_mode(self) -> str:
        mode = self.rcfg.reset
        can_scene = callable(getattr(self.robot, "reset_scene", None))
        if mode == "auto":
            return "scene" if can_scene else "human"
        if mode == "scene" and not can_scene:
            raise ValueError(f"env.robot.reset=scene: {self.robot.name} cannot reset its scene (use human)")
        return mode

    def _success_rule(self, first: RobotState, critic) -> Callable | CriticSuccess | None:
        mode = self.rcfg.success
        if mode == "lifted":
            if "lifted" not in first.extra:
                raise ValueError(
                    f"env.robot.success=lifted: {self.robot.name} reports no 'lifted' reading (only the "
                    "sim-backed robot does); use success=operator or success=critic"
                )
            return lambda obs: float(np.asarray(self._state.extra["lifted"]).reshape(-1)[0]) > 0.5
        if mode == "critic":
            if critic is None:
                raise ValueError("env.robot.success=critic needs a critic (env.robot.success_critic)")
            obs_keys = [keys.STATE] + [keys.image_key(c) for c in self.cameras]
            obs_keys += [keys.ENV_STATE] if "environment_state" in first.extra else []
            return CriticSuccess(critic, self.rcfg.success_threshold, self.task, obs_keys)
        return None

    # -- gym API -------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Home motion, then the scene reset; returns ``(obs, info)`` (``info["home_steps"]``: commands the
        home motion sent).

        Raises:
            HardwareError: the previous episode ended on a hardware error (the same class, naming the
                robot), or one happens now; RobotFault: the home posture was not reached in time.
        """
        super().reset(seed=seed)
        if self._fault is not None:
            err = self._fault
            raise type(err)(
                f"{self.robot.name}: stopped after a hardware error in the last episode ({err}); that "
                "episode was kept up to the error. Check the robot and its link, then rerun"
            ) from err
        home_steps = self._guard(self._home_motion)
        if self.reset_mode == "scene":
            self._guard(lambda: self.robot.reset_scene(seed))
        elif self.reset_mode == "human":
            self._wait_for_human(
                f"{self.robot.name}: reset the scene (episode seed {seed}), then press Enter to start... "
            )
        self.rate.restart()
        obs = self._guard(lambda: self._observe(frames_after=time.monotonic()))
        self._steps = self._held = 0
        if isinstance(self._success, CriticSuccess):
            self._success.reset(obs)
        return obs, {"is_success": False, "home_steps": home_steps}

    def _guard(self, fn: Callable):
        """Run ``fn``; a hardware error marks the env faulted (hold if possible) and is re-raised."""
        try:
            return fn()
        except HardwareError as err:
            self._stop(err)
            raise

    def check_action(self, action: np.ndarray) -> np.ndarray:
        """The simulated task's :func:`~robot_rl.sim.panda_pick_cube.check_action` against this env's
        action space; float64 (4,) for ``ee_delta``, (n + 1,) for ``joint_position`` (one less each
        without a gripper).

        Raises:
            ValueError: wrong shape, NaN/inf, or an entry outside the action bounds by more than 1e-6.
        """
        if self.action_mode == CommandMode.EE_DELTA:
            return check_action(action, self.action_space)
        return check_action(action, self.action_space, "joint targets in rad; gripper in [0, 1]")

    def step(self, action: np.ndarray):
        """Send one action, wait for the next deadline, observe; returns the gymnasium 5-tuple.

        Raises:
            ValueError: a bad action (nothing is sent).
            HardwareError: stepping an env whose last episode ended on a hardware error (reset first).
        """
        a = self.check_action(action)
        if self._fault is not None or self._last_obs is None:
            raise HardwareError(f"{self.robot.name}: step() before reset() (or after a hardware error)")
        n = a.size - 1 if self.gripper else a.size
        grip = float(np.clip(a[n], 0.0, 1.0)) if self.gripper else None
        value = a[:3].copy() if self.action_mode == CommandMode.EE_DELTA else a[:n].copy()
        cmd = Command(self.action_mode, value, grip, time.monotonic())
        try:
            t0 = time.monotonic()
            self.robot.command(cmd)
            t1 = time.monotonic()
            self.rate.wait()
            t2 = time.monotonic()
            obs = self._observe()
            self.rate.record_latency((t1 - t0) + (time.monotonic() - t2))
        except HardwareError as err:
            self._stop(err)
            info = {
                "is_success": False,
                "robot_error": str(self._fault),
                "truncated_reason": "robot_error",
                "control": self.rate.stats(),
            }
            return self._last_obs, 0.0, False, True, info
        self._steps += 1
        hit = self._success(obs) if self._success is not None else False
        self._held = self._held + 1 if hit else 0
        success = self._held >= self.cfg.success_hold_steps
        truncated = not success and self._steps >= self.cfg.max_episode_steps
        info: dict[str, Any] = {"is_success": bool(success)}
        if success or truncated:
            info["control"] = self.rate.stats()
        return obs, 1.0 if success else 0.0, bool(success), bool(truncated), info

    def control_stats(self) -> dict[str, float]:
        """The control loop's figures since the last reset (:meth:`RateLoop.stats`)."""
        return self.rate.stats()

    def render(self) -> np.ndarray | None:
        """``rgb_array``: the first camera's last observed frame (uint8 (S, S, 3)); else ``None``."""
        if self.render_mode != "rgb_array" or not self.cameras or self._last_obs is None:
            return None
        return self._last_obs[keys.image_key(next(iter(self.cameras)))]

    def close(self) -> None:
        """Hold, then disconnect the robot and the cameras (safe to call twice)."""
        if self.robot.is_connected:
            try:
                if self._fault is None:
                    self.robot.hold()
            except HardwareError as err:
                log.warning("%s: hold at close failed: %s", self.robot.name, err)
            self.robot.disconnect()
        for cam in self.cameras.values():
            cam.disconnect()

    # -- internals -----------------------------------------------------------------------------------
    def _stop(self, err: HardwareError) -> None:
        """Safe stop after a hardware error: hold if the robot still answers; later resets raise."""
        msg = f"robot {self.robot.name}: {type(err).__name__}: {err}"
        log.error("%s; holding and ending the episode", msg)
        self._fault = type(err)(msg)
        try:
            self.robot.hold()
        except HardwareError as again:
            log.error("robot %s: hold failed too: %s", self.robot.name, again)

    def _observe(self, frames_after: float = -np.inf) -> dict[str, np.ndarray]:
        """The observation now; every camera frame captured at or after ``frames_after`` (monotonic s; the
        reset passes the time the scene was ready, so no camera shows the previous scene)."""
        state = self.robot.read()
        self._state = state
        obs = {keys.STATE: self._state_vector(state)}
        if self._has_env_state:
            obs[keys.ENV_STATE] = np.asarray(state.extra["environment_state"], dtype=np.float32)
        for name, cam in self.cameras.items():
            frame = cam.read(CAMERA_TIMEOUT_S)
            while frame.timestamp < frames_after:
                frame = cam.read(CAMERA_TIMEOUT_S)
            obs[keys.image_key(name)] = resize_image(frame.image, self.image_size)
        self._last_obs = obs
        return obs

    def _home_motion(self) -> int:
        """Joint-position moves to :attr:`home`, at most ``home_speed`` rad/s (and the robot's joint speed
        limits) per joint, gripper open, one command per control period. Returns the commands sent.

        A move the safety layer refuses for now (the arm still too fast to switch to joint control safely)
        makes the robot hold for a period and is retried. When the joint-space path is blocked (no joint
        nearer home for :data:`HOME_STALL_PERIODS` periods: the safety layer shortens every step because the
        straight joint path leaves the workspace box, e.g. from a far corner of it), a robot with a kinematic
        model and ``ee_delta`` commands first moves its end effector to the home posture's position inside
        the box (:meth:`_approach_home_position`), then the joint moves resume.

        Raises:
            RobotFault: the measured posture is not within ``home_tolerance`` rad after ``home_timeout_s``.
            CommandRejected: the safety layer's e-stop is latched.
        """
        limits, hz = self.robot.limits, self.cfg.control_hz
        step = np.minimum(self.rcfg.home_speed, limits.joint_vel_max) / hz
        target, tol = self.home, self.rcfg.home_tolerance
        cmd = np.asarray(self.robot.read().joint_pos, dtype=np.float64)
        budget = max(1, int(np.ceil(self.rcfg.home_timeout_s * hz)))
        best, stalled, approached = np.inf, 0, False
        self.rate.restart()
        sent = 0
        while sent < budget:
            q = np.asarray(self.robot.read().joint_pos, dtype=np.float64)
            err = float(np.max(np.abs(target - q)))
            if err <= tol:
                return sent
            best, stalled = (err, 0) if err < best - HOME_PROGRESS_RAD else (best, stalled + 1)
            if stalled >= HOME_STALL_PERIODS and not approached and self._can_approach_home():
                approached = True
                sent += self._approach_home_position(budget - sent)
                cmd = np.asarray(self.robot.read().joint_pos, dtype=np.float64)
                best, stalled = np.inf, 0
                continue
            nxt = cmd + np.clip(target - cmd, -step, step)
            if self._command_or_hold(Command(CommandMode.JOINT_POSITION, nxt, self._open, time.monotonic())):
                cmd = nxt
            else:  # start again from where the arm is
                cmd = np.asarray(self.robot.read().joint_pos, dtype=np.float64)
            sent += 1
            self.rate.wait()
        worst = int(np.argmax(np.abs(target - q)))
        raise RobotFault(
            f"{self.robot.name}: home motion did not reach env.robot.home_joints within "
            f"{tol:g} rad in {self.rcfg.home_timeout_s:g} s (joint {limits.joint_names[worst]} is "
            f"{q[worst]:.3f} rad, home {target[worst]:.3f} rad)"
        )

    def _command_or_hold(self, cmd: Command) -> bool:
        """Send a home-motion command; a move the safety layer refuses for now (the arm still too fast to
        switch modes safely) makes the robot hold for this period instead. Returns whether ``cmd`` was sent.

        Raises:
            CommandRejected: the safety layer's e-stop is latched.
        """
        try:
            self.robot.command(cmd)
            return True
        except CommandRejected:
            if getattr(self.robot, "estopped", False):
                raise
            self.robot.hold()  # let the arm slow down
            return False

    @property
    def _open(self) -> float | None:
        """The home motion's gripper target: open (0.0), or none without a gripper."""
        return 0.0 if self.gripper else None

    def _can_approach_home(self) -> bool:
        """The robot takes ``ee_delta`` and has a kinematic model (the home posture's position is known)."""
        if CommandMode.EE_DELTA not in self.robot.modes:
            return False
        return self.robot.forward_kinematics(self.home) is not None

    def _approach_home_position(self, budget: int) -> int:
        """``ee_delta`` steps (at most ``ee_step_max`` m each, one per control period, inside the box as the
        safety layer keeps every ``ee_delta`` target) towards the end-effector position of the home posture,
        until within :data:`HOME_APPROACH_TOL_M` or ``budget`` commands. Returns the commands sent."""
        goal = np.asarray(self.robot.forward_kinematics(self.home), dtype=np.float64)
        max_step = self.robot.limits.ee_step_max
        for sent in range(budget):
            delta = goal - np.asarray(self.robot.read().ee_pos, dtype=np.float64)
            if np.linalg.norm(delta) <= HOME_APPROACH_TOL_M:
                return sent
            step = np.clip(delta, -max_step, max_step)
            self._command_or_hold(Command(CommandMode.EE_DELTA, step, self._open, time.monotonic()))
            self.rate.wait()
        return budget

    @classmethod
    def from_config(cls, cfg: EnvConfig, render_mode: str | None = None) -> RobotEnv:
        """The env of ``cfg.robot``: its driver behind the safety layer (``env.robot.safety``), its cameras
        (:mod:`robot_rl.hardware.factory`) and, for
        ``success=critic``, the critic at ``success_critic``. Raises what the drivers and ``__init__``
        raise."""
        critic = None
        if cfg.robot.success == "critic":
            from robot_rl.rewards.registry import load_critic  # torch: loaded only for a critic

            critic = load_critic(cfg.robot.success_critic)
        robot = SafeRobot.from_config(cfg.robot, cfg.control_hz)  # every command passes the safety layer
        cameras = {name: cam for name, cam in make_cameras(cfg.robot).items() if name in cfg.cameras}
        return cls(robot, cameras, cfg, critic=critic, render_mode=render_mode)
