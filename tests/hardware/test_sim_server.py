"""The MuJoCo-backed robot server as a real subprocess on localhost, and its clients SimServerRobot and
SimServerCamera: real-time motion, injected latency and drops, a killed server, malformed messages."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time

import msgpack
import numpy as np
import pytest
import zmq

from robot_rl.hardware import wire
from robot_rl.hardware.drivers.sim_server import SimServerCamera, SimServerRobot
from robot_rl.hardware.errors import (
    CameraError,
    CommandRejected,
    HardwareError,
    RobotConnectionError,
    RobotTimeoutError,
)
from robot_rl.hardware.robot import Command, CommandMode
from robot_rl.hardware.sim_server import PROTOCOL, SimServerFaults, serve_in_subprocess


@pytest.fixture(scope="module")
def gl_backend() -> str | None:
    """The offscreen GL backend, exported as MUJOCO_GL for the server subprocesses; None if there is none."""
    from robot_rl.sim.render import RendererError, select_backend

    try:
        return select_backend()
    except RendererError:
        return None


@pytest.fixture(scope="module")
def server(gl_backend):
    with serve_in_subprocess() as srv:
        yield srv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rtts(robot: SimServerRobot, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        robot.ping()
        out.append(time.perf_counter() - start)
    return out


def test_arm_moves_in_real_time(server):
    from robot_rl.config import RobotConfig
    from robot_rl.hardware.factory import make_robot

    robot = make_robot(RobotConfig(driver="sim_server", address=server.address, timeout_s=2.0))
    assert isinstance(robot, SimServerRobot) and robot.timeout_s == 2.0
    with pytest.raises(RobotConnectionError, match="not connected"):
        robot.command(Command(CommandMode.EE_DELTA, np.zeros(3)))
    with robot:
        assert robot.limits.control_hz == 10.0 and robot.limits.num_joints == 7
        assert CommandMode.EE_DELTA in robot.modes
        start = robot.read()
        assert start.joint_pos.shape == (7,) and start.extra["environment_state"].shape == (7,)
        robot.reset_scene(seed=3)
        t0, steps0 = time.monotonic(), robot.ping()["stats"]["physics_steps"]
        for _ in range(5):  # 5 target moves down, then no more commands: the arm keeps tracking alone
            robot.command(Command(CommandMode.EE_DELTA, np.array([0.0, 0.0, -0.03]), gripper=1.0))
        first = robot.read()
        time.sleep(0.6)
        later = robot.read()
        wall, steps = time.monotonic() - t0, robot.ping()["stats"]["physics_steps"] - steps0
    assert first.ee_pos[2] > later.ee_pos[2] + 0.02, (first.ee_pos, later.ee_pos)  # moved with no client step
    assert later.gripper > first.gripper
    assert 0.7 * wall <= steps / 500.0 <= 1.05 * wall, (steps, wall)  # physics ran at wall-clock rate
    assert later.timestamp > first.timestamp


def test_latency_shows_in_round_trips_and_late_replies_are_ignored(server):
    with SimServerRobot(server.address) as fast:
        base = float(np.median(_rtts(fast, 20)))
    with serve_in_subprocess(SimServerFaults(latency_ms=40, jitter_ms=20, seed=1)) as slow_srv:
        with SimServerRobot(slow_srv.address, timeout_s=1.0) as slow:
            rtts = _rtts(slow, 15)
            assert min(rtts) >= 0.040 and float(np.median(rtts)) <= 0.060 + base + 0.03, rtts
            slow.timeout_s = 0.02  # shorter than the latency: the reply comes after the deadline
            with pytest.raises(RobotTimeoutError, match=slow_srv.address):
                slow.read()
            slow.timeout_s = 1.0  # the late reply to the timed-out read arrives first and is skipped
            assert slow.ping()["stats"]["requests"] >= 17
    assert base < 0.01, base


def test_dropped_request_times_out_and_the_next_one_works():
    with serve_in_subprocess(SimServerFaults(drop_prob=0.5, seed=0)) as srv:
        robot = SimServerRobot(srv.address, timeout_s=0.2)
        while True:  # the hello itself may be dropped
            try:
                robot.connect()
                break
            except RobotTimeoutError:
                pass
        outcomes = []
        for _ in range(16):
            try:
                outcomes.append(robot.read().joint_pos.shape == (7,))
            except RobotTimeoutError as err:
                assert srv.address in str(err) and "'read'" in str(err)
                outcomes.append(False)
        robot.disconnect()
    pairs = list(zip(outcomes, outcomes[1:], strict=False))
    assert (False, True) in pairs, outcomes  # a request right after a dropped one is answered
    assert 3 <= outcomes.count(False) <= 13, outcomes


def test_killed_server_gives_connection_error_within_timeout():
    with serve_in_subprocess(SimServerFaults(latency_ms=300)) as srv:
        robot = SimServerRobot(srv.address, timeout_s=1.5)
        robot.connect()
        robot.read()
        killer = threading.Timer(0.1, srv.process.send_signal, (signal.SIGKILL,))
        killer.start()  # dies while the next read waits out the latency: the drop is seen at once
        start = time.monotonic()
        with pytest.raises(RobotConnectionError, match=f"lost the connection.*{srv.address}.*'read'"):
            robot.read()
        assert time.monotonic() - start < 0.6
        killer.join()
        srv.process.wait()
        start = time.monotonic()
        with pytest.raises(RobotConnectionError, match=f"no connection.*{srv.address}") as info:
            robot.read()
        assert time.monotonic() - start <= 1.7
        assert not isinstance(info.value, RobotTimeoutError), info.value
        with serve_in_subprocess(address=srv.address):  # restarted on the same port: the link recovers
            assert robot.read().joint_pos.shape == (7,)
        robot.disconnect()  # safe with the server gone


def test_unreachable_server_refuses_to_connect():
    address = f"tcp://127.0.0.1:{_free_port()}"
    robot = SimServerRobot(address, timeout_s=0.3)
    with pytest.raises(RobotConnectionError, match=address):
        robot.connect()
    camera = SimServerCamera("front", address, "front", 32)
    with pytest.raises(CameraError, match="'front'"):
        camera.connect(timeout_s=0.3)


def _raw_request(sock: zmq.Socket, frames: list[bytes]) -> dict:
    sock.send_multipart(frames)
    assert sock.poll(2000), "no reply to a malformed message"
    return wire.unpack(sock.recv_multipart()[-1])


def _req(op: str, **fields) -> bytes:
    return wire.pack({"op": op, "id": 7, "protocol": PROTOCOL, **fields})


BAD_MESSAGES = [
    [b"\xc1garbage"],
    [msgpack.packb([1, 2, 3])],
    [msgpack.packb({"op": "read"})],
    [msgpack.packb({1: 2})],
    [wire.pack({"op": "read", "id": 1, "protocol": 99})],
    [wire.pack({"op": "self_destruct", "id": 1, "protocol": PROTOCOL})],
    [wire.pack({"op": "read", "id": "x", "protocol": PROTOCOL})],
    [wire.pack({"op": "read", "id": True, "protocol": PROTOCOL})],
    [_req("read", extra=1)],
    [_req("read"), b"second frame"],
    [_req("command", mode="ee_delta", value=np.array([0.0, np.nan, 0.0]), gripper=None)],
    [_req("command", mode="ee_delta", value=np.array([0.0, 0.0, np.inf]), gripper=None)],
    [_req("command", mode="ee_delta", value=np.zeros(4), gripper=None)],
    [_req("command", mode="ee_delta", value=np.full(3, 0.03), gripper=2.0)],
    [_req("command", mode="ee_delta", value=np.full(3, 0.03), gripper=True)],
    [_req("command", mode="ee_velocity", value=np.zeros(6), gripper=None)],
    [_req("command", mode="ee_delta", value=[0.03, 0.0, 0.0], gripper=None)],
    [_req("command", mode="ee_delta", value=np.array([True, False, True]), gripper=None)],
    [_req("command", mode="joint_position", value=np.zeros(6), gripper=None)],
    [_req("command", mode="ee_delta", gripper=None)],  # no value
    [
        msgpack.packb(
            {
                "op": "command",
                "id": 3,
                "protocol": PROTOCOL,
                "mode": "ee_delta",
                "gripper": None,
                "value": {"__ndarray__": True, "dtype": "|O", "shape": [3], "data": b"\0" * 24},
            }
        )
    ],
    [
        msgpack.packb(
            {
                "op": "command",
                "id": 3,
                "protocol": PROTOCOL,
                "mode": "ee_delta",
                "gripper": None,
                "value": {"__ndarray__": True, "dtype": "<f8", "shape": [3000], "data": b"\0" * 24},
            }
        )
    ],
    [msgpack.packb({"op": "read", "id": 1, "protocol": PROTOCOL, "t": msgpack.ExtType(5, b"x")})],
    [msgpack.packb({"op": "reset_scene", "id": 1, "protocol": PROTOCOL, "seed": -1})],
    [_req("render", camera="ceiling", size=32)],
    [_req("render", camera="front", size=100000)],
    [b"[" * 1000],
    [msgpack.packb([[[[[[[[[[[[]]]]]]]]]]]] * 10)],
]


def test_malformed_messages_get_error_replies_and_change_nothing(server):
    with SimServerRobot(server.address) as robot:
        robot.reset_scene(seed=0)
        time.sleep(0.3)  # let the arm settle at home
        before, errors_before = robot.read(), robot.ping()["stats"]["errors"]
        sock = zmq.Context.instance().socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(server.address)
        try:
            for frames in BAD_MESSAGES:
                reply = _raw_request(sock, frames)
                assert reply["ok"] is False and reply["error"], (frames, reply)
            with pytest.raises(CommandRejected, match="NaN"):  # the client checks before sending, too
                robot.command(Command(CommandMode.EE_DELTA, np.array([np.nan, 0.0, 0.0])))
            with pytest.raises(HardwareError, match="seed"):
                robot.reset_scene(seed=2**40)
            time.sleep(0.2)
            after = robot.read()
            assert robot.ping()["stats"]["errors"] == errors_before + len(BAD_MESSAGES) + 1
            # too big for MAXMSGSIZE: ZeroMQ drops that peer; the server does not notice and goes on
            sock.send(b"\0" * (1 << 20))
            assert not sock.poll(300)
        finally:
            sock.close()
        assert np.abs(after.ee_pos - before.ee_pos).max() < 0.005, (before.ee_pos, after.ee_pos)
        assert after.gripper < 0.05
        assert robot.read().joint_pos.shape == (7,)  # still serving


def test_camera_renders_and_times_out(server, gl_backend):
    from robot_rl.config import CameraConfig, RobotConfig

    if gl_backend is None:
        pytest.skip("no offscreen GL backend on this machine (install libegl1 or libosmesa6)")
    cfg = RobotConfig(driver="sim_server", address=server.address)
    cam = SimServerCamera.from_config("front", CameraConfig(driver="sim", source="front"), cfg)
    with cam:
        assert cam.size == 128  # 480 asked, the server renders at most 128 pixels
        frame = cam.read(timeout_s=10.0)  # the first render initialises GL (about a second)
    assert frame.image.dtype == np.uint8 and frame.image.shape == (128, 128, 3)
    assert frame.image.std() > 5
    wrist = SimServerCamera("wrist", server.address, "wrist", 32)
    with wrist:
        assert wrist.read(timeout_s=5.0).image.shape == (32, 32, 3)
        with pytest.raises(CameraError, match="'wrist'.*did not answer"):
            wrist.read(timeout_s=0.0005)
    with pytest.raises(CameraError, match="no such camera"):
        SimServerCamera("top", server.address, "top", 32).connect()
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(server.address)
    try:  # a read sent right after a render is answered first: renders run in their own thread
        sock.send(wire.pack({"op": "render", "id": 1, "protocol": PROTOCOL, "camera": "front", "size": 128}))
        sock.send(wire.pack({"op": "read", "id": 2, "protocol": PROTOCOL}))
        order = []
        for _ in range(2):
            assert sock.poll(10000)
            reply = wire.unpack(sock.recv())
            assert reply["ok"], reply
            order.append(reply["id"])
        assert order == [2, 1]
    finally:
        sock.close()


def test_camera_without_gl_names_the_camera_and_the_fix(monkeypatch):
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.delenv("PYOPENGL_PLATFORM", raising=False)
    monkeypatch.setenv("ROBOT_RL_GL", "nonexistent")  # the server finds no GL backend
    with serve_in_subprocess() as srv:
        cam = SimServerCamera("front", srv.address, "front", 32)
        cam.connect(timeout_s=30.0)  # the default 1 s 'hello' timed out once on a loaded CI machine
        with cam:
            for _ in range(2):  # every frame gets the error, not a timeout
                with pytest.raises(CameraError, match="'front'.*no offscreen OpenGL backend.*libegl1"):
                    cam.read(timeout_s=5.0)
            with SimServerRobot(srv.address) as robot:
                assert robot.read().joint_pos.shape == (7,)  # the robot side keeps serving


def test_curve_keys_admit_only_known_clients(tmp_path):
    from robot_rl.config import ConfigError
    from robot_rl.hardware.sim_server import SimServer
    from robot_rl.security import load_client_keys, make_keys

    with pytest.raises(ConfigError, match="--address=tcp://0.0.0.0:5570 binds a non-loopback"):
        SimServer("tcp://0.0.0.0:5570")
    make_keys(tmp_path / "keys", ["robot"])
    make_keys(tmp_path / "other", ["robot"])  # same name, keys the server does not know
    with serve_in_subprocess(extra_args=(f"--keys={tmp_path / 'keys'}",)) as srv:
        with SimServerRobot(srv.address, keys=load_client_keys(tmp_path / "keys", "robot")) as robot:
            assert robot.read().joint_pos.shape == (7,)
        for keys in (None, load_client_keys(tmp_path / "other", "robot")):
            with pytest.raises(RobotConnectionError, match=srv.address):
                SimServerRobot(srv.address, timeout_s=0.3, keys=keys).connect()


def test_cli_rejects_bad_fault_flags():
    cmd = [sys.executable, "-m", "robot_rl.cli.main", "hardware", "sim-server", "--drop-prob=1.5"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--drop-prob=1.5" in out.stderr, out.stderr
    with pytest.raises(ValueError, match="--jitter-ms"):
        SimServerFaults(jitter_ms=-1)


def test_wire_round_trips_arrays_and_refuses_other_objects():
    arrays = {
        "image": np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3),
        "f32": np.linspace(0, 1, 4, dtype=np.float32)[::2],  # not contiguous
        "flags": np.array([True, False]),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 7)),
    }
    back = wire.unpack(wire.pack({"a": arrays, "n": np.float64(1.5), "s": "x"}))
    for key, arr in arrays.items():
        got = back["a"][key]
        assert got.dtype == arr.dtype and got.shape == arr.shape and np.array_equal(got, arr)
        assert got.flags.writeable
    assert back["n"] == 1.5 and back["s"] == "x"
    with pytest.raises(TypeError, match="object"):
        wire.pack({"a": np.array([None, 1], dtype=object)})
    with pytest.raises(TypeError, match="set"):
        wire.pack({"a": {1, 2}})


def test_config_keys_reach_the_robot_and_camera_clients_off_loopback(tmp_path):
    """``env.robot.keys``/``client_key`` give SimServerRobot and SimServerCamera their CURVE keys, so a
    RobotEnv built from config runs against a server bound off loopback (``0.0.0.0``, reached as
    ``tcp://0.0.0.0:PORT``: not a loopback address to the check, yet local)."""
    from robot_rl.config import CameraConfig, ConfigError, EnvConfig, RobotConfig
    from robot_rl.hardware.robot_env import RobotEnv
    from robot_rl.security import make_keys

    make_keys(tmp_path / "keys", ["robot"])
    with serve_in_subprocess(address="tcp://0.0.0.0:0", extra_args=(f"--keys={tmp_path / 'keys'}",)) as srv:
        address = "tcp://0.0.0.0:" + srv.address.rsplit(":", 1)[1]
        robot = RobotConfig(
            driver="sim_server",
            address=address,
            keys=str(tmp_path / "keys"),
            cameras={"front": CameraConfig(driver="sim", source="front", width=64, height=64)},
        )
        env = RobotEnv.from_config(EnvConfig(num_envs=1, robot=robot))
        try:
            obs, _ = env.reset(seed=0)
            obs, *_ = env.step(np.array([0.0, 0.0, -0.01, 0.0], np.float32))
            assert obs["observation.state"].shape == (22,)
        finally:
            env.close()
        camera = SimServerCamera.from_config("front", robot.cameras["front"], robot)
        camera.connect(timeout_s=30.0)  # CURVE-encrypted hello too; 1 s timed out on a loaded CI machine
        camera.disconnect()
        with pytest.raises(ConfigError, match=rf"env.robot.address={address} connects to a non-loopback "):
            SimServerRobot.from_config(RobotConfig(driver="sim_server", address=address)).connect()
        with pytest.raises(ConfigError, match=r"env.robot.keys: .*arm.key_secret not found"):
            SimServerRobot.from_config(RobotConfig(address=address, keys=robot.keys, client_key="arm"))
