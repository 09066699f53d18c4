"""``MUJOCO_GL`` checked before MuJoCo is imported: MuJoCo raises a bare RuntimeError from inside its own
import for an unknown value, so a typo would surface as a traceback deep in env construction. Also the
offscreen backend probe (:func:`select_backend`), which runs MuJoCo only in a subprocess, so choosing a
backend does not import MuJoCo here (see :mod:`robot_rl.sim.render` for the order it tries)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

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


BACKENDS = ("egl", "osmesa")
FIX = {"egl": "apt-get install libegl1", "osmesa": "apt-get install libosmesa6"}

_PROBE = """
import mujoco, numpy as np
xml = '<mujoco><worldbody><light pos="0 0 1"/><geom size=".1"/></worldbody></mujoco>'
m = mujoco.MjModel.from_xml_string(xml)
d = mujoco.MjData(m); mujoco.mj_forward(m, d)
from mujoco.{backend} import GLContext
ctx = GLContext(16, 16); ctx.make_current()
con = mujoco.MjrContext(m, mujoco.mjtFontScale.mjFONTSCALE_150)
ctx.free()
"""
_chosen: str | None = None


def _probe(backend: str) -> str | None:
    """None if ``backend`` renders in a fresh interpreter, else the reason it does not."""
    env = {**os.environ, "MUJOCO_GL": backend, "PYOPENGL_PLATFORM": backend}
    try:
        out = subprocess.run(
            [sys.executable, "-c", _PROBE.format(backend=backend)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    if out.returncode == 0:
        return None
    lines = (out.stderr or out.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {out.returncode}"


def select_backend() -> str:
    """The offscreen GL backend for this process (``egl`` or ``osmesa``), probed once and cached.

    Raises:
        RendererError: no candidate backend works (names each, its error, and the apt package to install).
    """
    global _chosen
    if _chosen is not None:
        return _chosen
    forced = os.environ.get("MUJOCO_GL", "").strip().lower()
    if forced in BACKENDS:
        candidates = [forced]
    else:
        candidates = [b.strip().lower() for b in os.environ.get("ROBOT_RL_GL", ",".join(BACKENDS)).split(",")]
    errors = {}
    for backend in candidates:
        if backend not in BACKENDS:
            errors[backend] = "not a supported offscreen backend"
            continue
        if backend == forced and os.environ.get("PYOPENGL_PLATFORM", backend) == backend:
            reason = None  # explicitly requested: try it in-process, errors surface below
        else:
            reason = _probe(backend)
        if reason is None:
            os.environ["MUJOCO_GL"] = backend
            os.environ.setdefault("PYOPENGL_PLATFORM", backend)
            _chosen = backend
            return backend
        errors[backend] = reason
    raise RendererError(no_backend_message(errors))


def no_backend_message(errors: dict[str, str]) -> str:
    """The :class:`RendererError` text for ``errors`` (backend -> why it failed), naming the apt fix."""
    tried = "; ".join(f"{b}: {e}" for b, e in errors.items())
    return (
        "no offscreen OpenGL backend works (tried EGL and OSMesa). "
        f"Tried {tried}. Fix: `{FIX['egl']}` (EGL) or `{FIX['osmesa']}` (OSMesa, software), "
        "or set MUJOCO_GL=egl|osmesa."
    )
