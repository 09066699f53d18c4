"""One node API over two transports: ``rclpy`` (a ROS 2 install) or ``cyclonedds`` (plain DDS with ROS 2's
wire names, no ROS 2 install needed).

A node publishes and subscribes :mod:`robot_rl.hardware.ros2.msgs` types, runs timers and reads
parameters; callbacks run on the thread that calls :meth:`Node.spin` (one at a time, like rclpy's
single-threaded executor). The transport is picked by ``--ros-transport {auto,rclpy,cyclonedds}``
(``auto``: rclpy when importable, else cyclonedds; :func:`robot_rl.hardware.ros2.transport.make_node`).

Parameters come ROS-style from the command line: ``--ros-args -p name:=value`` (and ``--params-file
FILE``, a ROS 2 parameter YAML: ``<node>: {ros__parameters: {...}}`` or ``/**:``), or the short form
``name:=value``. Values are YAML scalars/lists (``rate_hz:=10.0``, ``joints:=[a, b]``). A node declares
each parameter it reads with a default; an undeclared parameter on the command line is an error naming
it, as a typo would otherwise be silently ignored.

Both transports are tested over real DDS on loopback: rclpy with ROS 2 Kilted's PyPI wheels on
``rmw_fastrtps_cpp`` (ROS 2's default middleware), and every message type crosses between the two
(``tests/hardware/ros2/test_ros2_interop.py``). Services (:meth:`Node.service`, :meth:`Node.call`) exist on
rclpy only.
"""

from __future__ import annotations

import abc
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from robot_rl.config import PipelineConfig, RobotConfig, Ros2Config, load_config

TRANSPORTS = ("auto", "rclpy", "cyclonedds")


class ServiceUnsupportedError(RuntimeError):
    """A ROS 2 service was asked of a transport without services (cyclonedds: ROS 2's request/reply wire
    formats differ per RMW, so services need the rclpy transport)."""


class ServiceError(RuntimeError):
    """A ROS 2 service call found no server, or got no reply, within its timeout; the message names it."""


class ParameterError(ValueError):
    """A bad ``--ros-args`` parameter (unknown name, wrong type, unparsable file); the message names it."""


@dataclass
class NodeArgs:
    """What a node's command line says: ``params`` (name -> value, command line over ``--params-file``),
    ``transport`` (one of :data:`TRANSPORTS`), ``domain_id`` (``--domain-id``, else ``ROS_DOMAIN_ID``,
    else 0), ``loopback`` (``--dds-loopback``: keep DDS on 127.0.0.1, no multicast) and ``remaps``
    (``-r from:=to`` and ``__ns:=``/``__node:=``, in order: rclpy applies them as ROS 2 does; cyclonedds
    renames exactly matching topics)."""

    params: dict[str, Any] = field(default_factory=dict)
    transport: str = "auto"
    domain_id: int = 0
    loopback: bool = False
    remaps: list[tuple[str, str]] = field(default_factory=list)


def _scalar(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text) if text else ""
    except yaml.YAMLError as err:
        raise ParameterError(f"{where}: cannot parse value {text!r}: {err}") from None


def load_params_file(path: str, node_name: str, namespace: str = "") -> dict[str, Any]:
    """The ``ros__parameters`` for ``node_name`` in a ROS 2 parameter file: the ``/**``, ``/<name>``,
    ``<name>`` and, for a node in ``namespace`` (``/ns``, as ``-r __ns:=/ns`` gives it), ``/ns/<name>``
    sections, later ones overriding earlier (launch_ros writes a namespaced node's inline ``<param>``s under
    ``/ns/<name>``).

    Raises:
        ParameterError: unreadable file, not a mapping, or a section without ``ros__parameters``.
    """
    try:
        with open(path) as f:
            doc = yaml.safe_load(f) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ParameterError(f"--params-file {path}: {err}") from None
    if not isinstance(doc, dict):
        raise ParameterError(f"--params-file {path}: top level must be a mapping of node names")
    params: dict[str, Any] = {}
    ns = "/" + namespace.strip("/") if namespace.strip("/") else ""
    for key in ("/**", f"/{node_name}", node_name, *([f"{ns}/{node_name}"] if ns else [])):
        if key in doc:
            section = doc[key]
            if not isinstance(section, dict) or not isinstance(section.get("ros__parameters"), dict):
                raise ParameterError(f"--params-file {path}: section {key!r} needs a ros__parameters mapping")
            params.update(section["ros__parameters"])
    return params


