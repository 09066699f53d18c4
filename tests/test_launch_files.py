"""launch/*.launch.xml as data: every file parses, every node's executable and parameter is one the node
code declares (the node registry), the ament package installs exactly them, and the described nodes and
executables, started as processes over cyclonedds (loopback, a domain of their own), put messages on the
expected topics."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from launch_files import LAUNCH, executable_command, node_command, read

from robot_rl.hardware.ros2 import registry
from robot_rl.hardware.ros2.node import load_params_file, typed_value

FILES = sorted(LAUNCH.glob("*.launch.xml"))
REQUIRED = {"sim_robot.launch.xml": {"checkpoint": "/x"}, "online_hil.launch.xml": {"config": "c.yaml"}}
REQUIRED["serve_policy.launch.xml"] = REQUIRED["sim_robot.launch.xml"]


def test_the_issue_s_launch_files_exist():
    names = {f.name for f in FILES}
    assert {
        "sim_robot.launch.xml",
        "online_hil.launch.xml",
        "record.launch.xml",
        "serve_policy.launch.xml",
    } <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.parametrize("sim", ["true", "false"])
def test_nodes_and_parameters_match_the_node_registry(path, sim):
    overrides = dict(REQUIRED.get(path.name, {}))
    if "sim" in {a.get("name") for a in ET.parse(path).iter("arg")}:
        overrides["sim"] = sim
    launch = read(path, overrides)
    assert launch.nodes or launch.executables
    for node in launch.nodes:
        declared = registry.parameters(node.exec)  # KeyError names the known executables
        given = {}
        for f in node.param_files:
            assert f.parent == LAUNCH / "params" and f.is_file(), f
            given.update(load_params_file(str(f), node.name))  # as the node reads it
            assert set(yaml_sections(f)) <= {node.name, "/**"}, f"{f.name}: sections for other nodes"
        given.update(node.params)
        assert set(given) <= set(declared), f"{path.name} {node.name}: {set(given) - set(declared)}"
        for name, value in given.items():
            typed_value(node.name, name, value, declared[name])  # ParameterError on a wrong type


def yaml_sections(path: Path) -> list[str]:
    import yaml

    return list(yaml.safe_load(path.read_text()))


def test_every_executable_command_parses_and_its_config_loads():
    from robot_rl.cli.main import _parser
    from robot_rl.config import load_config

    for path in FILES:
        overrides = dict(REQUIRED.get(path.name, {}))
        overrides.pop("config", None)
        if path.name == "online_hil.launch.xml":
            overrides["config"] = str(
                Path(__file__).resolve().parents[1] / "configs/panda_pick_cube_hil.yaml"
            )
        for cmd in read(path, overrides).executables:
            args, rest = _parser().parse_known_args(cmd[1:])
            if args.command in ("online", "record"):
                cfg = load_config(args.config, rest)
                assert cfg.env.robot.driver == "ros2"


def test_the_ament_package_installs_the_registry_s_nodes_and_every_file():
    tree = ast.parse((LAUNCH / "setup.py").read_text())
    nodes = next(
        ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and n.targets[0].id == "NODES"
    )
    assert {k: v.split(":")[0] for k, v in nodes.items()} == registry.NODES
    assert all(v.endswith(":main") for v in nodes.values())
    assert (LAUNCH / "resource/robot_rl").is_file()
    text = (LAUNCH / "package.xml").read_text()
    assert "<name>robot_rl</name>" in text and "<build_type>ament_python</build_type>" in text
    assert "install_scripts=$base/lib/robot_rl" in (LAUNCH / "setup.cfg").read_text()


# -- the described processes over DDS ---------------------------------------------------------------------
pytest.importorskip("cyclonedds")
from ros2_helpers import new_domain, node_flags  # noqa: E402

from robot_rl.hardware.ros2 import msgs  # noqa: E402
from robot_rl.hardware.ros2.node import parse_args  # noqa: E402
from robot_rl.hardware.ros2.transport import make_node  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from online_setup import build_offline_run

    run = tmp_path_factory.mktemp("launch_run")
    build_offline_run(run)
    return str(run / "checkpoints" / "offline_seed0")


def _start_all(path: Path, overrides: dict, domain: int, logs: Path, execs: bool) -> list[subprocess.Popen]:
    """Start the launch file's nodes (and, with ``execs``, its executables) as ``ros2 launch`` would."""
    launch = read(path, overrides)
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    ros2_flags = ["--env.robot.ros2.transport=cyclonedds", "--env.robot.ros2.loopback=true"]
    cmds = [node_command(n, node_flags(domain)) for n in launch.nodes]
    cmds += [executable_command(c, ros2_flags) for c in launch.executables] if execs else []
    procs = []
    for i, cmd in enumerate(cmds):
        log = open(logs / f"{path.stem}_{i}.log", "wb")
        procs.append(
            subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        )
    return procs


