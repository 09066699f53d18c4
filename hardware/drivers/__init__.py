"""Robot and camera drivers, each behind its optional extra and imported lazily by
:mod:`robot_rl.hardware.factory`."""
