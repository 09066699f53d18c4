"""``policy_node``: a policy (a run's checkpoint in this process, or the policy server at
``deploy.server``) driving a ROS 2 robot: observations from its topics and action chunks sent as commands
through the safety layer, by :class:`~robot_rl.hardware.robot_env.RobotEnv` on ``env.robot.driver: ros2``
(:mod:`robot_rl.hardware.ros2.bridge`) and the same rollout loop and chunk sources as ``robot-rl eval``.

Parameters: ``config`` (run YAML, empty: defaults), ``overrides`` (space-separated config flags, e.g.
``--policy.hidden_dims=[32,32]``), ``checkpoint`` (model folder; ignored with ``deploy.server``), ``episodes``
(0: until stopped), ``seed`` (first episode's env seed), ``sim_prefix`` (``/robot_rl/sim`` on
``sim_robot_node``; empty on a real arm), ``server_wait_s`` (with ``deploy.server``: how long to keep asking a
server that is not up yet, e.g. one started by the same launch file, s). The node's transport/domain flags set
``env.robot.ros2``. Each finished episode is published as JSON on ``/robot_rl/policy/episodes``
(std_msgs/String: seed, success, steps). If this process dies, the robot stops getting commands:
``sim_robot_node`` (and MoveIt Servo) stop applying stale twists, and position targets are held, so the arm
holds; a restarted node resumes with the next episode.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from gymnasium.vector import AutoresetMode

from robot_rl.deploy.remote_policy import PolicyServerUnavailable
from robot_rl.hardware.ros2 import msgs
from robot_rl.hardware.ros2.bridge import acquire, release
from robot_rl.hardware.ros2.node import ParameterError, robot_node_setup
from robot_rl.rollout import rollout
from robot_rl.sim import make_vector_env
from robot_rl.source_build import policy_source

PARAMETERS: dict = {
    "config": "",
    "overrides": "",
    "checkpoint": "",
    "episodes": 1,
    "seed": 0,
    "sim_prefix": "/robot_rl/sim",
    "server_wait_s": 30.0,
}
"""The node's parameters and defaults (module doc); :mod:`robot_rl.deploy.ros2.registry` reads them."""


def main(argv: list[str] | None = None) -> int:
    """``robot-rl ros2 policy_node [--ros-args -p name:=value ...]``; returns 0 when done, 2 for bad input."""
    try:
        p, cfg = robot_node_setup(argv, "policy_node", PARAMETERS)
        ros2 = cfg.env.robot.ros2
        episodes, seed = p["episodes"], p["seed"]
    except (ParameterError, ValueError) as err:
        print(f"robot-rl ros2 policy_node: {err}", file=sys.stderr)
        return 2
    vec = make_vector_env(cfg.env, 1, autoreset_mode=AutoresetMode.DISABLED)
    shared = acquire(ros2)
    report = shared.publisher(msgs.String, "/robot_rl/policy/episodes")
    space = (vec.single_observation_space, vec.single_action_space)
    source = _source(cfg, p["checkpoint"], seed, space, p["server_wait_s"])
    print("policy_node ready", flush=True)

    def on_episode(ep) -> None:
        line = {"seed": ep.env_seed, "success": bool(ep.success), "steps": int(ep.steps)}
        report.publish(msgs.String(json.dumps(line)))
        print(f"episode {json.dumps(line)}", flush=True)

    try:
        n = 0
        while episodes == 0 or n < episodes:
            rollout(vec, source, [seed + n], on_episode)
            n += 1
    finally:
        source.close()
        vec.close()
        release(ros2)
    return 0


def _source(cfg, checkpoint: str, seed: int, space, wait_s: float):
    """:func:`robot_rl.source_build.policy_source`, asked again while the policy server does not answer,
    for up to ``wait_s`` s.

    Raises:
        PolicyServerUnavailable: still no answer after ``wait_s``.
    """
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return policy_source(cfg, checkpoint, seed, space, 1)[0]
        except PolicyServerUnavailable as err:
            if time.monotonic() >= deadline:
                raise
            logging.getLogger("robot_rl.ros2.policy_node").info("%s; asking again", err)


if __name__ == "__main__":
    sys.exit(main())
