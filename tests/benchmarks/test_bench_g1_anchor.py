"""Smoke run of benchmarks/bench_g1_anchor.py (--tiny) on the real G1 fixture: every row is scored on the
held-out episode, the hold row agrees with a direct computation from the parquet file, and ACT comes back
from the LeRobot side venv when it exists."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from repo_paths import ROOT

V30 = ROOT.parent / "shared" / "fixtures" / "lerobot" / "g1_pick_bottle_v30"
VENV = Path(os.environ.get("ROBOT_RL_LEROBOT_VENV", Path.home() / ".cache" / "robot_rl" / "lerobot044"))

pytestmark = pytest.mark.skipif(not V30.is_dir(), reason=f"G1 fixture absent at {V30}")


def _hold_first_mae(episode: int) -> float:
    """First-step MAE of repeating a[t-1] (the state at the episode's first frame) on ``episode``."""
    table = pq.read_table(V30 / "data" / "chunk-000" / "file-000.parquet")
    rows = np.asarray(table["episode_index"]) == episode
    action = np.asarray(table["action"].to_pylist(), np.float64)[rows]
    state = np.asarray(table["observation.state"].to_pylist(), np.float64)[rows]
    prev = np.concatenate([state[:1], action[:-1]])
    return float(np.abs(action - prev).mean())


def test_tiny_run_scores_every_model_on_the_held_out_episode(tmp_path):
    out = tmp_path / "table.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "bench_g1_anchor.py"), "--tiny"]
    cmd += [
        "--run_dir",
        str(tmp_path / "run"),
        "--json",
        str(out),
        "--act_python",
        str(VENV / "bin" / "python"),
        "--prev_action_steps",
        "2",
        "3",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "G1 open loop, test episode(s) [4]" in proc.stdout
    table = json.loads(out.read_text())
    flows = [r["model"] for r in table if r["model"].startswith("flow BC")]
    assert len(flows) == 2 and "last 2 commands)" in flows[0] and "last 3 commands)" in flows[1], flows
    rows = {r["model"].split(" (")[0].split(" a[")[0]: r for r in table}
    expected = {"hold", "extrapolate", "flow BC"} | (
        {"ACT"} if (VENV / "bin" / "python").is_file() else set()
    )
    assert set(rows) == expected
    for r in rows.values():
        assert all(math.isfinite(r[k]) for k in ("chunk_mae", "first_mae", "first_mae_changed"))
    assert rows["hold"]["first_mae"] == pytest.approx(_hold_first_mae(4), rel=1e-5)
    assert rows["hold"]["copy_ratio_changed"] == pytest.approx(1.0)
    assert rows["extrapolate"]["first_mae"] < rows["hold"]["first_mae"]
