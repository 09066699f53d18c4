"""``MujocoRobot``: the simulated Panda of ``robot_rl/PandaPickCube-v0`` behind the :class:`Robot`
interface, in process. The MuJoCo-backed robot server runs one of these in real time in its own process;
tests and the safety layer's adversarial test drive it directly in lock-step.

Joints: the 7 Panda arm joints (rad). Modes: ``ee_delta`` (3,) m, the simulated task's ``[dx, dy, dz]``
(the target is kept in the task's workspace box and within ``MAX_LAG_M`` of the pinch site, as in the
env), and ``joint_position`` (7,) rad (clipped to the joint limits less 0.05 rad). The gripper is the
Robotiq 2F-85 (0 open, 1 closed). ``extra`` holds ``environment_state`` (7,): the cube position (m) and
quaternion (w, x, y, z), what a motion-capture system would give on hardware, and ``lifted`` (1,): 1.0
while the cube is more than the task's lift height above its rest height.
"""

from __future__ import annotations

import time

import mujoco
import numpy as np

from robot_rl.config import RobotConfig
from robot_rl.hardware.errors import RobotConnectionError
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState, check_command

JOINT_VEL_MAX = np.array([2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61])
"""Franka Panda joint speed limits (rad/s), from Franka's datasheet."""
JOINT_ACC_MAX = np.array([15.0, 7.5, 10.0, 12.5, 15.0, 20.0, 20.0])
"""Franka Panda joint acceleration limits (rad/s²), from Franka's datasheet."""


class PinchKinematics:
    """Forward kinematics of the pick-cube scene's Panda: the ``pinch`` site's position at given arm joint
    positions, by ``mj_kinematics`` on a scratch ``MjData`` of ``model`` (the other joints at ``qpos0``;
    the pinch site hangs off the hand, so neither the gripper nor the cube moves it). Shared by
    :class:`MujocoRobot` and the robot server's client, which rebuilds it from its own copy of the scene.

    Args:
        model: a model of the scene (:func:`robot_rl.sim.assets.load_model`); never modified.

    Raises:
        KeyError: ``model`` has no ``joint1``..``joint7`` or ``pinch`` site (from MuJoCo).
    """

    def __init__(self, model: mujoco.MjModel) -> None:
        from robot_rl.sim.controller import ARM_JOINTS

        self.model = model
        self._data = mujoco.MjData(model)
        self._qpos_adr = np.array([model.joint(j).qposadr[0] for j in ARM_JOINTS])
        self._site = model.site("pinch").id

    def __call__(self, joint_pos: np.ndarray) -> np.ndarray:
        """Pinch-site position (3,) float64 m (world = robot base frame) at ``joint_pos`` (7,) rad.

        Raises:
            ValueError: ``joint_pos`` is not 7 values (from numpy).
        """
        d = self._data
        d.qpos[self._qpos_adr] = joint_pos
        mujoco.mj_kinematics(self.model, d)
        return d.site_xpos[self._site].copy()

    def samples(self, low: np.ndarray, high: np.ndarray) -> dict[str, np.ndarray]:
        """Reference poses for checking that two copies of the scene agree: ``joint_pos`` (5, 7) rad (the
        limits ``low``/``high``, their middle and two mixes) and the pinch ``ee_pos`` (5, 3) m at each."""
        mid = 0.5 * (low + high)
        alt = np.where(np.arange(low.size) % 2 == 0, low, high)
        joint_pos = np.stack([low, high, mid, alt, low + high - alt])
        return {"joint_pos": joint_pos, "ee_pos": np.stack([self(q) for q in joint_pos])}


