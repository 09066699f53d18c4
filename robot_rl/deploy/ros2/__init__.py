"""robot_rl's ROS 2 nodes (``robot-rl ros2 <node>``, ``ros2 run robot_rl <node>``; :mod:`.registry`): the
simulated arm, the policy, the online actor, the intervention (Joy) and the progress critic, each built on
the node API of :mod:`robot_rl.hardware.ros2` (rclpy or cyclonedds). See docs/ros2.md."""
