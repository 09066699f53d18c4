"""Smoke run of ``benchmarks/bench_mjx.py --env`` (issue 37) at N = 1 and 2 for a fraction of a second:
it prints the ``mujoco_cpu`` row and one ``mjx`` row per N with a rate, and writes its JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("jax")
pytest.importorskip("mujoco.mjx")

ROOT = Path(__file__).resolve().parents[1]


def test_bench_mjx_full_env_smoke(tmp_path):
    out = tmp_path / "mjx_env.json"
    args = ["--env", "--num-envs", "1", "2", "--seconds", "0.2", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, "benchmarks/bench_mjx.py", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = json.loads(out.read_text())
    assert results["cpu_env_steps_s"] > 0
    assert [r["num_envs"] for r in results["mjx"]] == [1, 2]
    assert all(r.get("env_steps_s", 0) > 0 for r in results["mjx"]), results["mjx"]
    assert "mujoco_cpu" in proc.stdout and "x mujoco_cpu" in proc.stdout
