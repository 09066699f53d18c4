"""ROS 2 for robot_rl: standard messages with ROS 2's DDS wire names (:mod:`.msgs`), one node API over
rclpy or cyclonedds (:mod:`.node`), and the drivers on it: the robot and camera bridge (:mod:`.bridge`) and
the intervention device (:mod:`.intervention_device`). The nodes themselves are in
:mod:`robot_rl.deploy.ros2`. See README "ROS 2"."""
