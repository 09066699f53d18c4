"""One sample of every ROS 2 message type robot_rl publishes or subscribes, each field set to a value other
than its default (floats exactly representable in float32 where the field is float32), shared by the CDR
byte check and the interop test."""

from __future__ import annotations

from robot_rl.hardware.ros2 import msgs

H = msgs.Header(msgs.Time(1_700_000_000, 123_456_789), "base_link")
SAMPLES = [
    msgs.Time(-3, 999_999_999),
    msgs.Duration(2, 500),
    H,
    msgs.Bool(True),
    msgs.String("pick the cube ünïcode"),
    msgs.Float32(0.625),
    msgs.Float32MultiArray(
        msgs.MultiArrayLayout([msgs.MultiArrayDimension("h", 4, 28), msgs.MultiArrayDimension("d", 7, 7)], 1),
        [0.5, -1.25, 3.0],
    ),
    msgs.Float64MultiArray(data=[0.1, 0.2, -0.3, 1e-9, 7.0, 8.0, 9.0]),
    msgs.JointState(H, [f"joint{i}" for i in range(1, 8)], [0.1] * 7, [0.0, 1.0, 2.0], []),
    msgs.Image(H, 2, 3, "rgb8", 0, 9, bytes(range(18))),
    msgs.CompressedImage(H, "jpeg", b"\xff\xd8\xff\xe0abc"),
    msgs.Joy(H, [0.5, -1.0], [0, 1, 1]),
    msgs.PoseStamped(H, msgs.Pose(msgs.Point(0.1, 0.2, 0.3), msgs.Quaternion(0.0, 1.0, 0.0, 0.0))),
    msgs.TwistStamped(H, msgs.Twist(msgs.Vector3(0.01, 0.0, -0.02), msgs.Vector3(0.0, 0.1, 0.0))),
    msgs.JointTrajectory(
        H,
        ["joint1", "joint2"],
        [
            msgs.JointTrajectoryPoint([0.1, 0.2], [], [], [], msgs.duration(0.1)),
            msgs.JointTrajectoryPoint([0.3, 0.4], [1.0, 1.0], [0.0, 0.0], [], msgs.duration(0.2)),
        ],
    ),
]
