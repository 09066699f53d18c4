"""record -> train -> eval -> online on the stock-mode ROS 2 arm, every process real: ``sim_robot_node
mode:=stock`` on rclpy (Fast DDS), a plain rclpy operator (``tests/rclpy_operator.py``, no robot_rl
import) driving ``robot-rl record --teleop ros2`` through the robot bridge (IK joint targets to the
JointTrajectoryController, the fingers through their trajectory controller, the pose from the project's
Panda model), then BC on the recorded dataset and ``robot-rl eval`` of it on the same arm, and online RL
(QC from the offline stage) whose actor acts on that arm and feeds the learner."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from repo_paths import TESTS

pytest.importorskip("rclpy")
from launch_files import ROBOT_RL  # noqa: E402
from online_setup import free_address, overrides  # noqa: E402
from ros2_helpers import new_domain, node_flags, stock_arm_config  # noqa: E402

OPERATOR = TESTS / "rclpy_operator.py"


def _arm_config(path: Path, domain: int) -> Path:
    """A config file for the stock arm, as a lab would write it for its ros2_control Panda."""
    ros2 = dataclasses.asdict(stock_arm_config(domain, "rclpy", connect_wait_s=30.0))
    robot = {"driver": "ros2", "success": "operator", "timeout_s": 5.0, "ros2": ros2}
    robot["reset"] = "none"  # CI has no human to press Enter; the home motion still runs
    path.write_text(yaml.safe_dump({"env": {"max_episode_steps": 15, "robot": robot}}))
    return path


def _cli(run: Path, *args: str, extra: tuple[str, ...] = (), env: dict) -> subprocess.CompletedProcess:
    """``robot-rl ARGS`` on ``run`` with the tiny test settings, then ``extra`` flags (which win)."""
    cmd = [*ROBOT_RL, *args, *overrides(run, *extra)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


@pytest.mark.e2e
def test_plain_rclpy_operator_records_then_bc_trains_and_evals_on_the_stock_arm(tmp_path):
    import pyarrow.parquet as pq

    domain = new_domain()
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("RMW_IMPLEMENTATION", None)
    log = open(tmp_path / "nodes.log", "wb")
    sim = subprocess.Popen(
        [*ROBOT_RL, "ros2", "sim_robot_node", *node_flags(domain, "rclpy"), "mode:=stock"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    operator = subprocess.Popen(
        [sys.executable, str(OPERATOR)], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, env=env
    )
    run = tmp_path / "run"
    config = str(_arm_config(tmp_path / "arm.yaml", domain))
    # online: no simulated human on a stock arm (it reads the scene's cube), a small budget, a free port
    online = ("--intervention.device=none", "--online.env_steps=30", f"--online.address={free_address()}")
    try:
        recorded = _cli(run, "record", "--config", config, "--teleop", "ros2", "--num_episodes", "2", env=env)
        assert recorded.returncode == 0, recorded.stderr[-3000:]
        for stage in (["train", "--algo", "offline"], ["eval", "--algo", "bc"], ["online"]):
            done = _cli(run, *stage, "--config", config, extra=online, env=env)
            assert done.returncode == 0, f"{stage}: {done.stderr[-3000:]}"
    finally:
        operator.stdin.close()
        operator.wait(timeout=10)
        sim.terminate()
        sim.wait(timeout=15)
    info = json.loads((run / "dataset" / "meta" / "info.json").read_text())
    assert info["total_episodes"] == 2 and info["total_frames"] == 30  # two truncated 15-step episodes
    assert "observation.environment_state" not in info["features"]  # a stock arm has none
    frames = pq.read_table(next((run / "dataset" / "data").rglob("*.parquet"))).to_pydict()
    actions = np.asarray(frames["action"], np.float32)
    state = np.asarray(frames["observation.state"], np.float32)
    # the operator's twist drove the arm: +/- x steps in the actions, and the measured end effector
    # (observation.state[14:17], from the joints and the Panda model) moved along x
    assert np.abs(actions[:, 0]).max() > 0.01, actions[:, 0]
    assert np.ptp(state[:, 14]) > 0.01, state[:, 14]
    # and the gripper: closed and opened by the operator, the finger joint (m) read back as a closure
    assert set(np.unique(actions[:, 3])) == {0.0, 1.0}, actions[:, 3]
    assert np.ptp(state[:, 21]) > 0.5, state[:, 21]
    assert np.isfinite(state).all()
    results = json.loads(next((run / "eval").glob("bc_seed0*.json")).read_text())
    assert len(results["episodes"]) == 2, results
    online_stage = json.loads((run / "stages" / "online_qc_seed0.json").read_text())
    assert online_stage["env_steps"] >= 30 and online_stage["actor_exit_codes"] == [0], online_stage
