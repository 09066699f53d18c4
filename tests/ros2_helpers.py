"""Helpers of the ROS 2 tests: a DDS domain id of their own per test (no cross-talk between tests or
between concurrent test sessions on this host), and node command lines on the loopback-only config."""

from __future__ import annotations

import itertools
import os

_counter = itertools.count()


def new_domain() -> int:
    """A DDS domain id in [100, 230) not used before in this process (offset by the pid, so concurrent
    sessions on one host rarely collide)."""
    return 100 + (os.getpid() * 7 + next(_counter)) % 130


def node_flags(domain: int) -> list[str]:
    """Command-line flags putting a node on ``domain`` over the loopback-only cyclonedds config."""
    return ["--ros-transport", "cyclonedds", f"--domain-id={domain}", "--dds-loopback"]