def parse_args(argv: list[str], node_name: str) -> NodeArgs:
    """Parse a node's command line (module doc).

    Raises:
        ParameterError: an argument that is none of the accepted forms, a bad transport or domain id.
    """
    out = NodeArgs(domain_id=int(os.environ.get("ROS_DOMAIN_ID", "0") or 0))
    files: list[str] = []
    given: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        if arg in ("--ros-args", "--"):
            i += 1
            continue
        if arg == "-r" or arg == "--remap":  # remaps from launch (<remap>, namespace=, name=)
            if nxt is None or ":=" not in nxt:
                raise ParameterError(f"{arg} needs from:=to, got {nxt!r}")
            out.remaps.append(tuple(nxt.split(":=", 1)))
            i += 2
            continue
        if arg in ("-p", "--param", "--params-file", "--ros-transport", "--domain-id"):
            if nxt is None:
                raise ParameterError(f"{arg} needs a value")
            if arg in ("-p", "--param"):
                arg = nxt
            elif arg == "--params-file":
                files.append(nxt)
                i += 2
                continue
            elif arg == "--ros-transport":
                out.transport = nxt
                i += 2
                continue
            else:
                arg = f"--domain-id={nxt}"
            i += 1
        if arg.startswith("--ros-transport="):
            out.transport = arg.split("=", 1)[1]
        elif arg.startswith("--domain-id="):
            try:
                out.domain_id = int(arg.split("=", 1)[1])
            except ValueError:
                raise ParameterError(f"{arg}: domain id must be an integer") from None
        elif arg == "--dds-loopback":
            out.loopback = True
        elif ":=" in arg and not arg.startswith("-"):
            name, text = arg.split(":=", 1)
            if name.startswith("__"):  # __node:=, __ns:= (launch's name and namespace)
                out.remaps.append((name, text))
                i += 1
                continue
            given[name] = _scalar(text, f"parameter {name}")
        else:
            raise ParameterError(
                f"argument {arg!r}: expected name:=value, --ros-args -p name:=value, --params-file FILE, "
                f"--ros-transport {{{','.join(TRANSPORTS)}}}, --domain-id N or --dds-loopback"
            )
        i += 1
    renamed = dict(out.remaps)  # launch's name= and namespace= (-r __node:=NAME, -r __ns:=/NS)
    names = dict.fromkeys([node_name, renamed.get("__node", node_name)])
    for path in files:
        for name in names:
            out.params.update(load_params_file(path, name, renamed.get("__ns", "")))
    out.params.update(given)
    if out.transport not in TRANSPORTS:
        raise ParameterError(f"--ros-transport {out.transport!r}: expected one of {list(TRANSPORTS)}")
    if not 0 <= out.domain_id <= 232:
        raise ParameterError(f"domain id {out.domain_id} must be in [0, 232]")
    return out


def typed_value(node: str, name: str, value: Any, default: Any) -> Any:
    """``value`` of parameter ``name`` of ``node`` checked against its default's type: bool, float (an int
    is converted), int, str or list; a ``None`` default accepts any value.

    Raises:
        ParameterError: another type (names the node, parameter and default).
    """
    if isinstance(default, bool) or default is None:
        ok = default is None or isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, list):
        ok = isinstance(value, list)
    else:
        ok = isinstance(value, type(default)) and not isinstance(value, bool)
    if not ok:
        raise ParameterError(
            f"{node}: parameter {name}:={value!r} must be {type(default).__name__} (default {default!r})"
        )
    return value


