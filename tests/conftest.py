"""Shared fixtures."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import hang_watch
import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each xdist worker, and every process its tests start, shares the cores with the other worker's torch
    # work. libgomp's default (active) wait spins idle OpenMP threads on the cores the other side needs:
    # two `robot-rl critic train` runs side by side took 126-187 s each with it, 48-51 s with passive
    # waiting (alone: 28 s, 34 s passive). Set before anything here imports torch (libgomp reads it once).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_configure(config):
    hang_watch.configure(config)


def pytest_unconfigure(config):
    hang_watch.unconfigure(config)


_SESSION_START = time.monotonic()
_WORKER_DONE: dict[str, float] = {}
"""xdist controller: seconds from the session's start to each worker's end (``pytest_testnodedown``)."""


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    _WORKER_DONE[node.gateway.id] = time.monotonic() - _SESSION_START


def pytest_terminal_summary(terminalreporter):
    """Under xdist, when each worker ended and the tail (the seconds between the first worker running out
    of tests and the last one finishing): how well ``HEAVY_FIRST`` balanced the run."""
    if len(_WORKER_DONE) < 2:
        return
    ends = sorted(_WORKER_DONE.items(), key=lambda kv: kv[1])
    listed = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in ends)
    terminalreporter.write_line(
        f"xdist workers ended after {listed}: a tail of {ends[-1][1] - ends[0][1]:.0f} s with a worker idle"
    )


# The costliest test files, costliest first: seconds of one serial `pytest -n 0` run of the file on this
# 2-core machine, quiet (2026-11-28), or of the slowest tests in full runs' --durations (CI's clean clone,
# empty JAX cache: issue 36). They go first so that the two xdist workers (--dist loadfile,
# --no-loadscope-reorder) never end the run with one of them still in a long file and the other idle:
# xdist's default order (most tests first) handed out the long one- and two-test files (the robot-server
# stage run, the MJX smoke runs, the ROS 2 pipelines) last. Modules that run `alone` go before them all.
# Base names: unique across the mirrored tree (tests/README.md), which
# tests/testing/test_tests_layout.py checks, as it checks that each one names a test file.
HEAVY_FIRST = (
    # the e2e tier (`-m e2e`)
    "test_sim_mjx.py",  # 180+ cold (full run: stack 98 + push 80 compiling MJX)
    "test_sim_mjx_bench.py",  # 168 cold (full run), 76 warm
    "test_critic.py",  # 132 with 400 critic steps, now 200: the trained-critic fixture (24 demos)
    "test_robot_env_stages.py",  # 123 (full run): five real-time stages on the robot server
    "test_ros2_policy_kill.py",  # up to 120 (full runs)
    "test_sim_maniskill.py",  # about 80 (full runs: 48 setup + 22-32 call)
    "test_ros2_stock_pipeline.py",  # 38-60 (full runs)
    "test_online_vla.py",  # 32-48 (full runs)
    "test_sim_mjx_pipeline.py",  # 42
    "test_online_outage.py",  # 41: a 15-s learner outage
    "test_online_batched.py",  # 6 online runs
    "test_pipeline_smoke.py",  # 28 for its quick pipeline (full runs)
    "test_deploy_eval.py",  # 23 (full runs)
    "test_resume_kill.py",  # 20
    # the suite (the default run), from its --durations at load ~9 (2026-11-28: about twice a quiet run's)
    "test_benchmarks_run.py",  # 332: 25 benchmark scripts, each in its own process
    "test_cli_errors.py",  # 268: a CLI process per case
    "test_dataset_cli.py",  # 82
    "test_train_dataset.py",  # 73
    "test_online_runtime.py",  # 72 (its Ray and baseline runs are e2e: 26-35 each in full runs)
    "test_new_user.py",  # 64
    "test_safety.py",  # 59
    "test_policy_server.py",  # 59
    "test_hang_watch.py",  # 54
)

_ALONE_MODULES: set[Path] = set()
"""Test files with a test that runs ``alone``: the whole file runs so (see :func:`alone`)."""


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Run the files with a test that runs ``alone`` first, then the files in ``HEAVY_FIRST`` in its order;
    every file's tests keep their own order. An ``alone`` file at the start waits for nothing: later, it
    waited for the test running on the other worker (a full run's test_hang_watch setup took 59 s so).
    ``trylast``: after ``-m``'s deselection, so a file whose ``alone`` test is deselected (an ``e2e`` test in
    the suite's run) does not wait for the other worker to drain (test_leader_record's did, 140 s)."""
    _ALONE_MODULES.update(item.path for item in items if "alone" in getattr(item, "fixturenames", ()))
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: (item.path not in _ALONE_MODULES, rank.get(item.path.name, len(rank))))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    """Backstop for pytest-timeout (``hang_watch``): a test still running ``BACKSTOP_S`` past its limit has
    every thread's stack written to the run's stderr and its worker ended (xdist reports the crash and, with
    ``--max-worker-restart=0``, stops the run)."""
    if not hang_watch.start_backstop(item):
        yield
        return
    try:
        yield
    finally:
        hang_watch.stop_backstop(item)


@pytest.hookimpl(trylast=True)
def pytest_exception_interact(node):
    hang_watch.rearm_backstop(node)


