"""Per-step joint motion limits with braking look-ahead, the arithmetic behind the safety layer.

A joint trajectory is commanded one control step ``dt`` (s) at a time: ``q_next = q + v * dt`` with the
step velocity ``v`` (rad/s) held over the step. Between steps the velocity may change by at most
``a * dt`` (``a`` the acceleration limit, rad/s²). The *stop point* of a state ``(q, v)`` is where the joint
ends when every later step brakes as hard as allowed, ``v_k = sign(v) * max(|v| - k a dt, 0)``. One
braking step leaves the stop point where it was (exactly, see :func:`stop_offset`), so a trajectory whose
stop point is always inside the limits can always stop inside them: that is the invariant the safety
layer keeps for joint limits and for the workspace box.
"""

from __future__ import annotations

import numpy as np


def stop_offset(v: np.ndarray, acc: np.ndarray, dt: float) -> np.ndarray:
    """Signed distance (rad, (n,) float64) from the current position to the stop point of velocity ``v``
    (n,) rad/s braking at ``acc`` (n,) rad/s² each step of ``dt`` s: ``dt * sum_{k>=1} max(|v| - k a dt, 0)``
    with the sign of ``v``. After one braking step the offset shrinks by exactly that step's move."""
    speed = np.abs(v)
    dv = acc * dt
    n = np.floor(speed / dv)
    return np.sign(v) * dt * (n * speed - dv * n * (n + 1) / 2)


def braking_velocity(v: np.ndarray, acc: np.ndarray, dt: float) -> np.ndarray:
    """The next step velocity (n,) rad/s when braking as hard as ``acc`` allows from ``v``."""
    return np.sign(v) * np.maximum(np.abs(v) - acc * dt, 0.0)


def max_speed_within(distance: np.ndarray, acc: np.ndarray, dt: float) -> np.ndarray:
    """A step speed (n,) rad/s >= 0 whose step plus braking covers at most ``distance`` (n,) rad.

    The step-and-brake distance of speed ``s`` is at most ``s²/(2a) + s dt/2 + a dt²/8`` (the discrete sum
    exceeds the continuous one by at most ``a dt²/8``), which equals ``distance`` at
    ``s = sqrt(2 a d) - a dt / 2``; so the returned speed is safe, if slightly conservative.
    """
    return np.maximum(np.sqrt(2.0 * acc * np.maximum(distance, 0.0)) - acc * dt / 2.0, 0.0)


def braking_path(
    q: np.ndarray, v: np.ndarray, acc: np.ndarray, dt: float, max_points: int = 16
) -> np.ndarray:
    """Positions (k, n) rad after each braking step from ``q`` (n,) rad at velocity ``v`` (n,) rad/s until
    every joint stops (k = 0 when already stopped); more than ``max_points`` steps are thinned evenly, the
    last (the stop point) kept. A braking step's own path is the tail of this one."""
    dv = acc * dt
    steps = int(np.max(np.ceil(np.abs(v) / dv))) if v.size else 0
    k = np.arange(1, steps + 1)[:, None]
    path = q + dt * np.cumsum(np.sign(v) * np.maximum(np.abs(v) - k * dv, 0.0), axis=0)
    if len(path) > max_points:
        path = path[np.linspace(0, len(path) - 1, max_points).round().astype(int)]
    return path
