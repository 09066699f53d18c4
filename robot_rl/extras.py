"""Optional packages (extras): a clear error naming the ``pip install`` that adds a missing one."""

from __future__ import annotations

import importlib.util


class MissingExtraError(ImportError):
    """An optional package a setting asks for is not installed; the message names the setting and the
    ``pip install`` that fixes it."""


def require(module: str, needed_by: str, install: str) -> None:
    """Check that ``module`` is importable, without importing it.

    Raises:
        MissingExtraError: ``"<needed_by> needs <module>: <install>"``, e.g. ``online.wandb=true needs
            wandb: pip install wandb``.
    """
    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(f"{needed_by} needs {module}: {install}")
