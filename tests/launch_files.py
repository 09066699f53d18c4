"""A reader of robot_rl's ROS 2 XML launch files for tests: the ``<arg>``s, ``<node>``s and
``<executable>``s with ``$(var ...)`` and ``$(find-pkg-share robot_rl)`` resolved and ``if``/``unless``
applied, and the command lines that start them as processes over cyclonedds (what ``ros2 launch`` would
start, with our transport flags in place of an RMW)."""

from __future__ import annotations

import re
import shlex
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import yaml

LAUNCH = Path(__file__).resolve().parents[1] / "launch"
CODE = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
ROBOT_RL = [sys.executable, "-c", CODE]
TAGS = {"arg", "node", "executable"}
NODE_ATTRS = {"pkg", "exec", "name", "output", "if", "unless", "namespace", "args", "ros_args"}
EXEC_ATTRS = {"cmd", "name", "output", "if", "unless", "cwd", "shell"}


@dataclass
class LaunchNode:
    exec: str
    name: str
    param_files: list[Path] = field(default_factory=list)
    params: dict = field(default_factory=dict)  # inline <param name= value=>, values typed as launch_ros does


@dataclass
class Launch:
    nodes: list[LaunchNode]
    executables: list[list[str]]  # resolved command lines


def _subst(text: str, args: dict[str, str], where: str) -> str:
    def one(m: re.Match) -> str:
        kind, _, value = m.group(1).partition(" ")
        if kind == "var":
            if args.get(value) is None:
                raise ValueError(f"{where}: launch argument {value!r} has no value (required)")
            return args[value]
        if kind == "find-pkg-share" and value == "robot_rl":
            return str(LAUNCH)
        raise ValueError(f"{where}: unsupported substitution $({m.group(1)})")

    return re.sub(r"\$\(([^)]*)\)", one, text)


def _truthy(text: str, where: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0"):
        raise ValueError(f"{where}: condition {text!r} is not a boolean")
    return text.lower() in ("true", "1")


def read(path: Path, overrides: dict[str, str] | None = None) -> Launch:
    """Parse ``path`` with launch arguments ``overrides`` (name -> value, as ``name:=value`` on
    ``ros2 launch``).

    Raises:
        ValueError: an unknown tag/attribute, an undeclared or unset argument, a bad condition.
    """
    root = ET.parse(path).getroot()
    if root.tag != "launch":
        raise ValueError(f"{path.name}: root element is <{root.tag}>, expected <launch>")
    args: dict[str, str | None] = {}
    for el in root.iter("arg"):
        args[el.get("name")] = el.get("default")
    unknown = set(overrides or {}) - set(args)
    if unknown:
        raise ValueError(f"{path.name}: no launch arguments {sorted(unknown)}")
    args.update(overrides or {})
    out = Launch([], [])
    for el in root:
        where = f"{path.name} <{el.tag} {el.get('name', '')}>"
        if el.tag not in TAGS:
            raise ValueError(f"{where}: tag not used by robot_rl's launch files")
        if el.tag == "arg":
            continue
        attrs = NODE_ATTRS if el.tag == "node" else EXEC_ATTRS
        if set(el.attrib) - attrs:
            raise ValueError(f"{where}: unknown attributes {sorted(set(el.attrib) - attrs)}")
        if "if" in el.attrib and not _truthy(_subst(el.get("if"), args, where), where):
            continue
        if "unless" in el.attrib and _truthy(_subst(el.get("unless"), args, where), where):
            continue
        if el.tag == "executable":
            out.executables.append(shlex.split(_subst(el.get("cmd"), args, where)))
            continue
        if el.get("pkg") != "robot_rl" or not el.get("exec") or not el.get("name"):
            raise ValueError(f"{where}: a node needs pkg=robot_rl, exec and name")
        node = LaunchNode(el.get("exec"), el.get("name"))
        for p in el:
            if p.tag != "param" or (p.get("from") is None) == (p.get("name") is None):
                raise ValueError(f"{where}: <{p.tag}> must be a <param> with either name+value or from")
            if p.get("from") is not None:
                node.param_files.append(Path(_subst(p.get("from"), args, where)))
            else:
                node.params[p.get("name")] = yaml.safe_load(_subst(p.get("value", ""), args, where))
        out.nodes.append(node)
    return out


def node_command(node: LaunchNode, flags: list[str]) -> list[str]:
    """``robot-rl ros2 <exec>`` with the arguments launch_ros passes (node name, params files, inline
    parameters) and the transport ``flags``."""
    cmd = [*ROBOT_RL, "ros2", node.exec, "--ros-args", "-r", f"__node:={node.name}"]
    for f in node.param_files:
        cmd += ["--params-file", str(f)]
    for k, v in node.params.items():
        cmd += [
            "-p",
            f"{k}:={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}",
        ]
    return [*cmd, *flags]


def executable_command(cmd: list[str], ros2_flags: list[str]) -> list[str]:
    """An ``<executable>``'s command with ``robot-rl`` run by this Python and, for a ROS 2 robot
    (``--env.robot.driver=ros2``), ``ros2_flags`` (config overrides) appended."""
    if cmd[0] != "robot-rl":
        raise ValueError(f"executable {cmd[0]!r}: robot_rl's launch files only run robot-rl")
    extra = ros2_flags if "--env.robot.driver=ros2" in cmd else []
    return [*ROBOT_RL, *cmd[1:], *extra]
