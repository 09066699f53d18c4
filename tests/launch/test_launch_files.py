"""launch/*.launch.xml as ROS 2's launch reads them (tests/launch_files.py follows launch's own rules: a
command line is split before substitution): the reader's rules on small launch files of its own; every
launch file's defaults and documented examples (its header comment, its arguments' descriptions,
launch/README.md) through the real parsers (robot-rl's command line and config for ``<executable>``s, the
nodes' command-line and parameter reader and run config for ``<node>``s); every node's executable and
parameter against the node registry; the ament package; and the described nodes and executables, started as
processes over cyclonedds (loopback, a domain of their own), putting messages on the expected topics."""

from __future__ import annotations

import ast
import os
import re
import shlex
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from launch_files import LAUNCH, executable_command, node_command, read

from robot_rl.cli.main import parse_command_line
from robot_rl.config import load_config
from robot_rl.deploy.ros2 import registry
from robot_rl.hardware.ros2.node import check_declared, load_params_file, parse_args, robot_run_config

ROOT = LAUNCH.parent
FILES = sorted(LAUNCH.glob("*.launch.xml"))
REQUIRED = {"sim_robot.launch.xml": {"checkpoint": "/x"}, "online_hil.launch.xml": {"config": "''"}}
REQUIRED["serve_policy.launch.xml"] = REQUIRED["sim_robot.launch.xml"]


def test_the_issue_s_launch_files_exist():
    names = {f.name for f in FILES}
    assert {
        "sim_robot.launch.xml",
        "online_hil.launch.xml",
        "record.launch.xml",
        "serve_policy.launch.xml",
    } <= names


# -- the reader follows launch's rules ----------------------------------------------------------------------
def _write(folder: Path, body: str, name: str = "t.launch.xml") -> Path:
    path = folder / name
    path.write_text(f'<?xml version="1.0"?>\n<launch>\n{body}\n</launch>\n')
    return path


def test_a_command_line_is_split_before_substitution(tmp_path):
    """ExecuteProcess._parse_cmdline: only literal text splits; a $(var) is one argument, empty or not."""
    path = _write(
        tmp_path,
        """<arg name="a" default=""/><arg name="d" default="my runs/x"/>
        <executable cmd="prog $(var a) --run_dir=$(var d) $(var a)$(var a)x  'q r' --k=&quot;s t&quot;"/>""",
    )
    assert read(path).executables[0].cmd == ["prog", "", "--run_dir=my runs/x", "x", "q r", "--k=s t"]
    cmd = read(path, {"a": "--p=1 --q=2"}).executables[0].cmd
    assert cmd[1] == "--p=1 --q=2" and cmd[3] == "--p=1 --q=2--p=1 --q=2x"
    quoted = _write(tmp_path, """<executable cmd="prog '$(find-pkg-share robot_rl) x'"/>""", "q.launch.xml")
    with pytest.raises(ValueError, match=r"q.launch.xml <executable> attribute 'cmd': No closing quotation"):
        read(quoted)


def test_a_node_gets_launch_ros_arguments_and_a_params_file_per_inline_param(tmp_path):
    path = _write(
        tmp_path,
        """<arg name="topic" default="/cmd"/>
        <node pkg="robot_rl" exec="policy_node" name="p" args="x:=1 $(var topic)" ros_args="--log-level warn">
          <param from="$(find-pkg-share robot_rl)/params/policy.yaml"/>
          <param name="overrides" value="--a=1 --b=2"/><param name="episodes" value="3"/>
          <param name="sim_prefix" value="''"/><param name="config" value=""/>
          <remap from="/servo_node/delta_twist_cmds" to="$(var topic)"/><env name="E" value="$(var topic)"/>
        </node>""",
    )
    node = read(path).nodes[0]
    files = [node.argv[i + 1] for i, a in enumerate(node.argv) if a == "--params-file"]
    assert node.argv[:8] == [
        "x:=1",
        "/cmd",
        "--ros-args",
        "--log-level",
        "warn",
        "--ros-args",
        "-r",
        "__node:=p",
    ]
    assert node.argv[-2:] == ["-r", "/servo_node/delta_twist_cmds:=/cmd"] and node.env == {"E": "/cmd"}
    assert files[0] == str(LAUNCH / "params/policy.yaml") and len(files) == 5
    assert [list(yaml.safe_load(Path(f).read_text())) for f in files[1:]] == [["/**"]] * 4
    params = {k: v for f in files for k, v in load_params_file(f, "p").items()}  # as the node reads them
    assert params["overrides"] == "--a=1 --b=2" and params["episodes"] == 3
    assert params["sim_prefix"] == "" and params["config"] == ""


