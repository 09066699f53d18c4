"""Camera drivers: OpenCV (USB/V4L2 device index or path), Intel RealSense (colour + optional depth) and a
recorded video file played at its frame rate (for tests). Each is built by
:func:`robot_rl.hardware.factory.make_camera` from ``env.robot.cameras.<name>``."""
