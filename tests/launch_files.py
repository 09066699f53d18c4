"""A reader of robot_rl's ROS 2 XML launch files for tests, by the rules of ROS 2's own ``launch``,
``launch_xml`` and ``launch_ros`` (read in their source; ``ros2 launch`` cannot be installed here):

- A command line (``<executable cmd>``, ``<node args>`` and ``ros_args``) is split into arguments *before*
  substitution (``ExecuteProcess._parse_cmdline``): only the literal text between substitutions is split,
  by shell rules; a ``$(var x)`` stays inside the one argument it touches, whatever its value holds, and
  an empty value is an empty argument.
- ``<arg>`` and ``<let>`` set launch configurations in document order (an ``<arg>`` keeps a value given on
  the command line); ``<group>`` scopes them and ``<set_env>`` unless ``scoped="false"``; ``<include>``
  sets its ``<arg>``s in the including scope and runs the included file there.
- ``if``/``unless`` accept ``true``/``false``/``1``/``0`` after strip and lower-case.
- A ``<node>`` runs as ``EXEC [args] [--ros-args ros_args] --ros-args -r __node:=NAME [-r __ns:=/NS]
  --params-file ... -r FROM:=TO``: ``<param from>`` files as given, each inline ``<param>`` typed by YAML
  rules and written to a params file of its own under ``/**``, or ``/NS/NAME`` for a node with a
  ``namespace`` (launch_ros' ``Node``).

Anything else raises a ValueError naming the file, the tag and the attribute: another tag, attribute,
child or substitution, ``shell="true"`` (see ``REFUSED``), or a launch argument given on the command line
that no ``<arg>`` declares (real launch would ignore it; here it is a typo).
"""

from __future__ import annotations

import atexit
import os
import re
import shlex
import shutil
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import yaml

LAUNCH = Path(__file__).resolve().parents[1] / "launch"
CODE = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
ROBOT_RL = [sys.executable, "-c", CODE]
COMMON = {"if", "unless"}
ATTRS = {  # tag -> (attributes, child tags)
    "arg": ({"name", "default", "description"}, {"choice"}),
    "let": ({"name", "value"}, set()),
    "set_env": ({"name", "value"}, set()),
    "group": ({"scoped"}, {"keep", "*"}),
    "include": ({"file"}, {"arg"}),
    "node": ({"pkg", "exec", "name", "namespace", "output", "args", "ros_args"}, {"param", "remap", "env"}),
    "executable": ({"cmd", "name", "output", "cwd", "shell"}, {"env"}),
}
REFUSED = {
    "shell": 'shell="true" joins the command for /bin/sh, which re-splits and unquotes every value',
    "forwarding": "a group that forwards nothing also clears the environment; not used here",
}
SUBST = re.compile(r"(?<!\\)\$\(([^()]*)\)")


@dataclass
class LaunchNode:
    exec: str
    name: str
    argv: list[str]  # after the executable, as launch_ros passes them
    param_files: list[Path] = field(default_factory=list)  # <param from=...>
    params: dict = field(default_factory=dict)  # inline <param name= value=>, typed as launch_ros does
    env: dict[str, str] = field(default_factory=dict)  # <set_env> in scope, then <env>


@dataclass
class Executable:
    cmd: list[str]
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None


@dataclass
class Launch:
    nodes: list[LaunchNode]
    executables: list[Executable]


@dataclass
class _Scope:
    file: Path
    configs: dict[str, str]
    env: dict[str, str]
    declared: set[str]


def _parts(text: str, where: str) -> list:
    """``text`` as launch's substitution parser reads it: literal strings (backslash escapes resolved) and
    substitutions ``(name, [args])``, in order."""
    out: list = []
    pos = 0
    for m in [*SUBST.finditer(text), None]:
        literal = text[pos : m.start() if m else len(text)]
        if re.search(r"(?<!\\)\$\(", literal):
            raise ValueError(f"{where}: unsupported substitution syntax in {text!r} (nested or unclosed)")
        if literal or not text:
            out.append(re.sub(r"\\(.)", r"\1", literal))
        if m:
            name, *args = m.group(1).split(" ")
            out.append((name, args))
            pos = m.end()
    return out


