"""An independent audit of the safety layer: ``LimitAudit`` sits *behind* a
:class:`~robot_rl.hardware.safety.SafeRobot` (``SafeRobot(LimitAudit(robot), cfg)``), passes every command
on to the real robot unchanged and records each one that breaks the limits of ``cfg``, checked from
first principles (not with the layer's own code). ``ADVERSARIES`` are the hostile command sources the
safety test and ``benchmarks/bench_safety.py`` drive through it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import numpy as np

from robot_rl.config import SafetyConfig
from robot_rl.hardware.errors import CommandRejected
from robot_rl.hardware.robot import Command, CommandMode, Robot, RobotLimits, RobotState

EPS = 1e-9
"""Round-off allowed in every audit check (m, rad, rad/s)."""


class LimitAudit(Robot):
    """Passes commands to ``robot`` and appends ``(command, [broken rules])`` to :attr:`violations` for each
    command that: uses a mode other than ``joint_position``/``ee_delta`` (3,), holds NaN/inf or a gripper
    outside [0, 1]; moves the ``ee_delta`` target more than ``ee_step_max`` on an axis or out of the box;
    sends joints outside their limits, faster than the speed limit or with a speed change above
    ``acc * dt``, or (by forward kinematics) the end effector out of the box. Targets already outside a
    limit may stay there but not move further out. Tracking starts from the measured state whenever the
    mode changes, as the interface defines it, and after :attr:`reset_scene`; a joint command is also safe
    when it is a safe continuation of the measured state (the layer restarts a target the arm cannot
    follow from where the arm is)."""

    def __init__(self, robot: Robot, cfg: SafetyConfig) -> None:
        self.robot, self.cfg = robot, cfg
        self.name = robot.name
        self.violations: list[tuple[Command, list[str]]] = []
        self.received = 0
        self._seen: list[RobotState] = []  # states the sender read since its last command
        # (joint target, its step velocity, box start) for each state the sender may be continuing from
        self._joint_paths: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
        self.last_mode: CommandMode | None = None

    @property
    def modes(self) -> tuple[CommandMode, ...]:  # type: ignore[override]
        return self.robot.modes

    @property
    def lockstep(self) -> bool:
        """Whether the audited robot is a lock-step simulator."""
        return bool(self.robot.lockstep)

    @property
    def simulated(self) -> bool:  # type: ignore[override]
        """Whether the audited robot is simulated."""
        return bool(self.robot.simulated)

    @property
    def limits(self) -> RobotLimits:
        return self.robot.limits

    @property
    def is_connected(self) -> bool:
        return self.robot.is_connected

    def connect(self) -> None:
        self.robot.connect()
        lim, c = self.robot.limits, self.cfg
        self.q_low, self.q_high = lim.joint_low + c.joint_margin_rad, lim.joint_high - c.joint_margin_rad
        vel_scale, acc_scale = c.motion_scales(bool(self.robot.simulated))
        self.vmax, self.amax = lim.joint_vel_max * vel_scale, lim.joint_acc_max * acc_scale
        self.step, self.dt = lim.ee_step_max * c.ee_step_scale, 1.0 / lim.control_hz
        self.box_low = np.maximum(lim.ee_low, c.workspace_low) if c.workspace_low else lim.ee_low
        self.box_high = np.minimum(lim.ee_high, c.workspace_high) if c.workspace_high else lim.ee_high

    def disconnect(self) -> None:
        self.robot.disconnect()

    @property
    def reset_scene(self) -> Callable[[int | None], None] | None:
        """The audited robot's ``reset_scene(seed)`` (a sim-backed robot re-places the cube and homes the
        arm: its state jumps), after which the audit tracks from the measured state again, as after a mode
        change, instead of judging the next command against the pre-reset target; ``None`` when the robot
        has none (so a :class:`~robot_rl.hardware.safety.SafeRobot` over the audit has one exactly when
        the robot does)."""
        inner = getattr(self.robot, "reset_scene", None)
        if not callable(inner):
            return None

        def reset(seed: int | None = None) -> None:
            inner(seed)
            self.last_mode, self._seen = None, []

        return reset

    def read(self) -> RobotState:
        state = self.robot.read()
        self._seen = [*self._seen[-7:], state]
        return state

    def forward_kinematics(self, joint_pos: np.ndarray) -> np.ndarray | None:
        return self.robot.forward_kinematics(joint_pos)

    @property
    def tracking_time_s(self) -> float:
        """The audited robot's tracking time (s; 0 when it does not say)."""
        return self.robot.tracking_time_s

    def link_clearance(self, joint_pos: np.ndarray) -> float | None:
        """The audited robot's collision model (m), or ``None`` when it has none."""
        return self.robot.link_clearance(joint_pos)

    def set_tcp_boundary(self, low: np.ndarray, high: np.ndarray) -> bool:
        """The audited robot's robot-side boundary (whether it enforces one)."""
        return self.robot.set_tcp_boundary(low, high)

    def _outside(self, x: np.ndarray, low: np.ndarray, high: np.ndarray, prev: np.ndarray) -> bool:
        return bool(np.any(x < np.minimum(low, prev) - EPS) or np.any(x > np.maximum(high, prev) + EPS))

    def _measured(self) -> list[RobotState]:
        """The states the sender read since its last command (a fresh reading when none): the layer may
        start a target from any of them (on a real-time robot each reading differs)."""
        return self._seen or [self.robot.read()]

    def _joint_start(self, state: RobotState) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        q = state.joint_pos.copy()
        return q, np.clip(state.joint_vel, -self.vmax, self.vmax), self.robot.forward_kinematics(q)

    def _joint_problems(
        self, q: np.ndarray, q_prev: np.ndarray, v_prev: np.ndarray, ee_start: np.ndarray | None
    ) -> list[str]:
        """Rules a joint target ``q`` breaks when it follows the state (``q_prev``, ``v_prev``); the box may
        be exceeded no further than ``ee_start``."""
        broken = []
        vel = (q - q_prev) / self.dt
        if self._outside(q, self.q_low, self.q_high, q_prev):
            broken.append("joint limits")
        if np.any(np.abs(vel) > self.vmax + EPS):
            broken.append("joint velocity")
        if np.any(np.abs(vel - v_prev) > self.amax * self.dt + EPS):
            broken.append("joint acceleration")
        ee = self.robot.forward_kinematics(q)
        if ee is not None and self._outside(ee, self.box_low, self.box_high, ee_start):
            broken.append("workspace")
        return broken

    def command(self, cmd: Command) -> None:
        self.received += 1
        broken = []
        value = np.asarray(cmd.value, dtype=np.float64)
        if not np.all(np.isfinite(value)):
            broken.append("non-finite value")
        if cmd.gripper is not None and not (np.isfinite(cmd.gripper) and 0.0 <= cmd.gripper <= 1.0):
            broken.append("gripper")
        if cmd.mode == CommandMode.EE_DELTA and value.shape == (3,):
            if np.any(np.abs(value) > self.step + EPS):
                broken.append("ee step")
            if self.last_mode != cmd.mode:  # from where the joints were sent, or a measured pose
                joints = self.last_mode == CommandMode.JOINT_POSITION
                fk = self.robot.forward_kinematics(self._q) if joints else None
                starts = [s.ee_pos.copy() for s in self._measured()] if fk is None else [fk]
            else:
                starts = [self._target]
            fits = [t for t in starts if not self._outside(t + value, self.box_low, self.box_high, t)]
            if not fits:
                broken.append("workspace")
            self._target = (fits or starts)[0] + value
        elif cmd.mode == CommandMode.JOINT_POSITION and value.shape == self.q_low.shape:
            starts = [self._joint_start(s) for s in self._measured()]  # anchors, or a safe continuation
            if self.last_mode == cmd.mode:
                starts = self._joint_paths + starts
            problems = [self._joint_problems(value, *start) for start in starts]
            fits = [start for start, p in zip(starts, problems, strict=True) if not p]
            broken += [] if fits else problems[0]
            # every start the command safely continues stays a hypothesis of the sender's state: a target
            # restarted from a reading may also fit the previous target by chance, and picking one would
            # flag the sender's next, safe, command
            paths: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
            for q, _, ee in fits or starts[:1]:
                v = (value - q) / self.dt
                if not any(np.allclose(v, w, atol=EPS) for _, w, _ in paths):  # at most one per velocity
                    paths.append((value, v, ee))
            self._joint_paths = paths
            self._q = value
        else:
            broken.append(f"mode {cmd.mode!s} with shape {value.shape}")
        self.last_mode = cmd.mode
        self._seen = []
        if broken:
            self.violations.append((cmd, broken))
        self.robot.command(cmd)


