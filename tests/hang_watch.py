"""Hang and deadline watches for the test session, so that a CI run that would hit its time limit says
where it was instead of printing nothing.

Two CI runs (stops 28 and 31) ended at the 90-minute limit with only progress dots printed, and
pytest-timeout's limit never reported a test. Two holes are closed here:

- **Per-test backstop** (workers): pytest-timeout's SIGALRM acts only while the main thread runs Python
  and fires once per test. A C watchdog thread (``faulthandler.dump_traceback_later``) ends the worker
  ``BACKSTOP_S`` past the test's limit, writing every thread's stack first. pytest's own faulthandler
  plugin cancels that watchdog whenever a test raises (its ``pytest_exception_interact``), pytest-timeout's
  failure included, so a teardown stuck after the alarm went unwatched: the watchdog is re-armed there.
- **Session deadline** (the xdist controller): with ``ROBOT_RL_TEST_DEADLINE`` (Unix seconds; ``.ci/run``
  sets it a few minutes before CI's limit), a thread prints the tests still running and for how long, how
  many have finished, and how long the run and the install before it took; it then asks every worker for
  its threads' stacks (SIGUSR1, registered with faulthandler) and ends the run with exit status
  :data:`DEADLINE_STATUS`.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

DEADLINE_STATUS = 86
"""Exit status of a session ended at its deadline: none of pytest's own (0-5: 3 is an internal error, which
``.ci/run`` must not report as a hang) nor ``timeout``'s (124-137)."""

BACKSTOP_S = float(os.environ.get("ROBOT_RL_TEST_BACKSTOP_S", "120"))
"""Seconds past a test's pytest-timeout limit before the worker is ended (``ROBOT_RL_TEST_BACKSTOP_S``)."""

_STDERR = pytest.StashKey[int]()
_STARTED = pytest.StashKey[float]()


def configure(config: pytest.Config) -> None:
    """Keep a copy of the real stderr (taken before pytest captures fd 2: under xdist it is the run's own
    output); in a worker, dump every thread's stack on SIGUSR1; in the controller, start the deadline
    watch when ``ROBOT_RL_TEST_DEADLINE`` is set."""
    config.stash[_STDERR] = os.dup(2)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        faulthandler.register(signal.SIGUSR1, file=config.stash[_STDERR], all_threads=True)
        return
    deadline = os.environ.get("ROBOT_RL_TEST_DEADLINE")
    if deadline:
        watch = _DeadlineWatch(float(deadline), config)
        config.pluginmanager.register(watch, "robot_rl_deadline_watch")
        threading.Thread(target=watch.run, name="test-deadline", daemon=True).start()


def unconfigure(config: pytest.Config) -> None:
    os.close(config.stash[_STDERR])


def _limit(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker and marker.args else float(item.config.getini("timeout") or 0)


def _arm(item: pytest.Item) -> None:
    remaining = item.stash[_STARTED] + _limit(item) + BACKSTOP_S - time.monotonic()
    faulthandler.dump_traceback_later(max(remaining, 1.0), exit=True, file=item.config.stash[_STDERR])


def start_backstop(item: pytest.Item) -> bool:
    """Arm the watchdog for ``item`` (setup, call and teardown); False when the test has no time limit."""
    if _limit(item) <= 0:
        return False
    item.stash[_STARTED] = time.monotonic()
    _arm(item)
    return True


def stop_backstop(item: pytest.Item) -> None:
    del item.stash[_STARTED]
    faulthandler.cancel_dump_traceback_later()


def rearm_backstop(node: pytest.Item | pytest.Collector) -> None:
    """Re-arm after pytest's faulthandler plugin cancelled the watchdog on a raised exception."""
    if isinstance(node, pytest.Item) and _STARTED in node.stash:
        _arm(node)


class _DeadlineWatch:
    """The controller's record of the tests running (``pytest_runtest_logstart``/``logfinish``, which xdist
    forwards from the workers) and the thread that reports them at the deadline."""

    def __init__(self, deadline: float, config: pytest.Config) -> None:
        self.deadline = deadline
        self.config = config
        self.stderr = config.stash[_STDERR]
        self.session_start = time.time()
        self.running: dict[str, float] = {}
        self.finished = 0
        self.lock = threading.Lock()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        with self.lock:
            self.running[nodeid] = time.time()

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        with self.lock:
            self.running.pop(nodeid, None)
            self.finished += 1

    def run(self) -> None:
        while time.time() < self.deadline:
            time.sleep(min(30.0, max(self.deadline - time.time(), 0.1)))
        now = time.time()
        with self.lock:
            running = sorted(self.running.items(), key=lambda kv: kv[1])
            finished = self.finished
        ci_start = os.environ.get("ROBOT_RL_CI_START")
        lines = [
            "",
            "[deadline] ROBOT_RL_TEST_DEADLINE reached: the test session ran"
            + f" {now - self.session_start:.0f} s"
            + (f", {self.session_start - float(ci_start):.0f} s after CI started" if ci_start else "")
            + f"; {finished} tests finished; still running:",
            *(f"[deadline]   {nodeid} (for {now - began:.0f} s)" for nodeid, began in running),
            "[deadline] the stacks follow (each worker's, or this process's without workers), then this"
            f" summary again; the run ends with exit status {DEADLINE_STATUS}",
        ]
        summary = ("\n".join(lines) + "\n").encode()
        os.write(self.stderr, summary)
        workers = _children(os.getpid()) if self.config.pluginmanager.hasplugin("dsession") else []
        for pid in workers:
            _signal(pid, signal.SIGUSR1)
        if not workers:
            faulthandler.dump_traceback(self.stderr, all_threads=True)
        time.sleep(10.0 if workers else 0.0)
        os.write(self.stderr, summary)  # last, so that a log cut to its tail still shows it
        for pid in workers:
            _signal(pid, signal.SIGKILL)
        sys.stdout.flush()
        os._exit(DEADLINE_STATUS)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc): the xdist workers of the controller."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
