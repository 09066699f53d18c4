"""``MujocoRobot``: the simulated Panda of ``robot_rl/PandaPickCube-v0`` behind the :class:`Robot`
interface, in process. The MuJoCo-backed robot server runs one of these in real time in its own process;
tests and the safety layer's adversarial test drive it directly in lock-step.

Joints: the 7 Panda arm joints (rad). Modes: ``ee_delta`` (3,) m, the simulated task's ``[dx, dy, dz]``
(the target is kept in the task's workspace box and within ``MAX_LAG_M`` of the pinch site, as in the
env), and ``joint_position`` (7,) rad (clipped to the joint limits less 0.05 rad). After a joint command the
Cartesian controller holds the orientation of the joint target, as a real arm's controller does with a
translation-only delta, instead of turning the gripper back to pointing down (the scene reset restores
pointing down); and an ``ee_delta`` whose IK solution would take the pinch further from the target than it
is (the IK stuck at a joint limit) leaves the joint targets where they were, as a Cartesian servo halts.
The gripper is the Robotiq 2F-85 (0 open, 1 closed). ``extra`` holds ``environment_state`` (7,): the cube
position (m) and quaternion (w, x, y, z), what a motion-capture system would give on hardware, and
``lifted`` (1,): 1.0 while the cube is more than the task's lift height above its rest height.
"""

from __future__ import annotations

import copy
import time

import mujoco
import numpy as np

from robot_rl.config import RobotConfig
from robot_rl.hardware.errors import RobotConnectionError
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState, check_command
from robot_rl.hardware.tcp_boundary import BoundaryBrake, TcpBoundary
from robot_rl.sim import panda_pick_cube
from robot_rl.sim.controller import ARM_JOINTS

JOINT_VEL_MAX = np.array([2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61])
"""Franka Panda joint speed limits (rad/s), from Franka's datasheet."""
JOINT_ACC_MAX = np.array([15.0, 7.5, 10.0, 12.5, 15.0, 20.0, 20.0])
"""Franka Panda joint acceleration limits (rad/s²), from Franka's datasheet."""


def tracking_time_s(kp: np.ndarray, kd: np.ndarray) -> float:
    """The slowest time constant ``KD / KP`` (s) of a joint PD with gains ``kp`` (N m/rad) and ``kd``
    (N m s/rad), (7,) each: the time it takes to close a tracking error."""
    return float(np.max(kd / kp))


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

    def orientation(self, joint_pos: np.ndarray) -> np.ndarray:
        """Pinch-site orientation (4,) float64 unit quaternion (w, x, y, z), world frame, at ``joint_pos``
        (7,) rad."""
        self(joint_pos)
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, self._data.site_xmat[self._site])
        return quat

    def samples(self, low: np.ndarray, high: np.ndarray) -> dict[str, np.ndarray]:
        """Reference poses for checking that two copies of the scene agree: ``joint_pos`` (5, 7) rad (the
        limits ``low``/``high``, their middle and two mixes) and the pinch ``ee_pos`` (5, 3) m at each."""
        mid = 0.5 * (low + high)
        alt = np.where(np.arange(low.size) % 2 == 0, low, high)
        joint_pos = np.stack([low, high, mid, alt, low + high - alt])
        return {"joint_pos": joint_pos, "ee_pos": np.stack([self(q) for q in joint_pos])}


IK_TOLERANCE_M = 1e-3
"""An ``ee_delta`` whose IK solution puts the pinch further from the target on some axis than the arm is
now, by more than this (m), is not executed: the arm holds (the IK is stuck at a joint limit)."""
LINK_MARGIN_M = 0.02
"""Distance (m) up to which :class:`LinkCollisions` measures the gap between links (MuJoCo's contact
margin); farther apart counts as this far."""


