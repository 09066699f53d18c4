"""The benchmark scripts still run end to end (a script that raised went unnoticed for a release: issue
38). Only that they run and print their rows is checked here; their figures live in benchmarks/README.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_learner_runs_and_labels_the_default_best_of_n():
    from robot_rl.config import OfflineRLConfig

    out = subprocess.run(
        [sys.executable, "benchmarks/bench_learner.py", "--time-per-case", "0", "--threads", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if "updates/s" in line]
    assert len(rows) == 4, out.stdout
    assert f"QC best-of-{OfflineRLConfig().best_of_n} (default)" in out.stdout