def check_declared(node: str, given: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """``given`` parameters typed against ``declared`` (name -> default), defaults filled in, for a process
    that parses its parameters without a :class:`Node` (``policy_node``).

    Raises:
        ParameterError: an undeclared or wrongly typed parameter.
    """
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ParameterError(f"{node}: unknown parameters {unknown}; declared: {sorted(declared)}")
    return {k: typed_value(node, k, given[k], d) if k in given else d for k, d in declared.items()}


def log_to_stderr() -> None:
    """ROS-style log lines (``[LEVEL] [logger]: message``) on stderr, at INFO, for a node's process."""
    logging.basicConfig(
        level=logging.INFO, format="[%(levelname)s] [%(name)s]: %(message)s", stream=sys.stderr
    )


def robot_run_config(args: NodeArgs, params: dict[str, Any]) -> PipelineConfig:
    """The run's :class:`robot_rl.config.PipelineConfig` for a node that drives a robot: the ``config``
    parameter's file plus its ``overrides`` parameter (command-line style), with ``env.robot`` on the ROS 2
    bridge (``driver: ros2``) at this node's transport, domain, loopback and ``sim_prefix`` parameter. A
    config that already has a ``ros2`` robot keeps its other ``env.robot.ros2`` keys (joints, topics, limits).

    Raises:
        ValueError: a bad config file or override (``ConfigError``, naming the file or key).
    """
    from dataclasses import replace

    cfg = load_config(params["config"] or None, params["overrides"].split())
    node = {
        "transport": args.transport,
        "domain_id": args.domain_id,
        "loopback": args.loopback,
        "sim_prefix": params["sim_prefix"],
    }
    robot = cfg.env.robot
    if robot is None or robot.driver != "ros2":
        cfg.env.robot = RobotConfig(driver="ros2", ros2=Ros2Config(**node), timeout_s=5.0)
    else:
        robot.ros2 = replace(robot.ros2, **node)
    return cfg


def robot_node_setup(
    argv: list[str] | None, node: str, declared: dict[str, Any]
) -> tuple[dict[str, Any], PipelineConfig]:
    """Start-up of a node process that drives a robot (``policy_node``, ``actor_node``): ROS-style logging on
    stderr, then its command line (``argv``; None: ``sys.argv[1:]``) parsed, its parameters typed against
    ``declared`` (:func:`check_declared`) and the run config built (:func:`robot_run_config`).

    Returns:
        (parameters, config).
    Raises:
        ParameterError: a bad argument or parameter. ValueError: a bad config file or override.
    """
    log_to_stderr()
    args = parse_args(sys.argv[1:] if argv is None else argv, node)
    params = check_declared(node, args.params, declared)
    return params, robot_run_config(args, params)


class Publisher(abc.ABC):
    """Publishes one message type on one topic."""

    @abc.abstractmethod
    def publish(self, msg: Any) -> None: ...

    @abc.abstractmethod
    def subscription_count(self) -> int:
        """Subscribers matched to this publisher now (rclpy's ``get_subscription_count``): a message
        published before discovery matched its subscriber is lost (volatile QoS)."""


class Node(abc.ABC):
    """A ROS 2 node (module doc). Subclasses implement the transport; nodes of robot_rl use only this API.

    Args:
        name: node name (logs, parameter-file section).
        args: parsed command line (:func:`parse_args`).
    """

    transport = ""

    def __init__(self, name: str, args: NodeArgs) -> None:
        self.name = name
        self.args = args
        self.log = logging.getLogger(f"robot_rl.ros2.{name}")
        self._declared: dict[str, Any] = {}
        self._timers: list[list[Any]] = []  # [next due (monotonic s), period s, callback]

    # -- parameters -----------------------------------------------------------------------------------
    def param(self, name: str, default: Any) -> Any:
        """Declare parameter ``name`` with ``default`` and return its value (command line or params file,
        else ``default``), converted to the default's type (:func:`typed_value`).

        Raises:
            ParameterError: the given value has another type than the default's.
        """
        self._declared[name] = default
        if name not in self.args.params:
            return default
        return typed_value(self.name, name, self.args.params[name], default)

    def params(self, declared: dict[str, Any]) -> dict[str, Any]:
        """Declare every parameter of ``declared`` (name -> default, a node module's ``PARAMETERS``, the
        registry's source) and return name -> value; then :meth:`check_params`.

        Raises:
            ParameterError: a wrongly typed or an undeclared given parameter.
        """
        values = {name: self.param(name, default) for name, default in declared.items()}
        self.check_params()
        return values

    def check_params(self) -> None:
        """Raise :class:`ParameterError` naming any given parameter this node never declared (a typo)."""
        unknown = sorted(set(self.args.params) - set(self._declared))
        if unknown:
            raise ParameterError(
                f"{self.name}: unknown parameters {unknown}; declared: {sorted(self._declared)}"
            )

    def remapped(self, topic: str) -> str:
        """``topic`` after this node's ``from:=to`` remaps of that exact name (the last one wins)."""
        for old, new in self.args.remaps:
            if old == topic:
                topic = new
        return topic

    # -- pub/sub/timers -------------------------------------------------------------------------------
    @abc.abstractmethod
    def publisher(self, msg_type: type, topic: str, depth: int = 10) -> Publisher:
        """A publisher of ``msg_type`` on ROS topic ``topic`` (reliable, keep last ``depth``)."""

    @abc.abstractmethod
    def subscribe(self, msg_type: type, topic: str, callback: Callable[[Any], None], depth: int = 10) -> None:
        """Call ``callback(msg)`` from :meth:`spin` for each ``msg_type`` message on ``topic`` (best-effort
        reader, which matches reliable and best-effort publishers)."""

    def timer(self, period_s: float, callback: Callable[[], None]) -> None:
        """Call ``callback()`` every ``period_s`` s from :meth:`spin` (no catch-up bursts after a stall).

        Raises:
            ValueError: ``period_s`` <= 0.
        """
        if not period_s > 0:
            raise ValueError(f"{self.name}: timer period must be > 0 s, got {period_s}")
        self._timers.append([time.monotonic() + period_s, period_s, callback])

    def _run_timers(self) -> float:
        """Run the due timers; return the seconds until the next one (1.0 when none)."""
        now = time.monotonic()
        for entry in self._timers:
            if entry[0] <= now:
                entry[0] = max(entry[0] + entry[1], now)
                entry[2]()
        if not self._timers:
            return 1.0
        return max(0.0, min(e[0] for e in self._timers) - time.monotonic())

    # -- services ------------------------------------------------------------------------------------
    def service(self, srv: str, name: str, handler: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        """Serve ROS 2 service ``name`` of type ``srv`` (``"std_srvs/srv/Trigger"``): each request's fields
        as a dict go to ``handler``, whose dict fills the response; handlers run from :meth:`spin`.

        Raises:
            ServiceUnsupportedError: this transport has no services (cyclonedds).
        """
        raise ServiceUnsupportedError(
            f"{self.name}: service {name} ({srv}) needs the rclpy transport (--ros-transport rclpy); "
            f"the {self.transport} transport has none"
        )

    def call(self, srv: str, name: str, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Call ROS 2 service ``name`` of type ``srv`` with ``request``'s fields; return the response's
        fields. Safe from any thread: the caller spins the node itself unless another thread spins it.

        Raises:
            ServiceUnsupportedError: this transport has no services (cyclonedds).
            ServiceError: no server, or no reply, within ``timeout_s`` (s).
        """
        raise ServiceUnsupportedError(
            f"{self.name}: calling {name} ({srv}) needs the rclpy transport (--ros-transport rclpy); "
            f"the {self.transport} transport has none"
        )

    @abc.abstractmethod
    def spin_once(self, timeout_s: float = 0.1) -> None:
        """Wait up to ``timeout_s`` for messages or a timer, and run what is due."""

    def spin(self, until: Callable[[], bool] = lambda: False) -> None:
        """Run callbacks until ``until()`` is true (checked every <= 0.1 s) or KeyboardInterrupt."""
        try:
            while not until():
                self.spin_once(0.1)
        except KeyboardInterrupt:
            pass

    @abc.abstractmethod
    def close(self) -> None:
        """Destroy the node's endpoints; safe to call twice."""

    def now(self) -> float:
        """The node clock (s since the Unix epoch; ROS' system clock)."""
        return time.time()