class LinkCollisions:
    """The arm's MuJoCo collision model: the smallest gap between an arm link and the table or another
    link at given arm joint positions, by ``mj_kinematics`` + ``mj_collision`` on a private copy of
    ``model`` whose contact filter keeps only those pairs. The gripper counts as one rigid link, and its
    fingers may touch the table and the cube (that is grasping, not a collision; the cube is left out);
    MuJoCo already skips a link and its parent. The gripper is at ``qpos0`` (open).

    Args:
        model: a model of the scene (:func:`robot_rl.sim.assets.load_model`); copied, never modified.

    Raises:
        KeyError: ``model`` has no ``link0``, ``link1``, ``base_mount`` body or ``joint1``..``joint7``.
    """

    # contype / conaffinity bits: two geoms collide when one's type meets the other's affinity
    _ARM, _GRIPPER, _LINK0, _LINK1, _TABLE, _FINGERS = 1, 2, 4, 8, 16, 32

    def __init__(self, model: mujoco.MjModel) -> None:
        m = self.model = copy.deepcopy(model)
        self._data = mujoco.MjData(m)
        self._qpos_adr = np.array([m.joint(j).qposadr[0] for j in ARM_JOINTS])
        gripper, hand = m.body("base_mount").id, m.body("base").id
        link0, link1 = m.body("link0").id, m.body("link1").id
        arm_bodies = {m.body(f"link{i}").id for i in range(2, 8)}
        a, g, l0, l1, t, f = self._ARM, self._GRIPPER, self._LINK0, self._LINK1, self._TABLE, self._FINGERS
        for geom in range(m.ngeom):
            body = int(m.geom_bodyid[geom])
            if not (m.geom_contype[geom] or m.geom_conaffinity[geom]):
                continue
            if body == 0:  # the table (floor); link0 is welded to it, so MuJoCo skips that pair
                kind = (t, a | g | l1)
            elif body == link0:  # not link1, its child (MuJoCo filters no child of a world-welded body)
                kind = (l0, a | g | f)
            elif body == link1:
                kind = (l1, a | g | f | t)
            elif body in arm_bodies:
                kind = (a, a | g | f | l0 | l1 | t)
            elif body != hand and self._descends(body, hand):  # the fingers
                kind = (f, a | l0 | l1)
            elif self._descends(body, gripper):
                kind = (g, a | l0 | l1 | t)
            else:  # the cube
                kind = (0, 0)
            m.geom_contype[geom], m.geom_conaffinity[geom] = kind
            m.geom_margin[geom] = LINK_MARGIN_M

    def _descends(self, body: int, root: int) -> bool:
        while body not in (0, root):
            body = int(self.model.body_parentid[body])
        return body == root

    def __call__(self, joint_pos: np.ndarray) -> float:
        """The smallest gap (m) between an arm link and the table or another link at ``joint_pos`` (7,)
        rad: negative when they overlap, :data:`LINK_MARGIN_M` when none is closer than that."""
        d = self._data
        d.qpos[self._qpos_adr] = joint_pos
        mujoco.mj_kinematics(self.model, d)
        mujoco.mj_collision(self.model, d)
        if d.ncon == 0:
            return LINK_MARGIN_M
        return min(LINK_MARGIN_M, float(d.contact.dist[: d.ncon].min()))

    def pairs(self, joint_pos: np.ndarray, gap_m: float = 0.0) -> list[tuple[str, str]]:
        """The (body, body) names of link pairs closer than ``gap_m`` (m) at ``joint_pos`` (7,) rad, each
        once (``world`` is the table)."""
        self(joint_pos)
        m, d = self.model, self._data
        found = {
            tuple(sorted((m.body(m.geom_bodyid[c.geom[0]]).name, m.body(m.geom_bodyid[c.geom[1]]).name)))
            for c in d.contact[: d.ncon]
            if c.dist < gap_m
        }
        return sorted(found)


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
        task = self._task = panda_pick_cube
        self.env = task.PandaPickCubeEnv(
            control_hz=control_hz, physics_hz=physics_hz, lift_height_m=lift_height_m
        )
        self.lockstep = lockstep
        self.lift_height_m = lift_height_m
        self._connected = False
        self._seed = seed
        self._gripper = 0.0
        self.kinematics = PinchKinematics(self.env.model)
        self.collisions = LinkCollisions(self.env.model)
        self.brake = BoundaryBrake(self)  # the controller-side TCP boundary, off until set_tcp_boundary
        self._down_quat = self.env.controller.target_quat.copy()
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
        self.env.controller.target_quat = self._down_quat.copy()
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

    def link_clearance(self, joint_pos: np.ndarray) -> float | None:
        """The smallest gap (m) between an arm link and the table or another link at ``joint_pos`` (7,) rad
        (:class:`LinkCollisions`; negative: they overlap; at most :data:`LINK_MARGIN_M`)."""
        return self.collisions(joint_pos)

    def set_tcp_boundary(self, low: np.ndarray | None, high: np.ndarray | None) -> bool:
        """Enforce the TCP box ``low`` .. ``high`` ((3,) m each, base frame) in the physics itself, every
        physics step, as an arm's controller enforces its safety boundary
        (:mod:`robot_rl.hardware.tcp_boundary`); ``None, None`` clears it. The safety layer sets it at
        connect. Returns whether a boundary is now enforced.

        Raises:
            ValueError: only one of ``low``/``high`` given, or not a valid box (names the values).
        """
        if (low is None) != (high is None):
            raise ValueError("set_tcp_boundary: give both low and high, or neither (to clear the boundary)")
        self.brake.box = None if low is None else TcpBoundary(low, high)
        return self.brake.box is not None

    @property
    def tracking_time_s(self) -> float:
        """How long (s) the joint PD takes to close a tracking error: its slowest ``KD / KP``."""
        return tracking_time_s(self.env.controller.kp, self.env.controller.kd)

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
            step = self.brake.clip_ee_delta(value[:3])  # the target stays in the TCP boundary
            target = np.clip(env._target + step, task.WORKSPACE_LOW, task.WORKSPACE_HIGH)
            env._target = np.clip(target, pinch - task.MAX_LAG_M, pinch + task.MAX_LAG_M)
            ctrl, prev = env.controller, env.controller.q_des
            ctrl.set_target(d, env._target)
            miss = np.abs(self.forward_kinematics(ctrl.q_des) - env._target)
            if np.any(miss > np.maximum(np.abs(env._target - pinch), IK_TOLERANCE_M)):
                ctrl.q_des = prev  # the IK leads away from the target (stuck at a joint limit): hold
        else:
            ctrl = env.controller
            ctrl.q_des = np.clip(value, ctrl.q_low, ctrl.q_high)
            env._target = self.forward_kinematics(ctrl.q_des)  # the next ee_delta moves from here
            ctrl.target_quat = self.kinematics.orientation(ctrl.q_des)  # and holds this orientation
        if cmd.gripper is not None:
            self._gripper = float(cmd.gripper)
        d.ctrl[env._grip_act] = 255.0 * self._gripper
        if self.lockstep:
            self.advance(1.0 / self._limits.control_hz)

    def halt(self) -> None:
        """Stop where the arm is now, as MoveIt Servo halts on a stale command (it sends the measured joint
        positions): the joint targets become the measured joint positions (the PD then only brakes,
        ``-KD dq``, and pulls back by the overshoot) and the Cartesian target the measured pinch, so the
        next ``ee_delta`` moves from here.

        Raises:
            RobotConnectionError: not connected.
        """
        self._require()
        env, d = self.env, self.env.data
        env.controller.q_des = d.qpos[env._arm_q].copy()
        env._target = d.site_xpos[env._pinch].copy()

    def advance(self, seconds: float) -> None:
        """Step the physics by ``seconds`` (rounded to whole physics steps), the TCP boundary and the
        controller's torques every physics step."""
        env = self.env
        n = max(1, int(round(seconds * env.physics_hz)))
        for _ in range(n):
            self.brake.before_step()
            env.controller.apply(env.data)
            mujoco.mj_step(env.model, env.data)
