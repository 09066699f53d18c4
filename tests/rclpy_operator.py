"""A human operator written with plain rclpy (no robot_rl import): publishes what ``intervention_node``
publishes for a held pad, under ``/robot_rl/intervention``, at 20 Hz until stdin closes: ``active`` (Bool,
true), ``twist`` (TwistStamped, unitless: +x for 1 s, then -x for 1 s, and so on, a little +z) and
``gripper`` (Float32 closure: 0 and 1 by turns every 0.5 s, so any 1.5-s window, such as a 15-step
episode at 10 Hz, holds one whole closed half-second whatever its phase). Runs on whatever RMW ROS 2 picks
(Fast DDS by default), in ``ROS_DOMAIN_ID``.
"""

import sys
import threading
import time

import rclpy
from geometry_msgs.msg import TwistStamped
from rclpy.node import Node
from std_msgs.msg import Bool, Float32

PREFIX = "/robot_rl/intervention"


def main() -> None:
    rclpy.init()
    node = Node("plain_operator")
    active = node.create_publisher(Bool, f"{PREFIX}/active", 10)
    twist = node.create_publisher(TwistStamped, f"{PREFIX}/twist", 10)
    gripper = node.create_publisher(Float32, f"{PREFIX}/gripper", 10)
    stdin_closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stdin_closed.set()), daemon=True).start()
    start = time.monotonic()
    while not stdin_closed.is_set():
        t = time.monotonic() - start
        msg = TwistStamped()
        msg.header.stamp = node.get_clock().now().to_msg()
        msg.header.frame_id = "base_link"
        msg.twist.linear.x = 1.0 if int(t) % 2 == 0 else -1.0
        msg.twist.linear.z = 0.2
        active.publish(Bool(data=True))
        twist.publish(msg)
        gripper.publish(Float32(data=float(int(2 * t) % 2)))
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.shutdown()


if __name__ == "__main__":
    main()