def _value(part, scope: _Scope, where: str) -> str:
    if isinstance(part, str):
        return part
    name, args = part
    if name == "var" and len(args) == 1:
        if args[0] not in scope.configs:
            raise ValueError(f"{where}: launch configuration {args[0]!r} does not exist")
        return scope.configs[args[0]]
    if name == "find-pkg-share" and args == ["robot_rl"]:
        return str(LAUNCH)
    raise ValueError(f"{where}: unsupported substitution $({' '.join([name, *args])})")


def _subst(text: str, scope: _Scope, where: str) -> str:
    return "".join(_value(p, scope, where) for p in _parts(text, where))


def _cmdline(text: str, scope: _Scope, where: str) -> list[str]:
    """The arguments of a command line: split first, as ``ExecuteProcess._parse_cmdline``, then each
    argument's substitutions performed."""
    args: list[list] = []
    arg: list = []
    for part in _parts(text, where):
        if not isinstance(part, str):
            arg.append(part)
            continue
        try:
            tokens = shlex.split(part)
        except ValueError as err:
            raise ValueError(f"{where}: {err} in {part!r} (a quote cannot span a substitution)") from None
        if not tokens:  # only spaces: ends the argument
            args.append(arg)
            arg = []
            continue
        if part[0].isspace() and arg:
            args.append(arg)
            arg = []
        arg.append(tokens[0])
        if len(tokens) > 1:
            args.append(arg)
            args.extend([t] for t in tokens[1:-1])
            arg = [tokens[-1]]
        if part[-1].isspace():
            args.append(arg)
            arg = []
    if arg:
        args.append(arg)
    return ["".join(_value(p, scope, where) for p in a) for a in args]


def _truthy(text: str, where: str) -> bool:
    text = text.strip().lower()
    if text not in ("true", "false", "1", "0"):
        raise ValueError(f"{where}: {text!r} is not true, false, 1 or 0")
    return text in ("true", "1")


def _check(el: ET.Element, scope: _Scope) -> str:
    """The element's place for errors; raises on a tag, attribute or child this reader does not know."""
    where = f"{scope.file.name} <{el.tag}>"
    if el.tag not in ATTRS:
        raise ValueError(f"{where}: tag not supported (known: {sorted(ATTRS)})")
    attrs, children = ATTRS[el.tag]
    for name in el.attrib:
        if name in REFUSED:
            if not (name == "shell" and not _truthy(el.get(name), where)):
                raise ValueError(f"{where} attribute {name!r}: refused: {REFUSED[name]}")
        elif name not in attrs | COMMON:
            raise ValueError(f"{where}: attribute {name!r} not supported (known: {sorted(attrs | COMMON)})")
    for child in el:
        if child.tag not in children and "*" not in children:
            raise ValueError(f"{where}: child <{child.tag}> not supported (known: {sorted(children)})")
    if "if" in el.attrib and "unless" in el.attrib:
        raise ValueError(f"{where}: if and unless can't be used together")
    return where


def _enabled(el: ET.Element, scope: _Scope, where: str) -> bool:
    if "if" in el.attrib:
        return _truthy(_subst(el.get("if"), scope, f"{where} attribute 'if'"), where)
    if "unless" in el.attrib:
        return not _truthy(_subst(el.get("unless"), scope, f"{where} attribute 'unless'"), where)
    return True


def _children(el: ET.Element, tag: str) -> list[ET.Element]:
    return [c for c in el if c.tag == tag]


def _need(el: ET.Element, name: str, where: str) -> str:
    if el.get(name) is None:
        raise ValueError(f"{where}: attribute {name!r} is required")
    return el.get(name)


