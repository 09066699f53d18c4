"""Lazily imported package names (PEP 562): a package's ``__init__`` lists where each public name lives,
and the module is imported on the name's first use, so importing the package stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_getattr(package: str, exports: dict[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``name`` -> ``getattr(import_module(exports[name]), name)``.

    Raises:
        AttributeError: (from the returned function) ``name`` is not in ``exports``.
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
