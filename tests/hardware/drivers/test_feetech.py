"""The Feetech bus driver, the SO-101 robot and the leader arm, through the pty servo-bus emulator: the real
driver code and ``scservo_sdk`` open the pty slave and speak the protocol byte for byte; the arm is MuJoCo."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("mujoco")
from robot_rl.config import RobotConfig  # noqa: E402
from robot_rl.config_checks import robot_problems  # noqa: E402
from robot_rl.hardware.drivers import feetech, so101_model  # noqa: E402
from robot_rl.hardware.drivers.so101 import Calibration, SO101Robot, calibrate  # noqa: E402
from robot_rl.hardware.errors import (  # noqa: E402
    CalibrationError,
    CommandRejected,
    MissingExtraError,
    RobotConnectionError,
    RobotFault,
    RobotTimeoutError,
)
from robot_rl.hardware.factory import make_robot  # noqa: E402
from robot_rl.hardware.robot import Command, CommandMode  # noqa: E402
from robot_rl.runtime.intervention import DeviceError  # noqa: E402
from robot_rl.teleop.leader import LeaderArm  # noqa: E402
from robot_rl_testing.bus_emulator import SYNC_READ, FeetechBusEmulator, checksum, status_packet  # noqa: E402

# A non-trivial mounting: offsets away from 2048 and some servos counting against the URDF axis.
ZERO = (2048, 1500, 2600, 2100, 1900, 2000)
DIRS = (1, -1, 1, -1, 1, 1)
TIMEOUT_S = 0.2
"""Status-packet timeout: generous, as the emulator thread shares two loaded CPU cores with the tests."""


@pytest.fixture
def emu():
    with FeetechBusEmulator(zero_ticks=ZERO, directions=DIRS) as e:
        yield e


@pytest.fixture
def cal_file(emu, tmp_path):
    path = tmp_path / "so101_calibration.json"
    emu.calibration().save(path)
    return path


@pytest.fixture
def robot(emu, cal_file):
    r = SO101Robot(emu.port, cal_file, timeout_s=TIMEOUT_S)
    r.connect()
    yield r
    r.disconnect()


def wait_until(robot_or_fn, target, tol, timeout_s=3.0):
    """Read until ``|q - target| < tol`` or the timeout; returns the last q."""
    t0 = time.monotonic()
    while True:
        q = robot_or_fn()
        if np.abs(q - target).max() < tol or time.monotonic() - t0 > timeout_s:
            return q


def test_packet_bytes_match_feetech_manual():
    # Feetech's manual: ping of id 1 is FF FF 01 02 01 FB; its status answer is FF FF 01 02 00 FC.
    assert checksum([0x01, 0x02, 0x01]) == 0xFB
    assert status_packet(1) == bytes.fromhex("ffff010200fc")
    assert feetech.decode_sign_magnitude(feetech.encode_sign_magnitude(-300, 15), 15) == -300
    assert feetech.encode_sign_magnitude(-1, 15) == 0x8001


def test_forward_kinematics_matches_mujoco_chain():
    emu = FeetechBusEmulator(realtime=False)
    rng = np.random.default_rng(0)
    import mujoco

    for _ in range(20):
        q = rng.uniform(so101_model.JOINT_LOW, so101_model.JOINT_HIGH)
        emu.data.qpos[:] = q
        mujoco.mj_kinematics(emu.model, emu.data)
        pos, quat = so101_model.forward_kinematics(q[:5])
        np.testing.assert_allclose(pos, emu.data.site_xpos[0], atol=1e-9)
        mj_quat = np.zeros(4)
        mujoco.mju_mat2Quat(mj_quat, emu.data.site_xmat[0])
        assert abs(abs(np.dot(quat, mj_quat)) - 1) < 1e-9


def test_connect_read_and_move_through_emulator(emu, robot):
    state = robot.read()
    assert state.joint_pos.shape == (5,) and state.joint_vel.shape == (5,)
    np.testing.assert_allclose(state.joint_pos, emu.joint_positions()[:5], atol=0.01)
    np.testing.assert_allclose(state.ee_pos, emu.ee_position(), atol=0.005)
    assert robot.limits.joint_names == so101_model.ARM_JOINTS
    target = np.array([0.4, -0.5, 0.6, 0.3, -0.8])
    robot.command(Command(CommandMode.JOINT_POSITION, target, gripper=1.0))
    sim_q = wait_until(lambda: emu.joint_positions()[:5], target, 0.02)
    np.testing.assert_allclose(sim_q, target, atol=0.02)  # MuJoCo joints reached the command
    q = wait_until(lambda: robot.read().joint_pos, target, 0.02)
    np.testing.assert_allclose(q, target, atol=0.02)
    wait_until(lambda: np.array([robot.read().gripper]), np.array([1.0]), 0.02)
    assert robot.read().gripper > 0.97
    assert emu.joint_positions()[5] < so101_model.JOINT_LOW[5] + 0.05  # jaw closed at its lower limit
    np.testing.assert_allclose(robot.read().ee_pos, emu.ee_position(), atol=0.005)
    assert emu.counts[SYNC_READ] > 0  # reads go out as one sync-read instruction


def test_safety_layer_keeps_joint_commands_in_the_box_by_the_arm_kinematics(emu, cal_file):
    """``SO101Robot.forward_kinematics`` is the chain ``read()`` reports ``ee_pos`` with (and MuJoCo's
    ``gripperframe`` through the emulator), so ``SafeRobot`` shortens a joint target whose end effector
    lies outside the workspace box before it reaches the bus, instead of braking once the arm is out."""
    from robot_rl.config import SafetyConfig
    from robot_rl.hardware.safety import SafeRobot

    robot = SO101Robot(emu.port, cal_file, timeout_s=TIMEOUT_S)
    with robot:
        state = robot.read()
        np.testing.assert_allclose(robot.forward_kinematics(state.joint_pos), state.ee_pos, atol=1e-12)
        np.testing.assert_allclose(robot.forward_kinematics(state.joint_pos), emu.ee_position(), atol=0.005)
        home = state.ee_pos
    target = np.array([0.4, -0.5, 0.6, 0.3, -0.8])
    low, high = home - 0.03, home + 0.03
    far = robot.forward_kinematics(target)
    assert np.max(np.maximum(low - far, far - high)) > 0.05  # the target's end effector is far outside
    cfg = SafetyConfig(workspace_low=list(low), workspace_high=list(high), watchdog_ms=0, estop_signal="")
    worst = 0.0
    with SafeRobot(robot, cfg) as safe:
        for _ in range(45):  # 1.5 s at the arm's 30 Hz
            safe.command(Command(CommandMode.JOINT_POSITION, target))
            time.sleep(1.0 / robot.limits.control_hz)
            ee = emu.ee_position()
            worst = max(worst, float(np.max(np.maximum(low - ee, ee - high))))
        assert safe.counters.clipped > 0
    assert worst < 0.01, f"the end effector left the box by {worst:.4f} m"


def test_commands_are_checked_and_clipped_to_calibrated_range(emu, robot):
    with pytest.raises(CommandRejected, match="shape"):
        robot.command(Command(CommandMode.JOINT_POSITION, np.zeros(6)))
    with pytest.raises(CommandRejected, match="NaN"):
        robot.command(Command(CommandMode.JOINT_POSITION, np.full(5, np.nan)))
    with pytest.raises(CommandRejected, match="not supported"):
        robot.command(Command(CommandMode.EE_DELTA, np.zeros(3)))
    robot.command(Command(CommandMode.JOINT_POSITION, np.array([5.0, 0, 0, 0, 0])))
    q = wait_until(lambda: emu.joint_positions()[:1], robot.limits.joint_high[:1], 0.02)
    assert abs(q[0] - robot.limits.joint_high[0]) < 0.02


@pytest.mark.parametrize(
    ("fault", "error", "words"),
    [
        ({"silent": True}, RobotTimeoutError, ["servo 3", "did not answer"]),
        ({"delay_s": 0.5}, RobotTimeoutError, ["servo 3", "did not answer"]),
        ({"bad_checksum": True}, RobotFault, ["servo 3", "checksum"]),
        ({"error_flags": 4 | 32}, RobotFault, ["servo 3", "overheat", "overload"]),
    ],
)
def test_injected_bus_errors_are_typed_and_name_the_servo(emu, robot, fault, error, words):
    robot.read()
    emu.inject(3, **fault)
    with pytest.raises(error) as info:
        robot.read()
    assert all(w in str(info.value) for w in words), str(info.value)
    assert emu.port in str(info.value)
    emu.clear_faults()
    time.sleep(0.6)  # a late answer lands now; the next transaction must not take it for its own
    np.testing.assert_allclose(robot.read().joint_pos, emu.joint_positions()[:5], atol=0.01)


def test_late_answers_are_not_taken_for_the_next_reading(emu, robot):
    emu.inject(1, delay_s=0.5)  # servo 1 answers late: after the driver gave up, before its next read
    with pytest.raises(RobotTimeoutError, match="servo 1"):
        robot.read()
    emu.clear_faults()
    target = np.array([0.5, -0.5, 0.5, -0.5, 0.5])
    robot.command(Command(CommandMode.JOINT_POSITION, target))
    wait_until(lambda: emu.joint_positions()[:5], target, 0.02)  # the stale answers are in the buffer now
    np.testing.assert_allclose(robot.read().joint_pos, emu.joint_positions()[:5], atol=0.01)


def test_servo_missing_at_connect_names_it(emu, cal_file):
    emu.inject(5, silent=True)
    with pytest.raises(RobotTimeoutError, match="servo 5"):
        SO101Robot(emu.port, cal_file, timeout_s=TIMEOUT_S).connect()


def test_missing_port_names_it(cal_file):
    with pytest.raises(RobotConnectionError, match="/dev/ttyNO_SUCH_PORT.*no such device"):
        SO101Robot("/dev/ttyNO_SUCH_PORT", cal_file).connect()


def test_busy_port_held_by_another_process(emu, cal_file):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({emu.port!r}, os.O_RDWR | os.O_NOCTTY)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(30)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RobotConnectionError, match=f"{emu.port}.*busy"):
            SO101Robot(emu.port, cal_file, timeout_s=TIMEOUT_S).connect()
    finally:
        holder.kill()
        holder.wait()


def test_busy_port_held_by_another_robot(robot, emu, cal_file):
    with pytest.raises(RobotConnectionError, match=f"{emu.port}.*busy"):
        SO101Robot(emu.port, cal_file, timeout_s=TIMEOUT_S).connect()


def test_link_lost_mid_run(emu, robot):
    robot.read()
    emu.stop()
    with pytest.raises(RobotConnectionError, match=emu.port):
        robot.read()


def _edit(path, fn):
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda d: d["joints"].pop("wrist_roll"), "missing ['wrist_roll']"),
        (lambda d: d["joints"].update(elbow=d["joints"].pop("elbow_flex")), "unknown ['elbow']"),
        (lambda d: d["joints"]["gripper"].update(id=1), "ids repeat"),
        (lambda d: d["joints"]["gripper"].pop("direction"), "joints.gripper must have exactly the keys"),
        (lambda d: d["joints"]["elbow_flex"].update(direction=2), "joints.elbow_flex: direction 2"),
        (lambda d: d["joints"]["elbow_flex"].update(range_min=5000), "range_min=5000"),
        (lambda d: d.update(robot="koch"), "expected {'robot': 'so101'"),
    ],
)
def test_malformed_calibration_file_names_file_and_key(cal_file, edit, words):
    _edit(cal_file, edit)
    with pytest.raises(CalibrationError) as info:
        Calibration.load(cal_file)
    assert str(cal_file) in str(info.value) and words in str(info.value), str(info.value)


def test_missing_or_unreadable_calibration_file(tmp_path):
    with pytest.raises(CalibrationError, match="not found"):
        SO101Robot("/dev/null", tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CalibrationError, match="bad.json.*not readable JSON"):
        Calibration.load(tmp_path / "bad.json")


def test_calibration_of_another_arm_is_refused_at_connect(emu, cal_file):
    _edit(
        cal_file,
        lambda d: d["joints"]["shoulder_lift"].update(zero_ticks=3900, range_min=3000, range_max=4000),
    )
    with pytest.raises(CalibrationError, match=f"{cal_file}.*shoulder_lift.*outside its calibrated range"):
        SO101Robot(emu.port, cal_file, timeout_s=TIMEOUT_S).connect()


def test_calibration_listing_other_servo_ids_is_refused_at_connect(tmp_path):
    with FeetechBusEmulator(ids=(1, 2, 3, 4, 5, 7)) as bus7:
        path = tmp_path / "cal.json"
        FeetechBusEmulator().calibration().save(path)  # ids 1..6
        with pytest.raises(CalibrationError, match=f"{path}.*servo 7, which it does not list"):
            SO101Robot(bus7.port, path, timeout_s=TIMEOUT_S).connect()


def test_calibrate_records_zero_and_ranges(emu, tmp_path):
    sweep = [np.zeros(6)]
    for s in (1.0, -1.0):
        sweep.append(np.where(s > 0, so101_model.JOINT_HIGH, so101_model.JOINT_LOW) * 0.9)
    sweep.append(np.zeros(6))
    poses = iter(sweep)

    def person_moves_arm() -> bool:
        q = next(poses, None)
        if q is None:
            return False
        emu.move_by_hand(q)
        time.sleep(0.05)
        return True

    path = tmp_path / "recorded.json"
    cal = calibrate(
        emu.port,
        path,
        directions=DIRS,
        wait_for_zero_pose=lambda: None,
        keep_recording=person_moves_arm,
        timeout_s=TIMEOUT_S,
    )
    truth = emu.calibration()
    for name in so101_model.JOINT_NAMES:
        got, want = cal.joints[name], truth.joints[name]
        assert abs(got.zero_ticks - want.zero_ticks) <= 12, name  # the limp arm sags ~0.01 rad in a hand
        low, high = got.angle_range()
        i = so101_model.JOINT_NAMES.index(name)
        assert (
            abs(low - 0.9 * so101_model.JOINT_LOW[i]) < 0.02
            and abs(high - 0.9 * so101_model.JOINT_HIGH[i]) < 0.02
        )
    assert Calibration.load(path) == cal


def test_calibrate_refuses_a_joint_that_did_not_move(emu, tmp_path):
    with pytest.raises(CalibrationError, match="shoulder_pan.*moved only"):
        calibrate(
            emu.port, tmp_path / "c.json", wait_for_zero_pose=lambda: None, keep_recording=lambda: False
        )


def test_leader_drives_follower_joint_to_joint(tmp_path):
    with (
        FeetechBusEmulator(zero_ticks=ZERO, directions=DIRS) as leader_bus,
        FeetechBusEmulator(zero_ticks=(2048,) * 6, directions=(1, 1, -1, 1, -1, 1)) as follower_bus,
    ):
        leader_bus.calibration().save(tmp_path / "leader.json")
        follower_bus.calibration().save(tmp_path / "follower.json")
        follower = SO101Robot(follower_bus.port, tmp_path / "follower.json", timeout_s=TIMEOUT_S)
        leader = LeaderArm.from_config(
            RobotConfig(driver="so101", port=leader_bus.port, calibration=str(tmp_path / "leader.json")),
            follower.limits,
            timeout_s=TIMEOUT_S,
        )
        with follower, leader:
            leader.reset(env_seed=0)
            with pytest.raises(CommandRejected, match="leader"):
                leader.arm.command(Command(CommandMode.JOINT_POSITION, np.zeros(5)))
            for pose in (
                np.array([0.5, -0.6, 0.7, -0.4, 1.0, 1.2]),
                np.array([-0.3, 0.4, -0.5, 0.6, -1.0, 0.0]),
            ):
                leader_bus.move_by_hand(pose)  # limp leader stays where the person puts it
                act = leader.poll({}).action
                assert act.shape == (6,) and act.dtype == np.float32
                np.testing.assert_allclose(act[:5], pose[:5], atol=0.02)  # a limp arm sags a little
                follower.command(
                    Command(CommandMode.JOINT_POSITION, act[:5].astype(np.float64), gripper=act[5])
                )

                def follower_q():
                    state = follower.read()
                    return np.append(state.joint_pos, state.gripper)

                q = wait_until(follower_q, act, 0.015)
                np.testing.assert_allclose(q, act, atol=0.02)  # follower joints and gripper = leader's
                np.testing.assert_allclose(follower_bus.joint_positions()[:5], act[:5], atol=0.02)
                np.testing.assert_allclose(leader_bus.joint_positions(), pose, atol=0.02)  # stays put
            leader_bus.inject(2, silent=True)
            with pytest.raises(DeviceError, match=f"leader arm on '{leader_bus.port}'.*servo 2"):
                leader.poll({})


def test_config_factory_and_missing_extra(emu, cal_file, monkeypatch):
    cfg = RobotConfig(driver="so101", port=emu.port, calibration=str(cal_file))
    robot = make_robot(cfg)
    assert isinstance(robot, SO101Robot) and not robot.is_connected
    assert robot_problems(cfg) == []
    problems = robot_problems(RobotConfig(driver="so101"))
    assert any("env.robot.port" in p for p in problems) and any(
        "env.robot.calibration" in p for p in problems
    )
    with pytest.raises(ValueError, match="env.robot.port"):
        SO101Robot.from_config(RobotConfig(driver="so101", calibration=str(cal_file)))
    monkeypatch.setitem(sys.modules, "scservo_sdk", None)
    with pytest.raises(MissingExtraError, match=r"robot-rl\[feetech\]"):
        robot.connect()


def test_connect_sets_lerobot_gains_and_jaw_limits(emu, robot):
    """LeRobot's SO follower values land in every servo's control table (STS3215 addresses from Feetech's
    memory table), the jaw's limits only on the jaw, and the arm holds with torque on afterwards."""

    def reg(servo_id, address, size=1):
        return int.from_bytes(emu.servos[servo_id].table[address : address + size], "little")

    ids = robot.calibration.ids
    for servo_id in ids:
        # Operating_Mode 33, P 21, I 23, D 22, Torque_Enable 40
        assert [reg(servo_id, a) for a in (33, 21, 23, 22, 40)] == [0, 16, 0, 32, 1]
    jaw_limits = ((16, 2), (28, 2), (36, 1))  # Max_Torque_Limit, Protection_Current, Overload_Torque
    assert [reg(ids[5], *r) for r in jaw_limits] == [500, 250, 25]
    assert [reg(ids[0], *r) for r in jaw_limits] == [0, 0, 0]  # the arm joints keep their own limits
