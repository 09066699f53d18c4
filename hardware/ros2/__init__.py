"""ROS 2 for robot_rl: standard messages with ROS 2's DDS wire names (:mod:`.msgs`), one node API over
rclpy or cyclonedds (:mod:`.node`), and the nodes (sim robot, robot bridge, policy, actor, intervention,
critic). See README "ROS 2"."""
