"""Robot drivers behind the :class:`~robot_rl.hardware.robot.Robot` interface, each imported lazily by
:mod:`robot_rl.hardware.factory` so a missing vendor SDK only matters to the robot that needs it."""