Adversary = Callable[[np.random.Generator, RobotLimits, int], Command]
"""One hostile command from a generator, the robot's own limits and the step index."""


def _sane(rng: np.random.Generator, lim: RobotLimits, reach: float, move: float) -> Command:
    """A command in a random valid mode: an ``ee_delta`` up to ``move`` m per axis, or joint targets up to
    ``reach`` rad beyond the joint limits."""
    gripper = float(rng.uniform(0.0, 1.0))
    if rng.random() < 0.5:
        return Command(CommandMode.EE_DELTA, rng.uniform(-move, move, 3), gripper)
    target = rng.uniform(lim.joint_low - reach, lim.joint_high + reach)
    return Command(CommandMode.JOINT_POSITION, target, gripper)


def random_policy(rng: np.random.Generator, lim: RobotLimits, step: int) -> Command:
    """Uniform commands somewhat beyond every limit (0.1 m steps, joints 0.5 rad past their limits)."""
    return _sane(rng, lim, 0.5, 0.1)


def nan_policy(rng: np.random.Generator, lim: RobotLimits, step: int) -> Command:
    """Like :func:`random_policy`, with NaN/inf in the value or the gripper a third of the time."""
    cmd = random_policy(rng, lim, step)
    roll = rng.random()
    if roll < 0.25:
        value = cmd.value.copy()
        value[rng.integers(len(value))] = rng.choice([np.nan, np.inf, -np.inf])
        return Command(cmd.mode, value, cmd.gripper)
    if roll < 0.33:
        return Command(cmd.mode, cmd.value, float(rng.choice([np.nan, np.inf])))
    return cmd


