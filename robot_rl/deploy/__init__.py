"""Deployment: what runs a trained policy beside a robot. The policy server (``robot-rl serve``,
:mod:`.policy_server`), its client :class:`~robot_rl.deploy.remote_policy.RemotePolicy` and their wire format
(:mod:`.policy_protocol`), and robot_rl's ROS 2 nodes (:mod:`.ros2`: sim robot, policy, actor,
intervention, critic).

The drivers these talk to stay in :mod:`robot_rl.hardware` (robots, cameras, the ROS 2 bridge and its node
API, safety). Like the outer packages, deploy may import ``sim``/``policies``/``hardware`` at module level;
the core imports it only where a config asks for it (``deploy.server``: ``robot_rl.sources``).
"""