def _topics_carry_messages(domain: int, topics: dict[str, type], timeout_s: float) -> dict[str, int]:
    node = make_node("launch_test_listener", parse_args(node_flags(domain), "t"))
    counts = dict.fromkeys(topics, 0)
    for topic, msg_type in topics.items():
        node.subscribe(msg_type, topic, lambda _m, t=topic: counts.__setitem__(t, counts[t] + 1))
    deadline = time.monotonic() + timeout_s
    try:
        while min(counts.values()) < 3 and time.monotonic() < deadline:
            node.spin_once(0.1)
    finally:
        node.close()
    return counts


SIM_TOPICS = {
    "/joint_states": msgs.JointState,
    "/ee_pose": msgs.PoseStamped,
    "/camera/front/image_raw": msgs.Image,
    "/robot_rl/sim/lifted": msgs.Bool,
}
COMMANDS = {"/servo_node/delta_twist_cmds": msgs.TwistStamped}
HIL_TOPICS = {  # the actor's status while it waits for a learner, intervention heartbeat, critic progress
    "/robot_rl/actor/status": msgs.String,
    "/robot_rl/intervention/active": msgs.Bool,
    "/robot_rl/critic/progress": msgs.Float32,
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, overrides, topics",
    [
        ("sim_robot.launch.xml", {"episodes": "0"}, {**SIM_TOPICS, **COMMANDS}),
        ("serve_policy.launch.xml", {"sim": "true"}, {**SIM_TOPICS, **COMMANDS}),
        (
            "record.launch.xml",
            {"sim": "true", "teleop": "sim_human", "num_episodes": "1"},
            SIM_TOPICS | COMMANDS,
        ),
        ("online_hil.launch.xml", {"sim": "true", "with_critic": "true"}, {**SIM_TOPICS, **HIL_TOPICS}),
    ],
)
def test_launched_processes_put_messages_on_the_expected_topics(
    name, overrides, topics, checkpoint, tmp_path
):
    from online_setup import free_address

    overrides = dict(overrides)
    if name in ("sim_robot.launch.xml", "serve_policy.launch.xml"):
        overrides["checkpoint"] = checkpoint
    if name == "serve_policy.launch.xml":
        overrides["address"] = free_address()
    if name == "record.launch.xml":
        overrides["run_dir"] = str(tmp_path / "rec")
        overrides["overrides"] = "--env.max_episode_steps=30"
    if name == "online_hil.launch.xml":  # no learner: the actor waits for one (its status says so)
        from robot_rl.config import CriticConfig
        from robot_rl.rewards.compact import CompactProgressCritic

        overrides["config"] = "''"
        overrides["overrides"] = f"--run_dir={tmp_path / 'run'} --online.address={free_address()}"
        overrides["critic"] = str(tmp_path / "critic")  # the sim camera's size (params/sim_robot.yaml)
        CompactProgressCritic(CriticConfig(cameras=["front"], image_size=96)).save(overrides["critic"])
    path = LAUNCH / name
    domain = new_domain()
    procs = _start_all(path, overrides, domain, tmp_path, execs=name != "online_hil.launch.xml")
    try:
        counts = _topics_carry_messages(domain, topics, timeout_s=180.0)  # start-ups on loaded cores
        logs = "\n".join(f.read_text(errors="replace")[-2000:] for f in sorted(tmp_path.glob("*.log")))
        assert min(counts.values()) >= 3, f"{counts}\n{logs}"
        assert all(p.poll() is None or p.returncode == 0 for p in procs), logs
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
