"""``MUJOCO_GL`` checked before MuJoCo is imported: MuJoCo raises a bare RuntimeError from inside its own
import for an unknown value, so a typo would surface as a traceback deep in env construction."""

from __future__ import annotations

import os
import platform

# The values MuJoCo's own gl_context accepts on this platform (mujoco/rendering/classic/gl_context.py);
# robot_rl renders offscreen with egl or osmesa (robot_rl.sim.render).
_COMMON = ("", "glfw", "enable", "enabled", "on", "true", "1", "disable", "disabled", "off", "false", "0")
_PLATFORM = {"Linux": ("egl", "osmesa", "glx"), "Windows": ("wgl",), "Darwin": ("cgl",)}


class RendererError(RuntimeError):
    """No offscreen OpenGL backend works, or ``MUJOCO_GL`` names none; the message names the backend(s),
    why, and the fix."""


def check_mujoco_gl() -> None:
    """Raise :class:`RendererError` naming ``MUJOCO_GL``, its value and the valid values when MuJoCo would
    refuse it at import."""
    value = os.environ.get("MUJOCO_GL", "").strip().lower()
    platform_values = _PLATFORM.get(platform.system(), ())
    if value not in _COMMON + platform_values:
        offscreen = " or ".join(v for v in ("egl", "osmesa") if v in platform_values) or "glfw"
        raise RendererError(
            f"MUJOCO_GL={os.environ['MUJOCO_GL']!r} is not a MuJoCo GL backend: set MUJOCO_GL={offscreen} "
            f"(or {', '.join(v for v in platform_values + ('glfw',) if v not in ('egl', 'osmesa'))}), "
            "or unset it to pick one automatically"
        )
