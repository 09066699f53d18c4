"""Smoke run of ``benchmarks/bench_mjx.py --env`` (issue 37) at the MJX tests' N for a fraction of a
second: it prints the ``mujoco_cpu`` row and the ``mjx`` row with a rate, and writes its JSON. The program
it runs is compiled first under :func:`mjx_shared.compiled` (the script then loads it from JAX's persistent
cache, which it shares through the environment): one N, since each N is its own compile."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from mjx_shared import PICK, N, compiled
from repo_paths import ROOT

pytest.importorskip("jax")
pytest.importorskip("mujoco.mjx")


@pytest.mark.e2e
def test_bench_mjx_full_env_smoke(tmp_path):
    compiled(PICK)
    out = tmp_path / "mjx_env.json"
    args = ["--env", "--task", PICK, "--num-envs", str(N), "--seconds", "0.2", "--json", str(out)]
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
    assert [r["num_envs"] for r in results["mjx"]] == [N]
    assert all(r.get("env_steps_s", 0) > 0 for r in results["mjx"]), results["mjx"]
    assert "mujoco_cpu" in proc.stdout and "x mujoco_cpu" in proc.stdout
