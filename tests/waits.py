"""Polling waits for tests that watch another thread, process or socket."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(cond: Callable[[], object], timeout_s: float = 5.0, poll_s: float = 0.01) -> bool:
    """Call ``cond`` every ``poll_s`` s until it returns something true or ``timeout_s`` s have passed;
    returns whether it did (checked once more at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() >= deadline:
            return bool(cond())
        time.sleep(poll_s)
    return True
