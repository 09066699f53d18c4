"""The shared Panda scene of the built-in tasks: :class:`PandaTaskEnv`, the base class of
``robot_rl/PandaPickCube-v0`` and the task suite (:mod:`robot_rl.sim.tasks`).

Every task has the same robot, controller, action and ``observation.state``; a task adds its objects
(primitive MJCF bodies), places them at reset, reports their poses as ``observation.environment_state``,
states its instruction (``task``, possibly chosen per episode) and defines its goal.

Action, float32 (4,): ``[dx, dy, dz, grip]``. ``dx, dy, dz`` in [-0.03, 0.03] m move the end-effector
(pinch site) position target per control step; the target is clipped to :data:`WORKSPACE_LOW` /
:data:`WORKSPACE_HIGH` and to within :data:`MAX_LAG_M` of the current pinch position (anti wind-up).
``grip`` in [0, 1] is the gripper command (0 open, 1 closed). A differential-IK + joint-PD + gravity
compensation controller (:mod:`robot_rl.sim.controller`) tracks the target with the gripper pointing down.
Out-of-bounds or non-finite actions raise ``ValueError``; nothing is silently clipped.

Observation (gymnasium ``Dict``):

- ``observation.state`` float32 (22,): ``[0:7]`` arm joint positions (rad), ``[7:14]`` arm joint
  velocities (rad/s), ``[14:17]`` pinch-site position (m, world), ``[17:21]`` pinch-site orientation
  quaternion (w, x, y, z), ``[21]`` gripper closure (driver joint / 0.8 rad: 0 open, 1 closed).
- ``observation.environment_state`` float32 (``env_state_dim``,): the task's object poses (the task says).
- ``observation.images.<cam>`` uint8 (image_size, image_size, 3) for each camera in ``cameras``
  (``front``: fixed scene camera, ``wrist``: gym-hil's ``handcam_rgb``).

Success: the task's goal (:meth:`PandaTaskEnv._goal_reached`) holds for ``success_hold_steps``
consecutive control steps; the episode then terminates. Sparse reward: 1.0 on that step, else 0.0.
It is truncated after ``max_episode_steps`` (or at once, with ``info["sim_unstable"] = True``, if MuJoCo
reports a diverged simulation). ``info["is_success"]`` is present on every step; the reset info also
holds ``task``, the episode's instruction.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces

from robot_rl import keys
from robot_rl.config import RandomizeConfig
from robot_rl.sim.assets import load_model
from robot_rl.sim.controller import DiffIKController
from robot_rl.sim.randomize import Randomizer
from robot_rl.sim.render import OffscreenRenderer, RendererError

MAX_DELTA_M = 0.03
"""Largest end-effector target move per control step (m)."""
WORKSPACE_LOW = np.array([0.25, -0.30, 0.005])
WORKSPACE_HIGH = np.array([0.70, 0.30, 0.45])
"""Box (m, world) the end-effector target is kept in."""
MAX_LAG_M = 0.06
"""Largest distance (m) the target may lead the measured pinch position, per axis."""
HOME_PINCH_POS = np.array([0.45, 0.0, 0.25])
DOWN_QUAT = np.array([0.0, 1.0, 0.0, 0.0])
RENDER_SIZE = 128
"""Side (pixels) of :meth:`PandaTaskEnv.render` frames."""
CAMERAS = {"front": "front", "wrist": "handcam_rgb"}
STATE_DIM = 22
ARM_GUESS = np.array([0.0, -0.25, 0.0, -2.44, 0.0, 2.19, 0.785])
"""Arm posture (rad) the home IK starts from."""
OPEN_CLOSURE = 0.3
"""Gripper closure below which the fingers count as open (released); 0.59 is closed on a cube."""


def check_action(
    action: np.ndarray,
    space: spaces.Box,
    units: str = "dx, dy, dz in metres per step; gripper in [0, 1]",
) -> np.ndarray:
    """Validate an action against the Box ``space`` (the task's ``[dx, dy, dz, grip]``: (4,)); return it as
    float64 of ``space.shape``. Shared by the simulated tasks and
    :class:`robot_rl.hardware.robot_env.RobotEnv`, so a robot refuses exactly what the simulator refuses;
    nothing is silently clipped. ``units`` describes the entries in the out-of-bounds message.

    Raises:
        ValueError: wrong shape, NaN/inf, or an entry outside the action bounds by more than 1e-6.
    """
    a = np.asarray(action, dtype=np.float64)
    if a.shape != space.shape:
        raise ValueError(f"action must have shape {space.shape}, got {a.shape}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"action contains NaN or inf: {a.tolist()}")
    low, high = space.low, space.high
    bad = np.flatnonzero((a < low - 1e-6) | (a > high + 1e-6))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"action[{i}] = {a[i]:.6g} is outside its bounds [{low[i]:.6g}, {high[i]:.6g}] ({units})"
        )
    return a


def check_spawn_region(region) -> tuple[tuple[float, float], tuple[float, float]]:
    """``(x_lo, x_hi, y_lo, y_hi)`` (m, world) -> ``((x_lo, x_hi), (y_lo, y_hi))``.

    Raises:
        ValueError: not 4 finite numbers, a low above its high, or outside the workspace's xy
            (:data:`WORKSPACE_LOW`, :data:`WORKSPACE_HIGH`); names ``env.spawn_region``.
    """
    r = np.asarray(region, dtype=np.float64).reshape(-1)
    lo, hi = WORKSPACE_LOW[:2], WORKSPACE_HIGH[:2]
    if r.size != 4 or not np.isfinite(r).all() or r[0] > r[1] or r[2] > r[3]:
        raise ValueError(f"env.spawn_region={list(region)}: must be [x_lo, x_hi, y_lo, y_hi] (m), lo <= hi")
    if r[0] < lo[0] or r[1] > hi[0] or r[2] < lo[1] or r[3] > hi[1]:
        raise ValueError(
            f"env.spawn_region={r.tolist()}: must lie in the workspace x [{lo[0]}, {hi[0]}], "
            f"y [{lo[1]}, {hi[1]}] (m)"
        )
    return (float(r[0]), float(r[1])), (float(r[2]), float(r[3]))


class PandaTaskEnv(gym.Env):
    """A Panda task on the shared scene; see the module docstring for spaces, reward and termination.

    Subclasses set :attr:`objects` (MJCF ``<worldbody>`` elements), :attr:`env_state_dim` and
    :attr:`instruction`, and implement :meth:`_setup_objects`, :meth:`_place_objects`,
    :meth:`_env_state` and :meth:`_goal_reached`.

    Args:
        control_hz: policy rate (Hz).
        physics_hz: MuJoCo rate (Hz); must be a whole multiple of ``control_hz``.
        max_episode_steps: truncation horizon in control steps.
        success_hold_steps: consecutive control steps the goal must hold for success.
        lift_height_m: lift above an object's rest height that counts (m; tasks that lift).
        cameras: any of ``"front"``, ``"wrist"``.
        image_size: camera image side (pixels).
        render_mode: ``None`` or ``"rgb_array"``.
        torque_every: physics steps per controller torque update (1 = every physics step; ``numpy``
            controller only).
        controller: where the joint PD runs (:data:`robot_rl.sim.controller.MODES`): ``"numpy"`` (a torque
            every physics step, the default) or ``"actuator"`` (MuJoCo position actuators + ``gravcomp``,
            one ``mj_step`` call per control step; faster, and a slightly different arm, see
            :mod:`robot_rl.sim.controller`).
        reward: one of :attr:`reward_modes` (``"sparse"``: 1 on success).
        randomize: ``env.randomize`` ranges (:mod:`robot_rl.sim.randomize`); ``None``: none.
        spawn_region: ``(x_lo, x_hi, y_lo, y_hi)`` (m, world) the task draws its objects' xy from
            (``env.spawn_region``); ``None`` or empty: the task's :attr:`spawn_default`. A region outside
            the training one evaluates held-out object positions.
        environment_state_size: pad ``observation.environment_state`` with trailing zeros to this many
            numbers (``env.environment_state_size``; 0: the task's own :attr:`env_state_dim`), so that
            tasks share one observation layout for a multi-task policy, as Meta-World's fixed 39-number
            observation does (Yu et al. 2019, "Meta-World", §4.1).

    Raises:
        ValueError: bad rates, unknown camera, render mode, reward or controller, non-positive sizes or
            step counts, a ``spawn_region`` that is not 4 finite numbers with low <= high inside the
            workspace's xy, an ``environment_state_size`` below the task's :attr:`env_state_dim`.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}
    objects: ClassVar[str]
    env_state_dim: ClassVar[int]
    instruction: ClassVar[str]
    """The task's instruction (a task whose instruction changes per episode sets ``self.task`` at reset)."""
    reward_modes: ClassVar[tuple[str, ...]] = ("sparse",)
    spawn_default: ClassVar[tuple[float, float, float, float]]
    """Region ``(x_lo, x_hi, y_lo, y_hi)`` (m, world) the task places its objects in by default."""

    def __init__(
        self,
        control_hz: float = 10.0,
        physics_hz: float = 500.0,
        max_episode_steps: int = 60,
        success_hold_steps: int = 3,
        lift_height_m: float = 0.1,
        cameras: list[str] | tuple[str, ...] = (),
        image_size: int = 64,
        render_mode: str | None = None,
        torque_every: int = 1,
        controller: str = "numpy",
        reward: str = "sparse",
        randomize: RandomizeConfig | None = None,
        spawn_region: list[float] | tuple[float, ...] | None = None,
        environment_state_size: int = 0,
    ) -> None:
        self.spawn_x, self.spawn_y = check_spawn_region(spawn_region or self.spawn_default)
        if environment_state_size and environment_state_size < self.env_state_dim:
            raise ValueError(
                f"env.environment_state_size={environment_state_size} is below {type(self).__name__}'s "
                f"{self.env_state_dim} numbers of observation.environment_state: give 0 or more"
            )
        self.env_state_size = int(environment_state_size) or self.env_state_dim
        if reward not in self.reward_modes:
            raise ValueError(f"reward must be one of {self.reward_modes}, got {reward!r}")
        self.reward_mode = reward
        ratio = physics_hz / control_hz
        if control_hz <= 0 or physics_hz <= 0 or abs(ratio - round(ratio)) > 1e-6 or round(ratio) < 1:
            raise ValueError(
                f"physics_hz ({physics_hz}) must be a positive whole multiple of control_hz ({control_hz})"
            )
        for cam in cameras:
            if cam not in CAMERAS:
                raise ValueError(f"unknown camera {cam!r}; available: {sorted(CAMERAS)}")
        if image_size < 1 or max_episode_steps < 1 or success_hold_steps < 1:
            raise ValueError(
                f"image_size ({image_size}), max_episode_steps ({max_episode_steps}) and "
                f"success_hold_steps ({success_hold_steps}) must be >= 1"
            )
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.metadata = {**self.metadata, "render_fps": control_hz}
        self.render_mode = render_mode
        self.task = self.instruction
        self.control_hz, self.physics_hz = float(control_hz), float(physics_hz)
        self.n_substeps = int(round(ratio))
        self.torque_every = max(1, int(torque_every))
        self.max_episode_steps = int(max_episode_steps)
        self.success_hold_steps = int(success_hold_steps)
        self.lift_height_m = float(lift_height_m)
        self.cameras = list(cameras)
        self.image_size = int(image_size)

        self.model = load_model(
            max(self.image_size, RENDER_SIZE), 1.0 / self.physics_hz, self.objects, controller == "actuator"
        )
        self.data = mujoco.MjData(self.model)
        self._pinch = self.model.site("pinch").id
        self._driver_qpos = self.model.joint("right_driver_joint").qposadr[0]
        self._grip_act = self.model.actuator("fingers_actuator").id
        self.controller = DiffIKController(self.model, ARM_GUESS, DOWN_QUAT, mode=controller)
        self.q_home = self.controller.solve(self._qpos_with(ARM_GUESS), HOME_PINCH_POS, iterations=50)
        self.controller.q_home = self.q_home
        self._arm_q = self.controller.qpos_adr
        self._arm_v = self.controller.dof_adr
        self._setup_objects()

        self.action_space = spaces.Box(
            low=np.array([-MAX_DELTA_M] * 3 + [0.0], dtype=np.float32),
            high=np.array([MAX_DELTA_M] * 3 + [1.0], dtype=np.float32),
            dtype=np.float32,
        )
        obs = {
            keys.STATE: spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32),
            keys.ENV_STATE: spaces.Box(-np.inf, np.inf, (self.env_state_size,), np.float32),
        }
        for cam in self.cameras:
            obs[keys.image_key(cam)] = spaces.Box(0, 255, (self.image_size, self.image_size, 3), np.uint8)
        self.observation_space = spaces.Dict(obs)
        self._renderer = None
        self._target = HOME_PINCH_POS.copy()
        self._steps = 0
        self._held = 0
        self.randomizer = Randomizer(self, randomize)

    def _qpos_with(self, arm_q: np.ndarray) -> np.ndarray:
        qpos = self.model.qpos0.copy()
        qpos[[self.model.joint(f"joint{i}").qposadr[0] for i in range(1, 8)]] = arm_q
        return qpos

    # ----------------------------------------------------------------- task hooks
    def _setup_objects(self) -> None:
        """Look up the task's joint/body/mocap ids in ``self.model`` (called once by ``__init__``)."""
        raise NotImplementedError

    def _place_objects(self) -> None:
        """Set the objects' initial state in ``self.data`` from ``self.np_random`` (and ``self.task`` when the
        instruction changes per episode); called by :meth:`reset` after the arm is homed, before
        ``mj_forward``."""
        raise NotImplementedError

    def _env_state(self) -> np.ndarray:
        """``observation.environment_state``: (``env_state_dim``,) object poses."""
        raise NotImplementedError

    def _goal_reached(self) -> bool:
        """Whether the task's goal holds in the current state (success after ``success_hold_steps``)."""
        raise NotImplementedError

    def _dense_reward(self) -> float:
        """The shaped reward of the current state (tasks that list ``"dense"`` in :attr:`reward_modes`)."""
        raise NotImplementedError

    def gripper_closure(self) -> float:
        """Gripper closure in [0, 1] (0 open, 1 closed; about 0.59 closed on a 4 cm cube)."""
        return float(self.data.qpos[self._driver_qpos] / 0.8)

    def free_pose(self, qpos_adr: int) -> np.ndarray:
        """(7,) position (m) and wxyz quaternion of the free joint whose qpos starts at ``qpos_adr``."""
        return self.data.qpos[qpos_adr : qpos_adr + 7]

    # ----------------------------------------------------------------- gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Home the arm, open the gripper, place the task's objects from the seed; returns ``(obs, info)``
        with ``info = {"is_success": False, "task": <instruction>}``."""
        super().reset(seed=seed)
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        d.qpos[self._arm_q] = self.q_home
        self._place_objects()
        self.randomizer.reset(seed)
        mujoco.mj_forward(m, d)
        self._target = d.site_xpos[self._pinch].copy()
        self.controller.q_des = self.q_home.copy()
        self._steps = 0
        self._held = 0
        return self._obs(), {"is_success": False, "task": self.task}

    def check_action(self, action: np.ndarray) -> np.ndarray:
        """:func:`check_action` against this env's action space; float64 (4,). Raises ValueError."""
        return check_action(action, self.action_space)

    def step(self, action: np.ndarray):
        """Advance one control step (``n_substeps`` physics steps); returns the gymnasium 5-tuple."""
        a = self.randomizer.action(self.check_action(action))
        m, d = self.model, self.data
        pinch = d.site_xpos[self._pinch]
        target = np.clip(self._target + a[:3], WORKSPACE_LOW, WORKSPACE_HIGH)
        self._target = np.clip(target, pinch - MAX_LAG_M, pinch + MAX_LAG_M)
        self.controller.set_target(d, self._target)
        d.ctrl[self._grip_act] = 255.0 * float(np.clip(a[3], 0.0, 1.0))
        k = self.torque_every if self.controller.mode == "numpy" else self.n_substeps
        for _ in range(self.n_substeps // k):
            self.controller.apply(d)
            mujoco.mj_step(m, d, k)
        rest = self.n_substeps % k
        if rest:
            self.controller.apply(d)
            mujoco.mj_step(m, d, rest)
        self._steps += 1
        self._held = self._held + 1 if self._goal_reached() else 0
        success = self._held >= self.success_hold_steps
        if self.reward_mode == "dense":
            reward = self._dense_reward()
        else:
            reward = 1.0 if success else 0.0
        truncated = not success and self._steps >= self.max_episode_steps
        info = {"is_success": bool(success)}
        unstable = d.warning[mujoco.mjtWarning.mjWARN_BADQACC].number > 0
        if unstable:  # MuJoCo has reset the state: end the episode rather than continue from garbage
            d.warning[mujoco.mjtWarning.mjWARN_BADQACC].number = 0
            truncated, info["sim_unstable"] = True, True
        return self._obs(), reward, bool(success), bool(truncated), info

    def render(self) -> np.ndarray | None:
        """``rgb_array`` mode: uint8 (128, 128, 3) frame from the ``front`` camera; else ``None``.

        Raises:
            RendererError: no offscreen GL backend (EGL or OSMesa) works.
        """
        if self.render_mode != "rgb_array":
            return None
        return self._get_renderer().render(self.data, "front", RENDER_SIZE)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ----------------------------------------------------------------- helpers
    def _get_renderer(self):
        if self._renderer is None:
            renderer = OffscreenRenderer(self.model)
            mujoco.mj_forward(self.model, self.data)
            if renderer.render(self.data, "front", 32).std() == 0:  # the floor is always in view
                renderer.close()
                raise RendererError(f"{renderer.backend} produced a blank frame; try MUJOCO_GL=egl or osmesa")
            self._renderer = renderer
        return self._renderer

    def _obs(self) -> dict[str, np.ndarray]:
        d = self.data
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, d.site_xmat[self._pinch])
        state = np.concatenate(
            [
                d.qpos[self._arm_q],
                d.qvel[self._arm_v],
                d.site_xpos[self._pinch],
                quat,
                [d.qpos[self._driver_qpos] / 0.8],
            ]
        ).astype(np.float32)
        state = self.randomizer.observe(state)
        env_state = np.zeros(self.env_state_size, dtype=np.float32)
        env_state[: self.env_state_dim] = self._env_state()
        obs = {keys.STATE: state, keys.ENV_STATE: env_state}
        if self.cameras:
            renderer = self._get_renderer()
            for cam in self.cameras:
                obs[keys.image_key(cam)] = renderer.render(d, CAMERAS[cam], self.image_size)
        return obs
