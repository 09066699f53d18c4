"""Record teleoperated demonstrations on a robot (``robot-rl record``) into a LeRobot v3.0 dataset.

A human drives the env (a :class:`~robot_rl.hardware.robot_env.RobotEnv`, or the simulator) with a teleop
device (keyboard, gamepad, SpaceMouse, a leader arm, or the simulated human for tests). Each control step
the device is polled with the current observation: its action is executed; while it gives none (the
operator is not pressing anything) the robot holds, gripper unchanged, and that step is recorded too. An
episode ends on the env's success or time limit, or on the operator's label (``success``/``failure``),
which then sets the last frame's ``next.success``/``next.done``/``next.reward`` as the online actor does.

Episodes go through the same :class:`~robot_rl.data.lerobot.writer.LeRobotWriter` as ``collect``, one
durable append per finished episode, so a crash or Ctrl-C loses only the episode in progress and a rerun
resumes the dataset (it records until the dataset holds ``num_episodes``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from robot_rl import keys
from robot_rl.rollout import RecordedEpisode, Rollout
from robot_rl.runtime.intervention import InterventionDevice
from robot_rl.runtime.takeover import DEVICE_ERROR, InterventionWrapper
from robot_rl.single_env import SingleEnvVector

log = logging.getLogger(__name__)
RECORD_SEED_OFFSET = 3_000_000
"""Env seeds of recorded episodes (demos use 0.., evaluation 1,000,000.., online 2,000,000..); the sim-backed
robot places its cube from them, a real scene ignores them."""
TELEOPS = ("keyboard", "gamepad", "spacemouse", "leader", "sim_human", "ros2")


class _HoldSource:
    """The chunk source of a demo: h = 1 chunks of the hold action, which the device's action replaces
    whenever the operator drives (:class:`~robot_rl.runtime.takeover.InterventionWrapper`). Hold: zero
    motion, the gripper (the last dimension, when the env has one) where the operator last left it."""

    def __init__(self, low: np.ndarray, high: np.ndarray, has_gripper: bool) -> None:
        self.low, self.high, self.has_gripper = low, high, has_gripper
        self.hold = np.zeros(low.shape, np.float32)

    def reset(self, env_id: int, env_seed: int) -> None:
        self.hold = np.clip(np.zeros(self.low.shape, np.float32), self.low, self.high)

    def executed(self, env_id: int, action: np.ndarray) -> None:
        if self.has_gripper:
            self.hold[-1] = action[-1]  # the gripper stays where the operator left it

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        return np.tile(self.hold, (len(env_ids), 1, 1))


def _demo_env(env, device: InterventionDevice, announce: Callable[[str], None] | None):
    """``env`` driven by ``device`` as the one env a :class:`~robot_rl.rollout.Rollout` steps, with the
    hold source; the caller keeps ``env`` (and closes it)."""
    vec = SingleEnvVector(InterventionWrapper(env, device, announce=announce))
    low, high = env.action_space.low, env.action_space.high
    has_gripper = getattr(env.unwrapped, "gripper", True)  # a RobotEnv without one (a UR) says so
    return vec, _HoldSource(low, high, has_gripper)


def _summary(ep: RecordedEpisode) -> dict:
    return {
        "success": ep.success,
        "steps": ep.steps,
        "label": ep.label,
        "robot_error": ep.final_info.get("robot_error"),
        "task": ep.task or None,
    }


def _demo(vec, source: _HoldSource, seed: int) -> RecordedEpisode:
    """The episode of env seed ``seed``; every step is the operator's (``is_intervention`` False)."""
    done: list[RecordedEpisode] = []
    Rollout(vec, source).run([seed], done.append)
    ep = done[0]
    if ep.final_info.get(DEVICE_ERROR) is not None:
        raise ep.final_info[DEVICE_ERROR]  # the episode so far is not a clean demo
    if ep.steps:
        ep.frames[keys.INTERVENTION][:] = False  # the human drives every step of a demo
    return ep


def record_episode(
    env, device: InterventionDevice, seed: int, announce: Callable[[str], None] | None = None
) -> tuple[dict[str, np.ndarray] | None, dict]:
    """One teleoperated episode of env seed ``seed`` (:class:`~robot_rl.rollout.Rollout` on ``env`` with the
    device taking over every step it drives); ``announce`` gets the episode's instruction after the
    reset, before the operator drives (the operator of pick-colour must know which cube).

    Returns ``(frames, summary)``: frames map LeRobot keys to (T, ...) arrays (None when the operator
    ended it before any step); summary has ``success``, ``steps``, ``label`` (the operator's or None),
    ``robot_error`` (the env's ``info["robot_error"]`` when a hardware error ended it, else None) and
    ``task`` (the env's instruction, or None).

    Raises:
        DeviceError: the device failed (the episode so far is lost: it is not a clean demo).
    """
    ep = _demo(*_demo_env(env, device, announce), seed)
    return (ep.frames if ep.steps else None), _summary(ep)


def record(
    env,
    device: InterventionDevice,
    writer,
    task: str,
    num_episodes: int,
    progress: Callable[[dict], None] | None = None,
    announce: Callable[[str], None] | None = None,
) -> dict:
    """Record until ``writer`` holds ``num_episodes`` episodes; each finished episode is written (and
    durable) before the next starts, under its own instruction when the env draws one per episode
    (:func:`record_episode`'s ``task``), else under ``task``. Returns ``{"recorded", "successes",
    "num_episodes"}`` of this run. ``progress`` gets each episode's summary after it; ``announce`` each
    episode's instruction before it (see :func:`record_episode`).

    Raises:
        HardwareError: the robot failed; the episode up to the failure is written first (truncated).
        DeviceError: the teleop device failed (the unfinished episode is dropped).
    """
    recorded = successes = 0
    vec, source = _demo_env(env, device, announce)
    while writer.num_episodes < num_episodes:
        index = writer.num_episodes
        ep = _demo(vec, source, RECORD_SEED_OFFSET + index)
        summary = _summary(ep)
        if ep.steps:
            writer.add_episode(ep.frames, task=ep.task or task, source="demo")
            recorded += 1
            successes += int(ep.success)
        summary["episode_index"] = index if ep.steps else None
        if progress is not None:
            progress(summary)
        if summary["robot_error"] is not None:
            env.reset(seed=RECORD_SEED_OFFSET + writer.num_episodes)  # raises the robot's error
    return {"recorded": recorded, "successes": successes, "num_episodes": writer.num_episodes}
