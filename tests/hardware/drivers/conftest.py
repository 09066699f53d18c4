"""Fixtures of the driver tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def xarm_emu(monkeypatch):
    """A running xArm 7 control box emulator (:mod:`robot_rl_testing.xarm_emulator`) with the real
    ``xarm-python-sdk`` pointed at its ports (``XCONF.SocketConf``); the test modules that use it skip
    without ``mujoco`` or ``xarm``."""
    from xarm.core.config.x_config import XCONF

    from robot_rl_testing.xarm_emulator import XArmControllerEmulator

    with XArmControllerEmulator() as emulator:
        for name, port in emulator.sdk_overrides.items():
            monkeypatch.setattr(XCONF.SocketConf, name, port)
        yield emulator