def _actions(parent: ET.Element, scope: _Scope, out: Launch) -> None:
    for el in parent:
        if parent.tag == "group" and el.tag == "keep":
            continue
        where = _check(el, scope)
        if not _enabled(el, scope, where):
            continue
        if el.tag == "arg":
            _arg(el, scope, where)
        elif el.tag in ("let", "set_env"):
            target = scope.configs if el.tag == "let" else scope.env
            name, value = (_subst(_need(el, a, where), scope, where) for a in ("name", "value"))
            target[name] = value
        elif el.tag == "group":
            inner = scope
            if _truthy(el.get("scoped", "true"), where):
                inner = _Scope(scope.file, dict(scope.configs), dict(scope.env), scope.declared)
            for k in _children(el, "keep"):
                inner.configs[_subst(_need(k, "name", where), scope, where)] = _subst(
                    _need(k, "value", where), scope, where
                )
            _actions(el, inner, out)
        elif el.tag == "include":
            _include(el, scope, out, where)
        elif el.tag == "node":
            out.nodes.append(_node(el, scope, where))
        else:
            cwd = _subst(el.get("cwd"), scope, where) if el.get("cwd") is not None else None
            cmd = _cmdline(_need(el, "cmd", where), scope, f"{where} attribute 'cmd'")
            out.executables.append(Executable(cmd, {**scope.env, **_env(el, scope, where)}, cwd))


def _arg(el: ET.Element, scope: _Scope, where: str) -> None:
    name = _need(el, "name", where)
    scope.declared.add(name)
    if name not in scope.configs:
        if el.get("default") is None:
            raise ValueError(f"{where}: required launch argument {name!r} was not provided")
        scope.configs[name] = _subst(el.get("default"), scope, f"{where} attribute 'default'")
    choices = [c.get("value") for c in el]
    if choices and scope.configs[name] not in choices:
        raise ValueError(f"{where}: {name}:={scope.configs[name]!r} is not one of {choices}")


def _include(el: ET.Element, scope: _Scope, out: Launch, where: str) -> None:
    path = Path(_subst(_need(el, "file", where), scope, f"{where} attribute 'file'"))
    if not path.name.endswith(".launch.xml") or not path.is_file():
        raise ValueError(f"{where} attribute 'file': {path} is not an XML launch file")
    for a in el:
        extra = set(a.attrib) - {"name", "value"}
        if extra:
            raise ValueError(f"{where}: <arg> attributes {sorted(extra)} not supported in an include")
        scope.configs[_need(a, "name", where)] = _subst(_need(a, "value", where), scope, where)
    _run_file(path, _Scope(path, scope.configs, scope.env, scope.declared), out)


def _env(el: ET.Element, scope: _Scope, where: str) -> dict[str, str]:
    env = {}
    for e in _children(el, "env"):
        env[_subst(_need(e, "name", where), scope, where)] = _subst(_need(e, "value", where), scope, where)
    return env


def _param_value(text: str, where: str):
    """An inline parameter's value as launch_ros types it: YAML, empty text the empty string."""
    if not text:
        return ""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{where}: value {text!r} is not YAML: {err}") from None
    scalar = (bool, int, float, str)
    if isinstance(value, list) and value and all(type(v) is type(value[0]) for v in value):
        if isinstance(value[0], scalar):
            return value
    if isinstance(value, scalar):
        return value
    raise ValueError(f"{where}: value {text!r} is not a scalar or a non-empty uniform list")


_PARAMS: list[Path] = []  # the folder of the inline parameters' files, removed at exit


def _params_dir() -> Path:
    if not _PARAMS:
        _PARAMS.append(Path(tempfile.mkdtemp(prefix="launch_params_")))
        atexit.register(shutil.rmtree, _PARAMS[0], True)
    return _PARAMS[0]


