"""Test support for robot_rl, shipped apart from it: device emulators (the Feetech bus of an SO-101 on a pty,
:mod:`.bus_emulator`; an xArm 7 control box on loopback TCP, :mod:`.xarm_emulator`), the independent audit of
the safety layer (:mod:`.safety_audit`) and synthetic observation/statistics/batch fakes (:mod:`.fakes`).

Tests and benchmarks import it; robot_rl never does (tests/core/test_layering.py checks). It is its own
distribution, ``robot-rl-testing`` (``testing/pyproject.toml``), installed by ``./setup.sh test``, and not
in the ``robot-rl`` wheel.
"""
