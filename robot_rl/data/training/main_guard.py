"""Refuse to start spawned worker processes from the unguarded top level of a user's script.

A ``spawn`` (or ``forkserver``) child re-imports the parent's ``__main__`` script to rebuild its state. When
the script starts the workers from its top level, without ``if __name__ == "__main__":``, every child
re-runs the script (loading the dataset again) and fails in its bootstrapping phase; the parent then
reports a worker that "exited unexpectedly" or, as users reported, blocks on its pipe.
:func:`check_main_guard` finds the script line running now and, when it is not inside such a guard,
raises :class:`MainGuardError` naming the file and line before any worker starts.
"""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path


class MainGuardError(RuntimeError):
    """Worker processes would be started from a script's unguarded top level (they would hang)."""


def _is_main_test(node: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either order)."""
    if not (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)):
        return False
    sides = [node.left, node.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    consts = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(consts) == 1


@lru_cache(maxsize=8)
def _guarded_lines(path: str, mtime_ns: int) -> tuple[tuple[int, int], ...]:
    """(first, last) line spans of the bodies of ``if __name__ == "__main__":`` blocks in ``path``."""
    del mtime_ns  # part of the cache key only
    tree = ast.parse(Path(path).read_text(), filename=path)
    return tuple(
        (node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_main_test(node.test)
    )


def check_main_guard(what: str) -> None:
    """Raise :class:`MainGuardError` when the ``__main__`` script's top-level code now running (the line
    that led to this call) is outside an ``if __name__ == "__main__":`` block. ``what`` names the
    processes in the message (e.g. "2 DataLoader workers").

    Nothing is checked when ``__main__`` is not a readable ``.py`` file (an interactive session,
    ``python -c``, ``python -m`` of an installed module's entry point, a notebook): spawn re-imports nothing
    there. Only the top-level frame of the script is examined, so calls made from functions the guarded
    block runs pass.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not str(path).endswith(".py") or not Path(path).is_file():
        return
    frame = sys._getframe(1)
    while frame is not None and not (
        frame.f_code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__"
    ):
        frame = frame.f_back
    if frame is None:
        return
    try:
        spans = _guarded_lines(str(Path(path).resolve()), Path(path).stat().st_mtime_ns)
    except (OSError, SyntaxError, ValueError):
        return
    line = frame.f_lineno
    if not any(lo <= line <= hi for lo, hi in spans):
        raise MainGuardError(
            f"{path}:{line} starts {what} from the script's top level; spawned workers re-run the script "
            'and would hang. Put the code under `if __name__ == "__main__":` (or set the worker count '
            "to 0)"
        )