def _node(el: ET.Element, scope: _Scope, where: str) -> LaunchNode:
    pkg, exec_ = (_subst(_need(el, a, where), scope, where) for a in ("pkg", "exec"))
    if pkg != "robot_rl" or el.get("name") is None:
        raise ValueError(f"{where}: a node needs pkg=robot_rl and a name")
    name = _subst(el.get("name"), scope, where)
    node = LaunchNode(exec_, name, [], env={**scope.env, **_env(el, scope, where)})
    if el.get("args") is not None:
        node.argv += _cmdline(el.get("args"), scope, f"{where} attribute 'args'")
    if el.get("ros_args") is not None:
        node.argv += ["--ros-args", *_cmdline(el.get("ros_args"), scope, f"{where} attribute 'ros_args'")]
    node.argv += ["--ros-args", "-r", f"__node:={name}"]
    namespace = _subst(el.get("namespace", ""), scope, f"{where} attribute 'namespace'").strip("/")
    if namespace:
        node.argv += ["-r", f"__ns:=/{namespace}"]
    section = f"/{namespace}/{name}" if namespace else "/**"
    for p in _children(el, "param"):
        pwhere = f"{where} <param {p.get('name') or p.get('from')}>"
        extra = sorted(set(p.attrib) - {"name", "value", "from"})
        if extra:
            raise ValueError(f"{pwhere}: attribute {extra[0]!r} not supported (known: from, name, value)")
        if len(p) or (p.get("from") is None) == (p.get("name") is None):
            raise ValueError(f"{pwhere}: takes either name and value or from, and no children")
        if p.get("from") is not None:
            path = Path(_subst(p.get("from"), scope, pwhere))
            if not path.is_file():
                raise ValueError(f"{pwhere}: {path} is not a file")
            node.param_files.append(path)
        else:
            key = _subst(p.get("name"), scope, where)
            value = _param_value(_subst(p.get("value", ""), scope, pwhere), pwhere)
            node.params[key] = value
            fd, name_ = tempfile.mkstemp(suffix=".yaml", dir=_params_dir())
            with os.fdopen(fd, "w") as f:
                yaml.dump({section: {"ros__parameters": {key: value}}}, f, default_flow_style=False)
            path = Path(name_)
        node.argv += ["--params-file", str(path)]
    for r in _children(el, "remap"):
        old, new = (_subst(_need(r, a, where), scope, f"{where} <remap {a}>") for a in ("from", "to"))
        node.argv += ["-r", f"{old}:={new}"]
    return node


def _run_file(path: Path, scope: _Scope, out: Launch) -> None:
    root = ET.parse(path).getroot()
    if root.tag != "launch":
        raise ValueError(f"{path.name}: root element is <{root.tag}>, expected <launch>")
    _actions(root, scope, out)


def read(path: Path, overrides: dict[str, str] | None = None) -> Launch:
    """The nodes and executables ``ros2 launch`` would start from ``path`` with launch arguments
    ``overrides`` (name -> value, as ``name:=value`` on its command line), by the module's rules.

    Raises:
        ValueError: naming the file, tag and attribute: an unsupported or refused tag, attribute, child or
            substitution, a missing required or undeclared argument, a bad condition or parameter value.
    """
    scope = _Scope(path, dict(overrides or {}), {}, set())
    out = Launch([], [])
    _run_file(path, scope, out)
    unknown = set(overrides or {}) - scope.declared
    if unknown:
        raise ValueError(f"{path.name}: no launch arguments {sorted(unknown)}")
    return out


def node_command(node: LaunchNode, flags: list[str]) -> list[str]:
    """``robot-rl ros2 <exec>`` run by this Python with launch_ros' arguments and the transport ``flags``."""
    return [*ROBOT_RL, "ros2", node.exec, *node.argv, *flags]


def executable_command(cmd: list[str], ros2_flags: list[str]) -> list[str]:
    """An ``<executable>``'s command with ``robot-rl`` run by this Python and, for a ROS 2 robot
    (``--env.robot.driver=ros2``), ``ros2_flags`` (config overrides) appended."""
    if cmd[0] != "robot-rl":
        raise ValueError(f"executable {cmd[0]!r}: robot_rl's launch files only run robot-rl")
    extra = ros2_flags if "--env.robot.driver=ros2" in cmd else []
    return [*ROBOT_RL, *cmd[1:], *extra]
