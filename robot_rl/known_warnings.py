"""Silence third-party noise that is known to be harmless, so a user sees robot_rl's own messages.

Filtered, and nothing else:

- gymnasium's passive env checker warning that an observation is not within the env's declared
  observation space (third-party envs often declare tighter bounds than they emit; robot_rl reads the
  values, not the bounds);
- PyOpenGL's INFO line "No OpenGL_accelerate module loaded" (logger ``OpenGL.acceleratesupport``): the
  optional C accelerator is not needed for MuJoCo's offscreen context, and the line reached the stderr of
  every command that configures INFO logging (``robot-rl online``) whenever ``MUJOCO_GL`` was set;
- tracebacks from ``__del__`` of MuJoCo/gymnasium OpenGL contexts and viewers (``GLContext.__del__``,
  ``OffScreenViewer.__del__``) that run after EGL was terminated at interpreter exit
  ("Exception ignored in: ..."): the process is ending and the GPU context is gone either way.

:func:`filter_known_warnings` installs the three filters; it is idempotent and cheap, and is called by the
CLI and by :func:`robot_rl.sim.make_env` (so spawned env workers get it too).
"""

from __future__ import annotations

import logging
import sys
import warnings

IGNORED_MESSAGES = (r".*is not within the observation space",)
"""Regexes (``warnings.filterwarnings(message=...)``) of harmless third-party warnings."""

TEARDOWN_MODULES = ("mujoco.", "gymnasium.envs.mujoco.", "OpenGL.")
"""Modules whose ``__del__`` failures at teardown are dropped instead of printed."""


def is_gl_teardown(unraisable) -> bool:
    """True for an unraisable exception (``sys.unraisablehook``'s argument) raised in the ``__del__`` of an
    OpenGL context or viewer of :data:`TEARDOWN_MODULES`."""
    obj = unraisable.object
    module = getattr(obj, "__module__", "") or ""
    name = getattr(obj, "__qualname__", "") or ""
    return name.endswith("__del__") and module.startswith(TEARDOWN_MODULES)


def _hook(unraisable) -> None:
    if not is_gl_teardown(unraisable):
        _previous(unraisable)


_previous = sys.unraisablehook


def filter_known_warnings() -> None:
    """Install the warning filters, PyOpenGL's log level and the ``sys.unraisablehook`` for GL teardown
    (module docstring)."""
    global _previous
    for pattern in IGNORED_MESSAGES:
        warnings.filterwarnings("ignore", message=pattern)
    logging.getLogger("OpenGL.acceleratesupport").setLevel(logging.WARNING)
    if sys.unraisablehook is not _hook:
        _previous = sys.unraisablehook
        sys.unraisablehook = _hook