class MujocoRobot(Robot):
    """The simulated Panda pick-cube scene as a :class:`Robot`.

    Args:
        control_hz: the rate commands are expected at (Hz); one lock-step command advances 1/control_hz s.
        physics_hz: MuJoCo rate (Hz), a whole multiple of ``control_hz``.
        lockstep: ``True``: each :meth:`command` advances the physics by one control period (tests, fast
            and deterministic). ``False``: physics only moves in :meth:`advance`, which the robot server
            calls from its real-time loop.
        lift_height_m: cube lift (m) that sets ``extra["lifted"]``.
        seed: seed of the cube placement in :meth:`reset_scene`.

    Raises:
        ValueError: bad rates (from the task env).
    """

    name = "sim_panda"
    simulated = True
    modes = (CommandMode.EE_DELTA, CommandMode.JOINT_POSITION)

    def __init__(
        self,
        control_hz: float = 10.0,
        physics_hz: float = 500.0,
        lockstep: bool = True,
        lift_height_m: float = 0.1,
        seed: int | None = None,
    ) -> None:
        from robot_rl.sim import panda_pick_cube as task

        self._task = task
        self.env = task.PandaPickCubeEnv(
            control_hz=control_hz, physics_hz=physics_hz, lift_height_m=lift_height_m
        )
        self.lockstep = lockstep
        self.lift_height_m = lift_height_m
        self._connected = False
        self._seed = seed
        self._gripper = 0.0
        self.kinematics = PinchKinematics(self.env.model)
        ctrl = self.env.controller
        self._limits = RobotLimits(
            joint_low=ctrl.q_low.copy(),
            joint_high=ctrl.q_high.copy(),
            joint_vel_max=JOINT_VEL_MAX.copy(),
            joint_acc_max=JOINT_ACC_MAX.copy(),
            ee_low=task.WORKSPACE_LOW.astype(np.float64),
            ee_high=task.WORKSPACE_HIGH.astype(np.float64),
            ee_step_max=task.MAX_DELTA_M,
            control_hz=float(control_hz),
            joint_names=tuple(f"joint{i}" for i in range(1, 8)),
        )

    @classmethod
    def from_config(cls, cfg: RobotConfig, control_hz: float = 10.0) -> MujocoRobot:
        """The in-process sim robot for ``env.robot.driver: sim`` (lock-step; seeded per episode by
        :meth:`reset_scene`)."""
        return cls(control_hz=control_hz)

    @property
    def limits(self) -> RobotLimits:
        return self._limits

    @property
    def is_connected(self) -> bool:
        return self._connected

    def connect(self) -> None:
        """Reset the scene (home posture, cube placed) and mark the robot connected."""
        if not self._connected:
            self.reset_scene(self._seed)
            self._connected = True

    def disconnect(self) -> None:
        self._connected = False

    def reset_scene(self, seed: int | None = None) -> None:
        """Home the arm, open the gripper and place the cube at a seeded random spot (the human's reset on
        hardware)."""
        self.env.reset(seed=seed)
        self._gripper = 0.0

    def _require(self) -> None:
        if not self._connected:
            raise RobotConnectionError(f"{self.name}: not connected (call connect() first)")

    def read(self) -> RobotState:
        """The scene's current :class:`RobotState` (timestamp: wall-clock monotonic time of the read)."""
        self._require()
        env, d = self.env, self.env.data
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, d.site_xmat[env._pinch])
        cube = d.qpos[env._cube_qpos : env._cube_qpos + 7].copy()
        lifted = float(d.xpos[env._cube_body][2] - env._cube_rest_z > self.lift_height_m)
        return RobotState(
            joint_pos=d.qpos[env._arm_q].copy(),
            joint_vel=d.qvel[env._arm_v].copy(),
            ee_pos=d.site_xpos[env._pinch].copy(),
            ee_quat=quat,
            gripper=float(d.qpos[env._driver_qpos] / 0.8),
            timestamp=time.monotonic(),
            extra={"environment_state": cube, "lifted": np.array([lifted])},
        )

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray:
        """Pinch-site position (3,) m at arm joint positions ``joint_pos`` (7,) rad (MuJoCo kinematics on a
        scratch ``MjData``; the scene itself is untouched; :class:`PinchKinematics`)."""
        return self.kinematics(joint_pos)

    def command(self, cmd: Command) -> None:
        """Set the controller's target from ``cmd``; in lock-step also advance one control period.

        Raises:
            RobotConnectionError: not connected.
            CommandRejected: unsupported mode, wrong shape, non-finite value, gripper outside [0, 1].
        """
        self._require()
        value = check_command(cmd, self.modes, 7, self.name)
        env, d, task = self.env, self.env.data, self._task
        if cmd.mode == CommandMode.EE_DELTA:
            pinch = d.site_xpos[env._pinch]
            target = np.clip(env._target + value[:3], task.WORKSPACE_LOW, task.WORKSPACE_HIGH)
            env._target = np.clip(target, pinch - task.MAX_LAG_M, pinch + task.MAX_LAG_M)
            env.controller.set_target(d, env._target)
        else:
            ctrl = env.controller
            ctrl.q_des = np.clip(value, ctrl.q_low, ctrl.q_high)
            env._target = self.forward_kinematics(ctrl.q_des)  # the next ee_delta moves from here
        if cmd.gripper is not None:
            self._gripper = float(cmd.gripper)
        d.ctrl[env._grip_act] = 255.0 * self._gripper
        if self.lockstep:
            self.advance(1.0 / self._limits.control_hz)

    def advance(self, seconds: float) -> None:
        """Step the physics by ``seconds`` (rounded to whole physics steps), the controller applying torques
        every physics step."""
        env = self.env
        n = max(1, int(round(seconds * env.physics_hz)))
        for _ in range(n):
            env.controller.apply(env.data)
            mujoco.mj_step(env.model, env.data)
