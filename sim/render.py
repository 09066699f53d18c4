"""Offscreen MuJoCo rendering with EGL, falling back to OSMesa, and a clear error when neither works.

The backend is chosen once per process. ``MUJOCO_GL`` (``egl`` or ``osmesa``), when set, is the only
backend tried. Otherwise ``ROBOT_RL_GL`` (comma-separated, default ``egl,osmesa``) lists the candidates,
and each is probed in a subprocess first: a failed EGL attempt in this process would pin PyOpenGL to the
EGL platform and make the OSMesa fallback impossible. The chosen backend is exported as ``MUJOCO_GL`` so
spawned workers inherit it without probing again.
"""

from __future__ import annotations

import atexit
import weakref

import mujoco
import numpy as np

from robot_rl.sim.gl_env import RendererError, no_backend_message, select_backend

_live: weakref.WeakSet[OffscreenRenderer] = weakref.WeakSet()
_atexit_registered = False


def _close_all() -> None:
    # Registered after the GL backend module is imported, so (LIFO) it runs before the backend's own
    # atexit teardown and the contexts are freed while the display is still alive.
    for renderer in list(_live):
        try:
            renderer.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown: nothing useful left to report
            pass


def _gl_context(backend: str, width: int, height: int):
    if backend == "egl":
        from mujoco.egl import GLContext
    else:
        from mujoco.osmesa import GLContext
    return GLContext(width, height)


class OffscreenRenderer:
    """Renders RGB frames of ``model`` from named cameras.

    Args:
        model: the ``MjModel``; its ``vis.global_.offwidth/offheight`` bound the image size.

    Raises:
        RendererError: no offscreen backend works, or creating the GL context fails.
    """

    def __init__(self, model: mujoco.MjModel) -> None:
        self.backend = select_backend()
        self.model = model
        self.max_size = min(model.vis.global_.offwidth, model.vis.global_.offheight)
        try:
            self._ctx = _gl_context(self.backend, self.max_size, self.max_size)
            self._ctx.make_current()
            self._con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150)
        except Exception as err:  # noqa: BLE001 - any GL failure becomes one clear error
            raise RendererError(no_backend_message({self.backend: f"{type(err).__name__}: {err}"})) from err
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, self._con)
        self._scene = mujoco.MjvScene(model, maxgeom=1000)
        self._opt = mujoco.MjvOption()
        self._cam = mujoco.MjvCamera()
        self._cam.type = mujoco.mjtCamera.mjCAMERA_FIXED
        self._pert = mujoco.MjvPerturb()
        _live.add(self)
        global _atexit_registered
        if not _atexit_registered:
            atexit.register(_close_all)
            _atexit_registered = True

    def render(
        self, data: mujoco.MjData, camera: str, size: int, model: mujoco.MjModel | None = None
    ) -> np.ndarray:
        """uint8 (size, size, 3) RGB image from camera ``camera`` (a name in the model). ``model``: a copy of
        the renderer's model with other visual parameters (camera poses, lights, colours; e.g. an env's
        ``env.randomize`` draws) to render ``data`` with; default the renderer's.

        Raises:
            ValueError: ``size`` exceeds the model's offscreen buffer or the camera does not exist.
        """
        if not 0 < size <= self.max_size:
            raise ValueError(f"image size {size} must be in [1, {self.max_size}]")
        cam_id = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, camera)
        if cam_id < 0:
            raise ValueError(f"camera {camera!r} not in the model")
        self._ctx.make_current()
        self._cam.fixedcamid = cam_id
        mujoco.mjv_updateScene(
            self.model if model is None else model,
            data,
            self._opt,
            self._pert,
            self._cam,
            mujoco.mjtCatBit.mjCAT_ALL,
            self._scene,
        )
        viewport = mujoco.MjrRect(0, 0, size, size)
        mujoco.mjr_render(viewport, self._scene, self._con)
        rgb = np.empty((size, size, 3), dtype=np.uint8)
        mujoco.mjr_readPixels(rgb, None, viewport, self._con)
        return np.ascontiguousarray(rgb[::-1])

    def close(self) -> None:
        """Free the GL context."""
        if getattr(self, "_ctx", None) is not None:
            self._con.free()
            self._ctx.free()
            self._ctx = None
