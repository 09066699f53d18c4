"""``actor_node``: the online-RL actor (:class:`robot_rl.runtime.actor.Actor`, as ``robot-rl online --role
actor`` runs it) on a ROS 2 arm: its env is :class:`~robot_rl.hardware.robot_env.RobotEnv` on the robot
bridge (``env.robot.driver: ros2``, :mod:`robot_rl.hardware.ros2.bridge`), it talks to the learner over
the ZeroMQ link at ``online.address`` as always, and a human intervenes through ``intervention_node``'s
topics (:mod:`robot_rl.hardware.ros2.intervention_device`). Episodes, the actor's zarr log, weights,
intervention labelling (``complementary_info.is_intervention``) and the safety layer are the runtime's.

Parameters: ``config`` (run YAML, empty: defaults), ``overrides`` (space-separated config flags),
``actor_id``, ``seed`` (training seed), ``address`` (the learner; empty: ``online.address``), ``sim_prefix``
(``/robot_rl/sim`` on ``sim_robot_node``; empty on a real arm), ``intervention_prefix`` (the
intervention node's topics; empty: the config's ``intervention.device`` instead), ``intervention_timeout_s``
(s an intervention message counts), ``robot_wait_s`` (how long to wait for the first joint state, e.g. of a
robot started by the same launch file, s), ``status_hz``. The node's transport/domain flags set
``env.robot.ros2``.

Publishes ``/robot_rl/actor/status`` (std_msgs/String, JSON at ``status_hz``: ``actor_id``, ``state``
``waiting_for_robot``/``acting``/``done``/``failed``/``stopped``, ``episodes``, ``steps``, ``interventions``,
``version`` of the weights, ``learner`` connected). Exits 0 when the learner's budget is spent, 1 on a
fault (the reason on stderr), 2 for a bad parameter.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from functools import partial

from robot_rl.actor_build import build_actor_parts
from robot_rl.hardware.ros2 import msgs
from robot_rl.hardware.ros2.bridge import acquire, release
from robot_rl.hardware.ros2.intervention_device import RosInterventionDevice
from robot_rl.hardware.ros2.node import ParameterError, robot_node_setup
from robot_rl.run_dir import RunDir
from robot_rl.runtime.batched_actor import actor_class
from robot_rl.runtime.local import run_actor
from robot_rl.sim import resolve_control_hz

PARAMETERS: dict = {
    "config": "",
    "overrides": "",
    "actor_id": 0,
    "seed": 0,
    "address": "",
    "sim_prefix": "/robot_rl/sim",
    "intervention_prefix": "/robot_rl/intervention",
    "intervention_timeout_s": 0.5,
    "robot_wait_s": 60.0,
    "status_hz": 1.0,
}
"""The node's parameters and defaults (module doc); :mod:`robot_rl.deploy.ros2.registry` reads them."""
STATUS_TOPIC = "/robot_rl/actor/status"


def ros_actor_build(prefix: str, timeout_s: float):
    """The actor's parts builder (:func:`robot_rl.actor_build.build_actor_parts`) with its intervention
    device on ``intervention_node``'s topics under ``prefix`` (an empty prefix: the config's
    ``intervention.device``)."""
    if not prefix:
        return build_actor_parts
    return partial(build_actor_parts, device=partial(_ros_device, prefix, timeout_s))


def _ros_device(prefix: str, timeout_s: float, cfg, low, high, actor_id: int, task_id: str):
    """:class:`~robot_rl.hardware.ros2.intervention_device.RosInterventionDevice` on ``prefix``'s topics."""
    return RosInterventionDevice(cfg.env.robot.ros2, prefix, low, high, cfg.intervention.scale, timeout_s)


class _Status(threading.Thread):
    """Publishes the actor's status JSON at ``hz`` until closed."""

    def __init__(self, shared, actor_id: int, hz: float) -> None:
        super().__init__(name="actor-status", daemon=True)
        self.pub = shared.publisher(msgs.String, STATUS_TOPIC)
        self.actor_id, self.period = actor_id, 1.0 / hz
        self.state, self.actor = "waiting_for_robot", None
        self.closed = threading.Event()

    def publish(self) -> None:
        line = {"actor_id": self.actor_id, "state": self.state}
        actor = self.actor
        if actor is not None:
            line.update(actor.counters)
            line.update(version=actor.version, learner=bool(actor.sender.connected))
        self.pub.publish(msgs.String(json.dumps(line)))

    def run(self) -> None:
        while not self.closed.wait(self.period):
            self.publish()


def _wait_for_robot(shared, topic: str, wait_s: float) -> bool:
    """Whether a JointState arrived on ``topic`` within ``wait_s`` s."""
    seen = threading.Event()
    shared.subscribe(msgs.JointState, topic, lambda _m: seen.set(), lambda m: m)
    return seen.wait(wait_s)


def main(argv: list[str] | None = None) -> int:
    """``robot-rl ros2 actor_node [--ros-args -p name:=value ...]``; returns 0 when the run's budget is
    spent, 1 on a fault, 2 for bad input."""
    try:
        p, cfg = robot_node_setup(argv, "actor_node", PARAMETERS)
        ros2 = cfg.env.robot.ros2
        if p["address"]:
            cfg.online.address = p["address"]
        if p["status_hz"] <= 0 or p["intervention_timeout_s"] <= 0:
            raise ValueError("status_hz and intervention_timeout_s must be > 0")
        cfg = resolve_control_hz(cfg)
        RunDir(cfg.run_dir).check_writable()
    except (ParameterError, ValueError, OSError) as err:
        print(f"robot-rl ros2 actor_node: {err}", file=sys.stderr)
        return 2
    if p["intervention_prefix"] and cfg.intervention.device != "none":
        logging.getLogger("robot_rl.ros2.actor_node").info(
            "human input from %s/* (intervention.device=%s is not used)",
            p["intervention_prefix"],
            cfg.intervention.device,
        )
    shared = acquire(ros2)
    status = _Status(shared, p["actor_id"], p["status_hz"])
    status.start()
    print("actor_node ready", flush=True)
    code = 1
    try:
        topic = cfg.env.robot.ros2.joint_states_topic
        if not _wait_for_robot(shared, topic, p["robot_wait_s"]):
            raise TimeoutError(f"no sensor_msgs/JointState on {topic} in {p['robot_wait_s']} s")
        code = _run(cfg, p, status)
    except KeyboardInterrupt:  # SIGINT from ros2 launch / Ctrl-C: the actor closed its env on the way out
        status.state, code = "stopped", 0
    except Exception as err:  # one line for the launch log; the traceback is in the log above when logged
        status.state = "failed"
        logging.getLogger("robot_rl.ros2.actor_node").error("%s: %s", type(err).__name__, err)
        print(f"robot-rl ros2 actor_node: {err}", file=sys.stderr)
    finally:
        status.publish()
        status.closed.set()
        status.join(timeout=2)
        release(ros2)
    return code


def _run(cfg, p: dict, status: _Status) -> int:
    """Run the actor as the runtime does (:func:`robot_rl.runtime.local.run_actor`); 0 when done."""
    build = ros_actor_build(p["intervention_prefix"], p["intervention_timeout_s"])

    class Reported(actor_class(cfg)):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, **kw)
            status.actor, status.state = self, "acting"

    t0 = time.monotonic()
    counters = run_actor(cfg, p["seed"], p["actor_id"], actor_cls=Reported, build=build)
    status.state = "done"
    print(f"actor_node done in {time.monotonic() - t0:.1f} s: {json.dumps(counters)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
