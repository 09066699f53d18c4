"""The ``rclpy`` transport of :class:`robot_rl.hardware.ros2.node.Node`, on a ROS 2 install: ``source
/opt/ros/<distro>/setup.bash`` (Humble, Jazzy, Kilted), or ROS 2 Kilted's PyPI wheels (``pip install
'robot-rl[rclpy]'``, which ``setup.sh test`` installs; RMW ``rmw_fastrtps_cpp``, ROS 2's default).

Tested with rclpy 9.1.2 (Kilted) on ``rmw_fastrtps_cpp`` against the cyclonedds transport, every message
type in both directions (``tests/hardware/ros2/test_ros2_interop.py``), and with the node tests on both
transports.

Messages are converted field by field between :mod:`robot_rl.hardware.ros2.msgs` dataclasses and the
generated rclpy classes of the same ``pkg/msg/Type`` (same field names), so node code is transport-free.
Nodes appear in the ROS graph (``ros2 node list``, ``get_node_names_and_namespaces``); the command line's
remaps (``-r from:=to``, ``__ns:=``, ``__node:=``, as ``ros2 launch`` passes a node's ``namespace``,
``name`` and ``<remap>``) go to rclpy, which applies them as ROS 2 does.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from robot_rl.hardware.errors import MissingExtraError
from robot_rl.hardware.ros2.msgs import SEQUENCE_OF, check_type, ros_type
from robot_rl.hardware.ros2.node import Node, NodeArgs, Publisher, ServiceError

MAX_DRAIN = 1000
"""Most ready callbacks one :meth:`RclpyNode.spin_once` runs after its wait (timers run between calls)."""
SPIN_GRACE_S = 0.5
"""A thread that spun the node within this many seconds counts as its spinner (:meth:`RclpyNode.call`)."""


def _rclpy():
    try:
        import rclpy
        import rclpy.node
    except ImportError:
        raise MissingExtraError(
            "--ros-transport rclpy needs rclpy: pip install 'robot-rl[rclpy]' (ROS 2 Kilted wheels) or "
            "source a ROS 2 install (/opt/ros/<distro>/setup.bash); or use --ros-transport cyclonedds"
        ) from None
    return rclpy


def ros_class(msg_type: type) -> type:
    """The rclpy message class of one of our message types (``sensor_msgs.msg.JointState``...)."""
    pkg, _, name = ros_type(msg_type).split("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


def srv_class(srv: str) -> type:
    """The rclpy service class of ``pkg/srv/Type`` (``std_srvs/srv/Trigger`` -> ``std_srvs.srv.Trigger``).

    Raises:
        MissingExtraError: the service's package is not installed (names the PyPI wheel).
        ValueError: ``srv`` is not ``pkg/srv/Type``.
    """
    parts = srv.split("/")
    if len(parts) != 3 or parts[1] != "srv":
        raise ValueError(f"service type {srv!r} must be pkg/srv/Type, such as std_srvs/srv/Trigger")
    try:
        return getattr(importlib.import_module(f"{parts[0]}.srv"), parts[2])
    except (ImportError, AttributeError):
        wheel = "ros-" + parts[0].replace("_", "-")
        raise MissingExtraError(f"service type {srv} is not installed: pip install {wheel}") from None


def to_ros(msg: Any) -> Any:
    """Our dataclass message -> the rclpy message of the same type (recursively)."""
    out = ros_class(type(msg))()
    for f in dataclasses.fields(msg):
        value = getattr(msg, f.name)
        if dataclasses.is_dataclass(value):
            value = to_ros(value)
        elif isinstance(value, list) and value and dataclasses.is_dataclass(value[0]):
            value = [to_ros(v) for v in value]
        setattr(out, f.name, value)
    return out


def from_ros(ros_msg: Any, msg_type: type) -> Any:
    """An rclpy message -> our dataclass ``msg_type`` (recursively; arrays become lists, uint8[] bytes)."""
    kwargs = {}
    for f in dataclasses.fields(msg_type):
        value = getattr(ros_msg, f.name)
        if dataclasses.is_dataclass(f.default_factory):  # a nested message
            value = from_ros(value, f.default_factory)
        elif (msg_type, f.name) in SEQUENCE_OF:
            value = [from_ros(v, SEQUENCE_OF[msg_type, f.name]) for v in value]
        elif f.default_factory is bytes:
            value = bytes(value)
        elif not isinstance(value, str | int | float | bool):
            value = [v.item() if hasattr(v, "item") else v for v in value]
        kwargs[f.name] = value
    return msg_type(**kwargs)


def _fields(ros_msg: Any) -> dict[str, Any]:
    return {name: getattr(ros_msg, name) for name in ros_msg.get_fields_and_field_types()}


class _RclpyPublisher(Publisher):
    def __init__(self, pub: Any, msg_type: type, topic: str) -> None:
        self._pub, self._type, self._topic = pub, msg_type, topic

    def publish(self, msg: Any) -> None:
        check_type(self._topic, self._type, msg)
        self._pub.publish(to_ros(msg))

    def subscription_count(self) -> int:
        return int(self._pub.get_subscription_count())


class RclpyNode(Node):
    """A node on rclpy (module doc), in an rclpy context of its domain (``--domain-id``, else
    ``ROS_DOMAIN_ID``, else 0), shared by this process's nodes of that domain and shut down with the last
    one, so nodes of several domains can live in one process. ``--dds-loopback`` sets
    ``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` (ROS 2 Jazzy and later) before the process's first context
    starts; on Humble set ``ROS_LOCALHOST_ONLY=1`` yourself. Each node has its own single-threaded executor,
    so nodes of one process spin on their own threads."""

    transport = "rclpy"
    _contexts: dict[int, list[Any]] = {}  # domain id -> [rclpy Context, open nodes]

    def __init__(self, name: str, args: NodeArgs) -> None:
        super().__init__(name, args)
        _rclpy()
        import rclpy.node
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor

        if args.domain_id not in RclpyNode._contexts:
            if args.loopback:
                os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
            context = Context()
            context.init(args=[], domain_id=args.domain_id)  # our argv is parsed already (parse_args)
            RclpyNode._contexts[args.domain_id] = [context, 0]
        entry = RclpyNode._contexts[args.domain_id]
        remaps = [x for old, new in args.remaps for x in ("-r", f"{old}:={new}")]
        cli_args = ["--ros-args", *remaps] if remaps else None
        self._node = rclpy.node.Node(name, context=entry[0], cli_args=cli_args)
        entry[1] += 1
        self._executor = SingleThreadedExecutor(context=entry[0])
        self._executor.add_node(self._node)
        self._clients: dict[str, Any] = {}
        self._spinner: tuple[int, float] = (0, 0.0)  # (thread id, monotonic s) of the last spin_once

    @property
    def ros_node(self) -> Any:
        """The underlying ``rclpy.node.Node`` (graph queries, QoS, anything this API lacks)."""
        return self._node

    def publisher(self, msg_type: type, topic: str, depth: int = 10) -> Publisher:
        pub = self._node.create_publisher(ros_class(msg_type), topic, depth)
        return _RclpyPublisher(pub, msg_type, topic)

    def subscribe(self, msg_type: type, topic: str, callback: Callable[[Any], None], depth: int = 10) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        qos = QoSProfile(depth=depth, reliability=ReliabilityPolicy.BEST_EFFORT)
        self._node.create_subscription(
            ros_class(msg_type), topic, lambda m: callback(from_ros(m, msg_type)), qos
        )

    def service(self, srv: str, name: str, handler: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        def serve(request: Any, response: Any) -> Any:
            for key, value in handler(_fields(request)).items():
                setattr(response, key, value)
            return response

        self._node.create_service(srv_class(srv), name, serve)

    def call(self, srv: str, name: str, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        cls = srv_class(srv)
        key = f"{srv} {name}"
        if key not in self._clients:
            self._clients[key] = self._node.create_client(cls, name)
        client = self._clients[key]
        deadline = time.monotonic() + timeout_s
        if not client.wait_for_service(timeout_sec=max(0.0, timeout_s)):
            raise ServiceError(f"{self.name}: no server of {name} ({srv}) within {timeout_s:g} s")
        req = cls.Request()
        for field_name, value in request.items():
            setattr(req, field_name, value)
        done = threading.Event()
        future = client.call_async(req)
        future.add_done_callback(lambda _f: done.set())
        spinner, last = self._spinner
        spun_elsewhere = spinner not in (0, threading.get_ident()) and time.monotonic() - last < SPIN_GRACE_S
        while not done.is_set() and time.monotonic() < deadline:
            if spun_elsewhere:
                done.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            else:
                self.spin_once(min(0.05, max(0.0, deadline - time.monotonic())))
        if not future.done() or future.result() is None:
            future.cancel()
            raise ServiceError(f"{self.name}: {name} ({srv}) did not reply within {timeout_s:g} s")
        return _fields(future.result())

    def spin_once(self, timeout_s: float = 0.1) -> None:
        """Wait up to ``timeout_s`` (s) for a callback, then run every callback already ready and the due
        timers. rclpy's own ``spin_once`` runs one callback (a varying timeout even restarts its wait), so
        a node whose timers take most of a loop (a loaded machine) fell behind its topics: measured, states
        and twists arriving 0.9-1.3 s late at load 14 on 2 cores, each subscription's queue full."""
        from rclpy.executors import ShutdownException, TimeoutException

        self._spinner = (threading.get_ident(), time.monotonic())
        self._executor.spin_once(timeout_sec=min(timeout_s, self._run_timers()))
        for _ in range(MAX_DRAIN):
            try:
                handler, _, _ = self._executor.wait_for_ready_callbacks(timeout_sec=0.0)
            except (TimeoutException, ShutdownException):
                break
            handler()
            handler.result()  # raise any exception of the callback
        self._run_timers()

    def close(self) -> None:
        if self._node is not None:
            self._executor.remove_node(self._node)
            self._executor.shutdown()
            self._node.destroy_node()
            self._node = None
            entry = RclpyNode._contexts[self.args.domain_id]
            entry[1] -= 1
            if entry[1] == 0:
                del RclpyNode._contexts[self.args.domain_id]
                entry[0].try_shutdown()