def test_a_namespaced_node_reads_its_inline_params_from_the_namespaced_section(tmp_path):
    """launch_ros files a namespaced node's inline params under /NS/NAME; the node's own reader finds them
    (before: that section was not read, so every inline parameter of a namespaced node was lost)."""
    path = _write(
        tmp_path,
        """<node pkg="robot_rl" exec="policy_node" name="p" namespace="arm">
          <param name="episodes" value="3"/>
        </node>""",
    )
    node = read(path).nodes[0]
    assert node.argv[:5] == ["--ros-args", "-r", "__node:=p", "-r", "__ns:=/arm"]
    inline = node.argv[node.argv.index("--params-file") + 1]
    assert list(yaml.safe_load(Path(inline).read_text())) == ["/arm/p"]
    args = parse_args(node.argv, "policy_node")  # as the node process parses its command line
    assert args.params == {"episodes": 3} and ("__ns", "/arm") in args.remaps


def test_let_group_include_and_set_env_scope_as_launch_does(tmp_path):
    _write(
        tmp_path,
        """<arg name="who"/><arg name="n" default="1"/>
        <executable cmd="inc $(var who) $(var n) $(var outer)"/><let name="leak" value="yes"/>""",
        "inc.launch.xml",
    )
    path = _write(
        tmp_path,
        f"""<arg name="use" default="true"/><let name="outer" value="o"/><set_env name="V" value="1"/>
        <group if="$(var use)"><let name="outer" value="in"/><set_env name="V" value="2"/>
          <executable cmd="g $(var outer)"><env name="W" value="w"/></executable></group>
        <group scoped="false"><let name="outer" value="unscoped"/></group>
        <group unless=" TRUE "><executable cmd="never"/></group>
        <group><keep name="k" value="kept"/><executable cmd="k $(var k)"/></group>
        <include file="{tmp_path}/inc.launch.xml"><arg name="who" value="$(var outer)"/></include>
        <executable cmd="after $(var leak) $(var outer)"/>""",
    )
    execs = read(path).executables
    assert [e.cmd for e in execs] == [
        ["g", "in"],
        ["k", "kept"],
        ["inc", "unscoped", "1", "unscoped"],
        ["after", "yes", "unscoped"],  # an include's arguments and lets stay set after it, as in launch
    ]
    assert execs[0].env == {"V": "2", "W": "w"} and execs[1].env == {"V": "1"}
    assert [e.cmd[0] for e in read(path, {"use": "0"}).executables] == ["k", "inc", "after"]


@pytest.mark.parametrize(
    "body, message",
    [
        ('<executable cmd="x" shell="true"/>', r"<executable> attribute 'shell'"),
        ('<executable cmd="x" launch-prefix="gdb"/>', r"<executable>: attribute 'launch-prefix'"),
        ('<timer period="1"><executable cmd="x"/></timer>', r"<timer>: tag not supported"),
        ('<executable cmd="x $(env HOME)"/>', r"<executable> attribute 'cmd': unsupported substitution"),
        ('<executable cmd="x $(var nope)"/>', r"<executable> attribute 'cmd': .*'nope' does not exist"),
        ('<executable cmd="x" if="yes"/>', r"<executable>: 'yes' is not true, false"),
        ('<arg name="a"/>', r"<arg>: required launch argument 'a'"),
        ('<arg name="a" default="b"><choice value="c"/></arg>', r"<arg>: a:='b' is not one of"),
        ('<group forwarding="false"/>', r"<group> attribute 'forwarding'"),
        (
            '<node pkg="robot_rl" exec="x" name="p"><param name="a" type="str" value="1"/></node>',
            r"<node> <param a>: attribute 'type'",
        ),
        ('<include file="x.launch.py"/>', r"<include> attribute 'file'.*not an XML launch file"),
    ],
)
def test_what_the_reader_does_not_do_is_refused_by_file_tag_and_attribute(tmp_path, body, message):
    with pytest.raises(ValueError, match=r"t\.launch\.xml " + message):
        read(_write(tmp_path, body))


def test_an_undeclared_launch_argument_is_refused():
    with pytest.raises(ValueError, match=r"record.launch.xml: no launch arguments \['overide'\]"):
        read(LAUNCH / "record.launch.xml", {"overide": "--a=1"})


# -- every launch file's defaults and documented examples through the real parsers ------------------------
def _documented() -> list[tuple[str, dict[str, str]]]:
    """(file, launch arguments) of every ``ros2 launch robot_rl FILE name:=value ...`` line in the launch
    files' comments and launch/README.md, and of every ``name:="..."`` example in an argument's
    description; ``/abs/path/`` stands for this repository."""
    cases = []
    texts = [(LAUNCH / "README.md").read_text(), *(f.read_text() for f in FILES)]
    for text in texts:
        for m in re.finditer(r"ros2 launch robot_rl (\S+\.launch\.xml)(.*)", text):
            cases.append((m.group(1), dict(a.split(":=", 1) for a in shlex.split(m.group(2)))))
    for f in FILES:
        for arg in ET.parse(f).iter("arg"):
            for m in re.finditer(r"(\w+):=(\"[^\"]*\"|\S+)", arg.get("description", "")):
                cases.append((f.name, {m.group(1): shlex.split(m.group(2))[0]}))
    return [(f, {k: v.replace("/abs/path/", f"{ROOT}/") for k, v in a.items()}) for f, a in cases]