def huge_policy(rng: np.random.Generator, lim: RobotLimits, step: int) -> Command:
    """Steps of metres and joint targets tens of radians away."""
    if rng.random() < 0.5:
        return Command(CommandMode.EE_DELTA, rng.normal(0.0, 5.0, 3), 1.0)
    return Command(CommandMode.JOINT_POSITION, rng.normal(0.0, 50.0, lim.num_joints), 0.0)


def out_of_box_policy(rng: np.random.Generator, lim: RobotLimits, step: int) -> Command:
    """For runs of 40 steps, pushes at twice the step limit towards a random corner beyond the box (ee) or
    towards joint targets past the limits' extremes."""
    run = np.random.default_rng(step // 40)
    if run.random() < 0.6:
        return Command(CommandMode.EE_DELTA, run.choice([-2.0, 2.0], 3) * lim.ee_step_max)
    extremes = np.where(run.random(lim.num_joints) < 0.5, lim.joint_low - 0.2, lim.joint_high + 0.2)
    return Command(CommandMode.JOINT_POSITION, extremes)


def mode_abuse_policy(rng: np.random.Generator, lim: RobotLimits, step: int) -> Command:
    """Any mode with any shape (2, 3, 6 or n values) and grippers in [-1, 2]."""
    mode = CommandMode(rng.choice([str(m) for m in CommandMode]))
    size = int(rng.choice([2, 3, 6, lim.num_joints]))
    return Command(mode, rng.uniform(-1.0, 1.0, size), float(rng.uniform(-1.0, 2.0)))


ADVERSARIES: dict[str, Adversary] = {
    "random": random_policy,
    "nan": nan_policy,
    "huge": huge_policy,
    "out_of_box": out_of_box_policy,
    "mode_abuse": mode_abuse_policy,
}
"""The adversarial command sources, by name."""


def single_mode(adversary: Adversary, mode: CommandMode) -> Adversary:
    """``adversary`` restricted to ``mode``: its commands in other modes are redrawn (it must produce
    ``mode`` with a fair probability, as every mixed adversary here does)."""

    def draw(rng: np.random.Generator, lim: RobotLimits, step: int) -> Command:
        for attempt in range(1000):
            cmd = adversary(rng, lim, step + 1_000_003 * attempt)
            if cmd.mode == mode:
                return cmd
        raise ValueError(f"{adversary.__name__} gave no {mode!s} command in 1000 draws")

    return draw


def attack(safe: Robot, audit: LimitAudit, adversary: Adversary, steps: int, seed: int = 0) -> Iterator[int]:
    """Send ``steps`` commands of ``adversary`` (drawn with ``np.random.default_rng(seed)`` against the
    limits of the robot behind ``audit``) through the connected ``safe`` (a SafeRobot over ``audit``).
    A refused command is skipped, as a policy's would be; a real-time robot (``safe.lockstep`` false)
    gets one command per control period. Yields the step number after each command, so the caller can
    read the robot (``audit.robot.read()``) and the audit between commands."""
    rng = np.random.default_rng(seed)
    lim = audit.robot.limits
    for step in range(steps):
        try:
            safe.command(adversary(rng, lim, step))
        except CommandRejected:
            pass
        if not getattr(safe, "lockstep", False):  # the robot moves in real time: one command per period
            time.sleep(1.0 / lim.control_hz)
        yield step