@contextlib.contextmanager
def _session_lock(tmp_path_factory, exclusive: bool):
    """A lock shared by the xdist workers of this test session (files in its base temp folder): many
    holders in shared mode, or one in exclusive mode. A turnstile gives the exclusive taker precedence:
    once it waits, no new shared holder gets in, so it waits only for the tests already running."""
    root = _session_root(tmp_path_factory)
    with open(root / "turnstile.lock", "a") as turnstile, open(root / "tests.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


_HOLDING_ALONE = threading.Event()
"""Set while this worker holds the session lock exclusively (:func:`alone`, module-scoped): the module's
later tests then take no shared lock (flock on a second descriptor of this process would wait for itself)."""


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """The module's tests that use this run with no test of another xdist worker running meanwhile (the
    live GUI run takes more CPU than 2 cores have; beside it, real-time tests elsewhere missed their
    deadlines in CI). Other workers' tests wait for it, and it waits for the ones already running. Held
    from the module's first test (its other tests take it too: ``_not_beside_an_alone_module``) to its
    end, so that a later test asking for it never waits for a long test on the other worker."""
    with _session_lock(tmp_path_factory, exclusive=True):
        _HOLDING_ALONE.set()
        try:
            yield
        finally:
            _HOLDING_ALONE.clear()


@pytest.fixture(autouse=True)
def _not_beside_an_alone_module(request, tmp_path_factory):
    """Every test holds the session lock in shared mode, so a module that asks to run ``alone`` waits for
    it and holds it back (tests under ``alone`` already hold it exclusively). Every test of a module with
    an ``alone`` test takes ``alone``."""
    if request.node.path in _ALONE_MODULES:
        request.getfixturevalue("alone")
    if "alone" in request.fixturenames or _HOLDING_ALONE.is_set():
        yield
        return
    with _session_lock(tmp_path_factory, exclusive=False):
        yield


def _session_root(tmp_path_factory) -> Path:
    """The base temp folder the xdist workers of this test session share (the session's own without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return Path(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@pytest.fixture(scope="session")
def tiny_offline_run(tmp_path_factory):
    """A run dir with 6 demos and tiny BC + QC checkpoints, built once per test session and shared by the
    xdist workers: the first worker to need it builds it under a file lock, the other waits and reuses it
    (each worker built its own before: collect plus BC and QC training, twice). Tests read it or copy it
    (``online_setup.copy_run``), never write into it. A build that failed is cleared and redone by the next
    taker; ``tiny_offline_run.built`` beside it marks a complete one."""
    from online_setup import build_offline_run

    root = _session_root(tmp_path_factory) / "tiny_offline_run"
    built = root.with_name("tiny_offline_run.built")
    with open(root.with_name("tiny_offline_run.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not built.is_file():
                shutil.rmtree(root, ignore_errors=True)
                root.mkdir()
                build_offline_run(root)
                built.touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return root


@pytest.fixture
def xvfb_display(monkeypatch):
    """A real X display (Xvfb) for pynput's global keyboard listener, driven by xdotool; yields its name."""
    if not (shutil.which("Xvfb") and shutil.which("xdotool")):
        pytest.skip("needs Xvfb and xdotool (apt-get install xvfb xdotool; setup.sh installs them as root)")
    if importlib.util.find_spec("pynput") is None:
        pytest.skip("pynput is not installed (pip install 'robot-rl[teleop]')")
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen(
        ["Xvfb", "-displayfd", str(write_fd), "-screen", "0", "320x240x24", "-nolisten", "tcp"],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        number = f.readline().strip()
    if not number:
        server.kill()
        pytest.fail("Xvfb did not report a display number")
    display = f":{number}"
    monkeypatch.setenv("DISPLAY", display)
    yield display
    server.terminate()
    server.wait(timeout=10)


@pytest.fixture(scope="module")
def browser():
    """A real headless Chromium (Debian's ``chromium``, driven by Playwright's Python API); yields a
    ``playwright.sync_api.Browser``. Playwright's own browser download cannot work offline, so the system
    binary is used (setup.sh installs it as root). One browser and one Playwright driver per test module:
    a browser that crashed or hung under load takes only its own module's tests with it (a session-wide
    one once left a busy driver with no browser, hanging a CI run). ``--disable-dev-shm-usage`` keeps
    Chromium off ``/dev/shm``, which is 64 MB in many CI containers."""
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip("needs Debian's chromium (apt-get install chromium; setup.sh installs it as root)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (test extra)")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=path, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        yield chromium
        chromium.close()


@pytest.fixture
def xarm_emu(monkeypatch):
    """A running xArm 7 control box emulator (:mod:`robot_rl_testing.xarm_emulator`) with the real
    ``xarm-python-sdk`` pointed at its ports (``XCONF.SocketConf``); the test modules that use it skip
    without ``mujoco`` or ``xarm``."""
    from xarm.core.config.x_config import XCONF

    from robot_rl_testing.xarm_emulator import XArmControllerEmulator

    with XArmControllerEmulator() as emulator:
        for name, port in emulator.sdk_overrides.items():
            monkeypatch.setattr(XCONF.SocketConf, name, port)
        yield emulator
