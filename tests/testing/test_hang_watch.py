"""The test session's own hang watches (``hang_watch``), run on a child pytest session with real xdist
workers: a test stuck past the session deadline is named with its stack, and a teardown stuck after
pytest-timeout's alarm still ends its worker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from hang_watch import DEADLINE_STATUS
from repo_paths import TESTS

_TESTS = TESTS
_CONFTEST = f"""
import importlib.util, sys
sys.path.insert(0, {str(_TESTS)!r})
spec = importlib.util.spec_from_file_location("robot_rl_tests_conftest", {str(_TESTS / "conftest.py")!r})
ours = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ours)
pytest_configure = ours.pytest_configure
pytest_unconfigure = ours.pytest_unconfigure
pytest_runtest_protocol = ours.pytest_runtest_protocol
pytest_exception_interact = ours.pytest_exception_interact
"""


def _session(
    tmp_path: Path, test_source: str, workers: int = 1, **env: str
) -> tuple[subprocess.CompletedProcess, float]:
    (tmp_path / "conftest.py").write_text(_CONFTEST)
    (tmp_path / "test_stuck.py").write_text(test_source)
    began = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", str(workers), "-p", "no:cacheprovider", "test_stuck.py"],
        cwd=tmp_path,
        env={**_outside_xdist(), **env, "PYTEST_ADDOPTS": ""},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return run, time.monotonic() - began


def _outside_xdist() -> dict[str, str]:
    """This environment without the xdist worker's variables (the child session must not take itself for
    a worker)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}


def test_the_session_deadline_names_the_running_test_and_its_stack(tmp_path):
    source = "import time\n\ndef test_fast():\n    pass\n\ndef test_sleeps_in_c():\n    time.sleep(90)\n"
    # 20 s: under load the child session (xdist, the worker's start-up) took more than 8 s to reach its
    # first test, and the deadline then ended it with nothing run
    run, took = _session(tmp_path, source, ROBOT_RL_TEST_DEADLINE=str(time.time() + 20))
    out = run.stdout + run.stderr
    assert run.returncode == DEADLINE_STATUS, out
    assert took < 75
    assert "test_stuck.py::test_sleeps_in_c (for " in out
    assert "1 tests finished" in out
    assert 'test_stuck.py", line 7 in test_sleeps_in_c' in out  # the worker's own stack, from faulthandler


def test_a_teardown_stuck_after_the_timeout_alarm_still_ends_the_worker(tmp_path):
    """pytest's faulthandler plugin cancels the backstop when the alarm's failure is raised; it is re-armed,
    so the stuck teardown is ended ``ROBOT_RL_TEST_BACKSTOP_S`` past the limit (it would sleep 90 s)."""
    source = (
        "import time\nimport pytest\n\n@pytest.fixture\ndef stuck():\n    yield\n    time.sleep(90)\n\n"
        "@pytest.mark.timeout(2)\ndef test_times_out(stuck):\n    time.sleep(30)\n"
    )
    run, took = _session(tmp_path, source, ROBOT_RL_TEST_BACKSTOP_S="3")
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert took < 45, out
    assert "Timeout" in out  # pytest-timeout's alarm fired in the call
    assert 'test_stuck.py", line 7 in stuck' in out  # then the backstop dumped the stuck teardown


def test_without_workers_the_deadline_dumps_the_session_itself(tmp_path):
    source = "import time\n\ndef test_sleeps_in_c():\n    time.sleep(90)\n"
    run, _ = _session(tmp_path, source, workers=0, ROBOT_RL_TEST_DEADLINE=str(time.time() + 12))
    out = run.stdout + run.stderr
    assert run.returncode == DEADLINE_STATUS, out
    assert "test_stuck.py::test_sleeps_in_c (for " in out
    assert 'test_stuck.py", line 4 in test_sleeps_in_c' in out
