"""The node executables robot_rl ships (``robot-rl ros2 <exe>``, ``ros2 run robot_rl <exe>``, the ``exec`` of
a ``<node>`` in ``launch/*.launch.xml``) and their declared parameters, read from each node module's
``PARAMETERS`` (the dict the node itself declares at start-up), so the registry cannot drift from the code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

NODES: dict[str, str] = {
    "sim_robot_node": "robot_rl.deploy.ros2.sim_robot_node",
    "policy_node": "robot_rl.deploy.ros2.policy_node",
    "actor_node": "robot_rl.deploy.ros2.actor_node",
    "intervention_node": "robot_rl.deploy.ros2.intervention_node",
    "critic_node": "robot_rl.deploy.ros2.critic_node",
}
"""Executable name -> module with ``main(argv) -> int`` and ``PARAMETERS`` (name -> default)."""


def _module(exe: str):
    if exe not in NODES:
        raise KeyError(f"unknown ROS 2 node executable {exe!r}; robot_rl has {sorted(NODES)}")
    return importlib.import_module(NODES[exe])


def parameters(exe: str) -> dict[str, Any]:
    """Parameter name -> default of node executable ``exe``.

    Raises:
        KeyError: ``exe`` is not a robot_rl node (names the known ones).
    """
    return dict(_module(exe).PARAMETERS)


def entry_point(exe: str) -> Callable[[list[str] | None], int]:
    """The ``main(argv) -> exit code`` of node executable ``exe``.

    Raises:
        KeyError: ``exe`` is not a robot_rl node (names the known ones).
    """
    return _module(exe).main
