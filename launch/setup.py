"""ament_python set-up of the ROS 2 package ``robot_rl`` (launch/README.md): installs the node executables
(console entry points into robot_rl's node modules, which come from ``pip install 'robot-rl[ros]'``), the
launch files and their parameter files, so ``ros2 run robot_rl <node>`` and ``ros2 launch robot_rl <file>``
find them after ``colcon build``."""

from glob import glob

from setuptools import setup

PACKAGE = "robot_rl"
NODES = {
    "sim_robot_node": "robot_rl.deploy.ros2.sim_robot_node:main",
    "policy_node": "robot_rl.deploy.ros2.policy_node:main",
    "actor_node": "robot_rl.deploy.ros2.actor_node:main",
    "intervention_node": "robot_rl.deploy.ros2.intervention_node:main",
    "critic_node": "robot_rl.deploy.ros2.critic_node:main",
}

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=[],
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", sorted(glob("*.launch.xml"))),
        (f"share/{PACKAGE}/params", sorted(glob("params/*.yaml"))),
    ],
    install_requires=["setuptools"],
    zip_safe=True,
    description="ROS 2 nodes and launch files of robot_rl",
    license="Apache-2.0",
    entry_points={"console_scripts": [f"{name} = {target}" for name, target in NODES.items()]},
)
