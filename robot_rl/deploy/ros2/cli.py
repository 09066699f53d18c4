"""Run one node as a process: ROS-style arguments in, ``<node> ready`` on stdout once its endpoints exist,
callbacks until SIGINT/SIGTERM. Each node module's ``main`` calls :func:`run_node`."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from typing import Any

from robot_rl.hardware.ros2.node import Node, ParameterError, log_to_stderr, parse_args
from robot_rl.hardware.ros2.transport import make_node


def run_node(name: str, factory: Callable[[Node], Any], argv: list[str]) -> int:
    """Build ``factory(node)`` on a node named ``name`` from ``argv`` and spin until SIGINT/SIGTERM.

    Returns:
        0 after a signal; 2 for a bad parameter or argument (message on stderr).
    """
    log_to_stderr()
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(True))
    try:
        args = parse_args(argv, name)
        node = make_node(name, args)
        app = factory(node)
    except (ParameterError, ValueError) as err:
        print(f"robot-rl ros2 {name}: {err}", file=sys.stderr)
        return 2
    print(f"{name} ready ({node.transport}, domain {args.domain_id})", flush=True)
    try:
        node.spin(until=lambda: bool(stop))
    finally:
        close = getattr(app, "close", node.close)
        close()
    return 0
