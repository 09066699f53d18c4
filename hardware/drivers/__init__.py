"""Robot drivers behind the :class:`~robot_rl.hardware.robot.Robot` interface; each vendor SDK is an optional
extra, imported lazily when the driver connects."""
