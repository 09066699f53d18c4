"""Lazy import of a vendor SDK behind an optional extra, with an error that names the ``pip install``."""

from __future__ import annotations

import importlib
from types import ModuleType

from robot_rl.hardware.errors import MissingExtraError


def import_sdk(module: str, extra: str, needed_by: str) -> ModuleType:
    """Import ``module`` (a vendor SDK) on first use.

    Args:
        module: import name, e.g. ``"rtde_control"``.
        extra: the robot-rl extra that installs it, e.g. ``"ur"``.
        needed_by: who needs it, for the message (e.g. ``"env.robot.driver=ur"``).

    Raises:
        MissingExtraError: ``"<needed_by> needs <module>: pip install 'robot-rl[<extra>]'"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"{needed_by} needs {module}: pip install 'robot-rl[{extra}]' ({err})"
        ) from err