CASES = [(f.name, {}) for f in FILES] + _documented()
CASES += [
    ("record.launch.xml", {"overrides": "--env.max_episode_steps=30 --env.robot.timeout_s=7.5"}),
    ("record.launch.xml", {"sim": "true", "sim_prefix": "''", "run_dir": "/tmp/my runs/r"}),
    ("serve_policy.launch.xml", {"sim": "false", "sim_prefix": "''"}),  # its comment: on a real arm
    ("online_hil.launch.xml", {"with_critic": "true", "critic": "/abs/critic", "sim": "true"}),
]


def _parsed(name: str, arguments: dict[str, str]) -> list:
    """The launch file's processes through the parsers the real processes use: robot-rl's command line
    and, for a command with a config, the config; a node's command line and parameters, and the run config
    of a node that drives a robot. Returns the configs."""
    launch = read(LAUNCH / name, {**REQUIRED.get(name, {}), **arguments})
    configs = []
    for e in launch.executables:
        assert e.cmd[0] == "robot-rl", e.cmd
        args, overrides = parse_command_line(e.cmd[1:])  # exits (SystemExit 2) on a bad argument
        if args.command not in ("serve",):
            configs.append(load_config(args.config, overrides, quick=args.quick))
    for node in launch.nodes:
        node_args = parse_args(node.argv, node.name)
        params = check_declared(node.name, node_args.params, registry.parameters(node.exec))
        if "overrides" in params:
            configs.append(robot_run_config(node_args, params))
    return configs


@pytest.mark.parametrize("name, arguments", CASES, ids=lambda c: c if isinstance(c, str) else str(c)[:70])
def test_defaults_and_documented_examples_parse_with_the_real_parsers(name, arguments):
    configs = _parsed(name, arguments)
    assert all(c.env.robot.driver == "ros2" for c in configs)


def test_documented_examples_cover_every_file_and_several_overrides_in_one():
    assert {f for f, _ in _documented()} == {f.name for f in FILES}
    assert any(" --" in a.get("overrides", "") for _, a in _documented())


def test_record_overrides_empty_or_several_reach_robot_rl_s_config():
    path = LAUNCH / "record.launch.xml"
    assert read(path).executables[0].cmd[-1] == "--overrides="  # empty: one argument robot-rl accepts
    (cfg,) = _parsed(
        "record.launch.xml", {"overrides": "--env.max_episode_steps=30 --env.robot.timeout_s=7.5"}
    )
    assert cfg.env.max_episode_steps == 30 and cfg.env.robot.timeout_s == 7.5  # wins over the file's 5.0
    hil = f"--config={ROOT}/configs/panda_pick_cube_hil.yaml --run_dir=/tmp/r"
    (cfg,) = _parsed("record.launch.xml", {"overrides": hil})  # a config file, as the example gives one
    assert cfg.env.cameras == [] and cfg.run_dir == "/tmp/r" and cfg.env.robot.driver == "ros2"
    with pytest.raises(SystemExit):  # a usage error, not a traceback
        parse_command_line(["record", "--teleop", "sim_human", "--overrides=--run_dir='a"])


def test_online_hil_overrides_reach_the_actor_s_config():
    cfg, *_ = _parsed(
        "online_hil.launch.xml", {"overrides": "--online.address=tcp://l:1 --env.max_episode_steps=9"}
    )
    assert cfg.online.address == "tcp://l:1" and cfg.env.max_episode_steps == 9


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
        for f in node.param_files:
            assert f.parent == LAUNCH / "params" and f.is_file(), f
            assert set(yaml.safe_load(f.read_text())) <= {node.name, "/**"}, (
                f"{f.name}: other nodes' sections"
            )
        given = parse_args(node.argv, node.name).params  # files and inline parameters, as the node reads them
        assert set(given) <= set(declared), f"{path.name} {node.name}: {set(given) - set(declared)}"
        check_declared(node.name, given, declared)  # ParameterError on a wrong type


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
    cmds = [(node_command(n, node_flags(domain)), n.env, None) for n in launch.nodes]
    if execs:
        cmds += [(executable_command(e.cmd, ros2_flags), e.env, e.cwd) for e in launch.executables]
    procs = []
    for i, (cmd, extra_env, cwd) in enumerate(cmds):
        log = open(logs / f"{path.stem}_{i}.log", "wb")
        procs.append(
            subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**env, **extra_env},
                cwd=cwd,
                start_new_session=True,
            )
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


@pytest.mark.e2e
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
        overrides["overrides"] = "--env.max_episode_steps=30 --env.robot.timeout_s=10.0"  # two in one
    if name == "online_hil.launch.xml":  # no learner: the actor waits for one (its status says so)
        from robot_rl.config import RewardModelConfig
        from robot_rl.rewards.compact import CompactProgressCritic

        overrides["config"] = "''"
        overrides["overrides"] = f"--run_dir={tmp_path / 'run'} --online.address={free_address()}"
        overrides["critic"] = str(tmp_path / "critic")  # the sim camera's size (params/sim_robot.yaml)
        CompactProgressCritic(RewardModelConfig(cameras=["front"], image_size=96)).save(overrides["critic"])
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
