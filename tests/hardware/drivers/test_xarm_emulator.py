"""The real ``xarm-python-sdk`` and our xArm driver against the protocol-level xArm 7 control box emulator
(:mod:`robot_rl_testing.xarm_emulator`), whose arm is MuJoCo: connect, read, servo-mode streaming, the
gripper, ``emergency_stop``, controller errors, and UFACTORY's servo-mode rule (a setpoint more than
10 mm from the last is not executed) catching the day-one stream (10 Hz, 30 mm apart).

The one change the SDK needs: ``XCONF.SocketConf.TCP_CONTROL_PORT`` set to the emulator's ephemeral
command port (each emulator has its own loopback address, with the report socket on the SDK's 30002).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from waits import wait_until

pytest.importorskip("mujoco")
pytest.importorskip("xarm")

from robot_rl.config import RobotConfig  # noqa: E402
from robot_rl.hardware.drivers import xarm_model  # noqa: E402
from robot_rl.hardware.drivers.arm_common import quat_from_rpy  # noqa: E402
from robot_rl.hardware.errors import RobotConnectionError, RobotFault  # noqa: E402
from robot_rl.hardware.factory import make_robot  # noqa: E402
from robot_rl.hardware.robot import Command, CommandMode  # noqa: E402
from robot_rl_testing.xarm_emulator import SERVO_STEP_MAX_M, XArmControllerEmulator  # noqa: E402


@pytest.fixture
def sdk(xarm_emu):
    from xarm.wrapper import XArmAPI

    arm = XArmAPI(xarm_emu.host, is_radian=False)
    yield arm
    arm.disconnect()


@pytest.fixture
def robot(xarm_emu):
    robot = make_robot(RobotConfig(driver="xarm", address=xarm_emu.host), control_hz=10.0)
    robot.connect()
    yield robot
    robot.disconnect()


def _angle_between(a: np.ndarray, b: np.ndarray) -> float:
    return 2.0 * float(np.arccos(np.clip(abs(np.dot(a, b)), 0.0, 1.0)))


def test_forward_kinematics_matches_the_mujoco_chain_and_ufactorys_zero_pose():
    pos, quat = xarm_model.forward_kinematics(np.zeros(7))
    np.testing.assert_allclose(pos, [0.206, 0.0, 0.1205], atol=1e-9)  # UFACTORY: [206, 0, 120.5] mm
    assert _angle_between(quat, quat_from_rpy(np.array([np.pi, 0.0, 0.0]))) < 1e-9
    rng = np.random.default_rng(0)
    for _ in range(5):
        q = rng.uniform(np.maximum(xarm_model.JOINT_LOW, -3.0), np.minimum(xarm_model.JOINT_HIGH, 3.0))
        data = XArmControllerEmulator(home=q).data  # not started: the MuJoCo model at q, no physics step
        mj_pos, mj_rot = data.site("flange").xpos, data.site("flange").xmat.reshape(3, 3)
        pos, quat = xarm_model.forward_kinematics(q)
        np.testing.assert_allclose(pos, mj_pos, atol=1e-9)
        np.testing.assert_allclose(xarm_model.joint_frames(q)[-1][:3, :3], mj_rot, atol=1e-9)
        frame = xarm_model.joint_frames(q)[-1]
        np.testing.assert_allclose(xarm_model.XARM7.flange(q), frame, atol=1e-12)  # the drivers' D-H code
        shift = np.array([0.005, -0.005, 0.005])
        near = xarm_model.inverse_kinematics(frame[:3, 3] + shift, frame[:3, :3], q)
        assert near is not None
        np.testing.assert_allclose(xarm_model.forward_kinematics(near)[0] - pos, shift, atol=1e-5)


def test_the_real_sdk_connects_and_reads_the_emulated_arm(xarm_emu, sdk):
    assert sdk.connected and sdk.axis == 7 and sdk.device_type == 7
    assert sdk.version_number == (2, 4, 0)
    assert wait_until(lambda: sdk.temperatures == [30] * 7)  # the rich report is parsed
    assert sdk.state == 4  # stopped at boot
    assert sdk.motion_enable(enable=True) == 0
    assert sdk.set_mode(1) == 0 and sdk.set_state(0) == 0
    assert wait_until(lambda: sdk.mode == 1 and sdk.state == 2)
    code, angles = sdk.get_servo_angle(is_radian=True)
    assert code == 0
    np.testing.assert_allclose(angles, xarm_emu.joint_positions(), atol=1e-4)
    code, pose = sdk.get_position(is_radian=True)
    pos, _ = xarm_emu.flange_pose()
    assert code == 0
    np.testing.assert_allclose(np.array(pose[:3]) / 1000.0, pos, atol=1e-4)
    code, (q, qd, _effort) = sdk.get_joint_states(is_radian=True)
    assert (
        code == 0 and np.allclose(q, xarm_emu.joint_positions(), atol=1e-4) and np.allclose(qd, 0, atol=1e-2)
    )
    assert sdk.get_err_warn_code() == (0, [0, 0])
    assert xarm_emu.unknown_registers == set()


def test_the_day_one_stream_is_not_executed_and_a_guide_stream_is(xarm_emu, sdk):
    """10 Hz setpoints 30 mm apart (the day-one driver) are dropped by the controller as UFACTORY's
    servo-mode guide says; 200 Hz setpoints 1 mm apart move the arm."""
    sdk.motion_enable(enable=True)
    sdk.set_mode(1)
    sdk.set_state(0)
    start, _ = xarm_emu.flange_pose()
    _, pose = sdk.get_position(is_radian=False)
    for _ in range(5):
        pose[0] += 30.0
        assert sdk.set_servo_cartesian(pose, is_radian=False) == 0  # accepted on the wire...
        time.sleep(0.1)
    assert [s.reason for s in xarm_emu.servo_log] == ["step"] * 5  # ...and not executed
    np.testing.assert_allclose(xarm_emu.flange_pose()[0], start, atol=1e-3)

    xarm_emu.servo_log.clear()
    _, pose = sdk.get_position(is_radian=False)
    for _ in range(40):
        pose[0] += 1.0
        assert sdk.set_servo_cartesian(pose, is_radian=False) == 0
        time.sleep(0.005)
    assert all(s.executed for s in xarm_emu.servo_log)
    assert wait_until(lambda: abs(xarm_emu.flange_pose()[0][0] - start[0] - 0.040) < 1e-3)


def test_driver_streams_servo_setpoints_within_the_guide_and_the_arm_follows(xarm_emu, robot):
    state = robot.read()
    np.testing.assert_allclose(state.joint_pos, xarm_emu.joint_positions(), atol=1e-4)
    pos, quat = xarm_emu.flange_pose()
    np.testing.assert_allclose(state.ee_pos, pos, atol=1e-4)
    assert _angle_between(state.ee_quat, quat) < 1e-3
    np.testing.assert_allclose(robot.forward_kinematics(state.joint_pos), state.ee_pos, atol=1e-4)

    target = state.ee_pos + [0.04, -0.02, -0.03]
    for delta in ([0.02, -0.01, -0.015], [0.02, -0.01, -0.015]):  # two 10 Hz control steps
        robot.command(Command(CommandMode.EE_DELTA, np.array(delta), gripper=0.0))
        time.sleep(0.1)
    assert wait_until(lambda: np.linalg.norm(xarm_emu.flange_pose()[0] - target) < 1e-3), (
        xarm_emu.flange_pose()[0]
    )
    assert _angle_between(xarm_emu.flange_pose()[1], quat) < 5e-3  # the orientation held
    log = xarm_emu.servo_log
    assert log and all(s.executed for s in log), {s.reason for s in log}
    assert max(s.step_m for s in log) <= SERVO_STEP_MAX_M
    rate = 1.0 / np.median(np.diff([s.t for s in log]))  # the median: robust to a starved CPU's hiccups
    assert 100.0 <= rate <= 250.0, rate  # UFACTORY's servo-mode rate

    xarm_emu.servo_log.clear()
    q = robot.read().joint_pos
    goal = q + np.array([0.2, 0.0, 0.0, -0.1, 0.0, 0.1, 0.0])
    robot.command(Command(CommandMode.JOINT_POSITION, goal, gripper=0.0))
    assert wait_until(lambda: np.max(np.abs(xarm_emu.joint_positions() - goal)) < 2e-3), (
        xarm_emu.joint_positions() - goal
    )
    np.testing.assert_allclose(robot.read().joint_pos, goal, atol=3e-3)
    assert all(s.executed and s.step_m <= SERVO_STEP_MAX_M for s in xarm_emu.servo_log)
    assert xarm_emu.unknown_registers == set()


def test_the_tcp_offset_set_on_the_controller_is_measured_for_forward_kinematics(xarm_emu, sdk):
    """Before: ``XArmRobot.forward_kinematics`` was ``None`` (joint commands never checked against the box
    by kinematics). With the xArm Gripper's TCP offset (172 mm along the flange's z) set through the SDK,
    the driver's chain predicts the TCP the controller reports, and Cartesian servo targets are TCP
    targets."""
    assert sdk.set_tcp_offset([0, 0, 172, 0, 0, 0], is_radian=False, wait=False) == 0
    robot = make_robot(RobotConfig(driver="xarm", address=xarm_emu.host), control_hz=10.0)
    robot.connect()
    try:
        state = robot.read()
        flange, _ = xarm_emu.flange_pose()
        assert abs(np.linalg.norm(state.ee_pos - flange) - 0.172) < 1e-4, (state.ee_pos, flange)
        np.testing.assert_allclose(robot.forward_kinematics(state.joint_pos), state.ee_pos, atol=1e-4)
        target = state.ee_pos + [0.0, 0.02, 0.02]
        robot.command(Command(CommandMode.EE_DELTA, np.array([0.0, 0.02, 0.02]), gripper=None))
        assert wait_until(lambda: np.linalg.norm(robot.read().ee_pos - target) < 1e-3), robot.read().ee_pos
        q = robot.read().joint_pos
        np.testing.assert_allclose(robot.forward_kinematics(q), robot.read().ee_pos, atol=1e-3)
        # the TCP changed on the controller mid-session: readings no longer fit the measured chain
        assert sdk.set_tcp_offset([0, 0, 100, 0, 0, 0], is_radian=False, wait=False) == 0
        with pytest.raises(RobotFault, match="kinematic model"):
            robot.read()
    finally:
        robot.disconnect()
    with pytest.raises(RobotConnectionError):  # the offset is measured again after the next connect
        robot.forward_kinematics(q)


def test_gripper_closes_and_opens(xarm_emu, robot):
    q = robot.read().joint_pos
    robot.command(Command(CommandMode.JOINT_POSITION, q, gripper=1.0))
    assert wait_until(lambda: xarm_emu.gripper_pulses() < 10.0), xarm_emu.gripper_pulses()
    assert wait_until(lambda: robot.read().gripper > 0.98)
    robot.command(Command(CommandMode.JOINT_POSITION, q, gripper=0.0))
    assert wait_until(lambda: xarm_emu.gripper_pulses() > 840.0), xarm_emu.gripper_pulses()
    assert robot.read().gripper < 0.02


def test_emergency_stop_stops_the_arm_on_the_controller(xarm_emu, robot):
    q = robot.read().joint_pos
    goal = q + np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])  # 1 s at the stream's 1 rad/s
    robot.command(Command(CommandMode.JOINT_POSITION, goal, gripper=None))
    assert wait_until(lambda: xarm_emu.joint_positions()[0] > q[0] + 0.2)
    robot.emergency_stop()
    stop_t = time.monotonic()
    assert xarm_emu.state == 4
    time.sleep(0.3)  # the controller holds where it stopped (settling from 1 rad/s)
    stopped = xarm_emu.joint_positions()
    time.sleep(0.3)
    np.testing.assert_allclose(xarm_emu.joint_positions(), stopped, atol=1e-3)  # it stays stopped
    assert stopped[0] < goal[0] - 0.3
    assert not [s for s in xarm_emu.servo_log if s.executed and s.t > stop_t]
    # the next command re-enters servo mode (set_mode(1), set_state(0)) and moves on
    robot.command(Command(CommandMode.JOINT_POSITION, goal, gripper=None))
    assert wait_until(lambda: abs(xarm_emu.joint_positions()[0] - goal[0]) < 2e-3)
    assert all(s.step_m <= SERVO_STEP_MAX_M for s in xarm_emu.servo_log)


def test_a_controller_error_is_a_robot_fault_naming_the_code(xarm_emu, robot):
    xarm_emu.inject_error(22)
    assert wait_until(lambda: robot._arm.error_code == 22)  # through the report socket
    with pytest.raises(RobotFault, match="22"):
        robot.read()


class _Pad:
    """A scripted operator: ``dx`` along +x with the gripper closing for ``moves`` steps, then the
    success label."""

    def __init__(self, moves: int, dx: float) -> None:
        self.moves, self.dx, self.polls = moves, dx, 0

    def reset(self, env_seed: int) -> None:
        self.polls = 0

    def close(self) -> None:
        pass

    def poll(self, obs):
        from robot_rl.runtime.intervention import HumanInput

        self.polls += 1
        if self.polls > self.moves:
            return HumanInput(None, "success")
        return HumanInput(np.array([self.dx, 0.0, 0.0, 1.0], np.float32), None)


def test_record_then_replay_eval_through_robot_env_with_the_gripper(xarm_emu, tmp_path):
    """``record_episode`` through ``RobotEnv.from_config`` (the safety layer over the driver over the real
    SDK): an operator's ee_delta demo that moves +x and closes the gripper, then its actions replayed
    open-loop as the policy of an eval episode from the same home: the arm and gripper end where the demo
    did."""
    from robot_rl.config import EnvConfig, SafetyConfig
    from robot_rl.hardware.robot_env import RobotEnv
    from robot_rl.recording import record_episode

    home = (XArmControllerEmulator().data.qpos[:7] + [0.1, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0]).tolist()
    safety = SafetyConfig(
        workspace_low=[0.2, -0.3, 0.15], workspace_high=[0.6, 0.3, 0.55], estop_signal="", watchdog_ms=0
    )
    rcfg = RobotConfig(
        driver="xarm",
        address=xarm_emu.host,
        action="ee_delta",
        reset="none",
        success="operator",
        home_joints=home,
        home_tolerance=0.002,
        home_timeout_s=10.0,
        safety=safety,
    )
    env = RobotEnv.from_config(EnvConfig(robot=rcfg, num_envs=1, cameras=[], max_episode_steps=20))
    try:
        assert env.action_space.shape == (4,)  # [dx, dy, dz, grip]
        frames, summary = record_episode(env, _Pad(moves=8, dx=0.01), seed=0)
        np.testing.assert_allclose(frames["observation.state"][0, :7], home, atol=0.003)  # homed first
        assert summary["label"] == "success" and summary["robot_error"] is None, summary
        actions, states = frames["action"], frames["observation.state"]
        assert actions.shape == (8, 4) and np.all(actions[:, 3] == 1.0)
        demo_end, demo_grip = xarm_emu.flange_pose()[0], xarm_emu.gripper_pulses()
        # ee_pos is observation.state[14:17] (7 joints, 7 speeds, then the ee position)
        assert demo_end[0] - states[0, 14] > 0.04, (demo_end, states[0, 14:17])
        assert demo_grip < 50.0  # closed (850 is open)

        obs, _ = env.reset(seed=1)  # home again: the arm goes back, the gripper opens
        assert wait_until(lambda: xarm_emu.gripper_pulses() > 800.0)
        np.testing.assert_allclose(obs["observation.state"][14:17], states[0, 14:17], atol=0.003)
        for action in actions:  # the replayed demo as the eval policy
            obs, reward, terminated, truncated, info = env.step(action)
            assert not truncated and "robot_error" not in info, info
        assert wait_until(lambda: np.linalg.norm(xarm_emu.flange_pose()[0] - demo_end) < 0.005), (
            xarm_emu.flange_pose()[0]
        )
        assert wait_until(lambda: xarm_emu.gripper_pulses() < 50.0)
    finally:
        env.close()
    assert all(s.step_m <= SERVO_STEP_MAX_M for s in xarm_emu.servo_log)
    assert [s for s in xarm_emu.servo_log if not s.executed] == []
    assert xarm_emu.unknown_registers == set()


def test_cli_record_train_eval_on_the_emulated_xarm_with_the_gripper(xarm_emu, tmp_path, monkeypatch):
    """``robot-rl record`` (a scripted operator in place of the keyboard: +x and the gripper closing),
    ``train --algo bc`` and ``eval`` on ``driver: xarm``, in this process (the SDK's one patched port),
    through ``RobotEnv``, the safety layer, the driver and the real SDK against the emulated control box."""
    import json

    import robot_rl.cli.record as record_cli
    from robot_rl.cli.main import main
    from robot_rl.data.lerobot.reader import LeRobotDataset

    monkeypatch.setattr(record_cli, "make_teleop", lambda *args, **kwargs: _Pad(moves=6, dx=0.01))
    home = (XArmControllerEmulator().data.qpos[:7] + [0.1, 0.0, 0.0, 0.1, 0.0, 0.0, 0.0]).round(4)
    robot = [
        f"--run_dir={tmp_path / 'run'}",
        "--env.num_envs=1",
        "--env.control_hz=10",
        "--env.max_episode_steps=8",
        "--env.robot.driver=xarm",
        f"--env.robot.address={xarm_emu.host}",
        "--env.robot.safety.workspace_low=[0.2,-0.3,0.15]",
        "--env.robot.safety.workspace_high=[0.6,0.3,0.55]",
        "--env.robot.safety.estop_signal=''",
        "--env.robot.success=operator",
        "--env.robot.reset=none",
        f"--env.robot.home_joints=[{','.join(str(q) for q in home)}]",
        "--env.robot.home_tolerance=0.005",
    ]
    assert main(["record", "--teleop", "keyboard", "--num_episodes", "2", *robot]) == 0
    root = tmp_path / "run" / "dataset"
    info = json.loads((root / "meta" / "info.json").read_text())
    assert info["robot_type"] == "xarm" and info["total_episodes"] == 2
    assert info["features"]["action"]["shape"] == [4] and info["features"]["observation.state"]["shape"] == [
        22
    ]
    table = LeRobotDataset(root).load_tabular()
    action = np.asarray(table["action"], dtype=np.float64)
    state = np.asarray(table["observation.state"], dtype=np.float64)
    assert action.shape == (12, 4) and np.all(action[:, 3] == 1.0)  # the operator closed the gripper
    assert state[5, -1] > 0.9 and state[0, -1] < 0.1  # measured closure: open at home, closed at the end

    recorded = len(xarm_emu.servo_log)
    train = [
        "--bc.steps=5",
        "--bc.batch_size=8",
        "--policy.hidden_dims=[32,32]",
        "--policy.horizon=4",
        "--seeds=[0]",
        "--data.num_workers=0",
    ]
    assert main(["train", "--algo", "bc", *robot, *train]) == 0
    assert main(["eval", "--algo", "bc", *robot, *train, "--eval.episodes_per_seed=1"]) == 0
    report = json.loads((tmp_path / "run" / "eval" / "bc_seed0.json").read_text())
    assert report["summary"]["num_episodes"] == 1
    assert len(xarm_emu.servo_log) > recorded  # the policy drove the arm
    assert all(s.executed and s.step_m <= SERVO_STEP_MAX_M for s in xarm_emu.servo_log)
    assert xarm_emu.unknown_registers == set()
