"""A fixed-rate control loop: sleep to the next deadline, count missed deadlines, measure robot I/O latency.

A real robot expects one command every ``1 / hz`` s. :class:`RateLoop` keeps deadlines on a fixed grid
``t_k = t_0 + k / hz`` (``time.monotonic()``), so a late step does not shift every later one. A step that
reaches its deadline more than one period late is a **deadline miss**: the loop then restarts its grid from
now instead of firing the skipped ticks back to back (a burst of stale commands is worse than a gap).

With ``realtime=False`` (the in-process lock-step simulator, where each command advances physics by one
period) the loop never sleeps, so tests run as fast as the CPU allows; the figures are still recorded.
"""

from __future__ import annotations

import time
from collections import deque

import numpy as np

WINDOW = 1000
"""Number of recent steps the jitter and latency percentiles are computed over."""


class RateLoop:
    """Deadline keeper of one control loop.

    Args:
        hz: control rate (Hz), > 0.
        realtime: sleep to each deadline (a real or real-time simulated robot); ``False``: never sleep.
        window: recent steps the percentiles cover.

    Raises:
        ValueError: ``hz`` not a positive finite number, or ``window`` < 1.
    """

    def __init__(self, hz: float, realtime: bool = True, window: int = WINDOW) -> None:
        if not (np.isfinite(hz) and hz > 0):
            raise ValueError(f"control rate must be a positive number of Hz, got {hz}")
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.hz, self.period, self.realtime = float(hz), 1.0 / float(hz), bool(realtime)
        self._jitter: deque[float] = deque(maxlen=window)
        self._latency: deque[float] = deque(maxlen=window)
        self.restart()

    def restart(self) -> None:
        """Start a new grid at now (after a reset or a pause) and clear the counters."""
        now = time.monotonic()
        self._start = now
        self._deadline = now + self.period
        self._jitter.clear()
        self._latency.clear()
        self.steps = 0
        self.misses = 0

    def wait(self) -> float:
        """Sleep until the next deadline (realtime) and advance the grid.

        Returns the lateness (s): how far past the deadline this call returned (>= 0 when realtime; 0 when
        not realtime). A lateness over one period counts as a miss and restarts the grid from now.
        """
        self.steps += 1
        if not self.realtime:
            return 0.0
        now = time.monotonic()
        if now < self._deadline:
            time.sleep(self._deadline - now)
            now = time.monotonic()
        late = now - self._deadline
        self._jitter.append(late)
        if late > self.period:
            self.misses += 1
            self._deadline = now + self.period
        else:
            self._deadline += self.period
        return late

    def record_latency(self, seconds: float) -> None:
        """Record one step's robot I/O time (s): the time spent blocked in ``command`` and ``read``."""
        self._latency.append(float(seconds))

    def stats(self) -> dict[str, float]:
        """The loop's figures since :meth:`restart`.

        ``hz_achieved``: steps per wall-clock second (far above ``hz`` when not realtime);
        ``jitter_p50_ms``/``jitter_p99_ms``: lateness of the wake-up past its deadline (ms, realtime only,
        0 otherwise); ``misses``: deadlines missed by more than one period; ``latency_p50_ms``/
        ``latency_p99_ms``: robot I/O time per step (ms); ``steps``.
        """
        elapsed = time.monotonic() - self._start
        jitter = np.asarray(self._jitter) * 1e3 if self._jitter else np.zeros(1)
        latency = np.asarray(self._latency) * 1e3 if self._latency else np.zeros(1)
        return {
            "hz_target": self.hz,
            "hz_achieved": self.steps / elapsed if elapsed > 0 else 0.0,
            "jitter_p50_ms": float(np.percentile(jitter, 50)),
            "jitter_p99_ms": float(np.percentile(jitter, 99)),
            "latency_p50_ms": float(np.percentile(latency, 50)),
            "latency_p99_ms": float(np.percentile(latency, 99)),
            "misses": int(self.misses),
            "steps": int(self.steps),
        }
