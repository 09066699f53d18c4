"""Every stage by config on the sim-backed robot: the MuJoCo robot server in its own process, in real time
(``--env.robot.driver=sim_server``), driven through RobotEnv -> safety layer -> SimServerRobot over a
localhost socket: record with the simulated human, collect with the scripted expert, offline training,
online RL with the simulated human, and eval, each a real ``robot-rl`` process."""

import json
import subprocess
import sys

import pytest
from online_setup import CODE, free_address, overrides

from robot_rl.hardware.sim_server import serve_in_subprocess


def _cli(run_dir, *args, extra=()):
    cmd = [sys.executable, "-c", CODE, *args, *overrides(run_dir, *extra)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


@pytest.mark.e2e
def test_record_collect_train_online_eval_run_on_the_robot_server(tmp_path):
    with serve_in_subprocess() as server:
        # a 5 s link timeout: two xdist workers share the 2 CI cores with the real-time server process
        robot = [
            "--env.robot.driver=sim_server",
            f"--env.robot.address={server.address}",
            "--env.robot.timeout_s=5",
        ]
        address = f"--online.address={free_address()}"
        record = [
            "record",
            "--teleop",
            "sim_human",
            "--num_episodes",
            "2",
            "--dataset",
            str(tmp_path / "rec"),
        ]
        stages = (
            record,
            ["collect"],
            ["train", "--algo", "offline"],
            ["online"],
            ["eval", "--algo", "online"],
        )
        for args in stages:
            proc = _cli(tmp_path, *args, extra=[*robot, address])
            assert proc.returncode == 0, f"{args}: {proc.stderr[-3000:]}"
        assert server.process.poll() is None  # the server served every stage
    assert json.loads((tmp_path / "rec" / "meta" / "info.json").read_text())["total_episodes"] == 2
    stages = tmp_path / "stages"
    collect = json.loads((stages / "collect.json").read_text())
    assert collect["num_episodes"] == 6 and collect["demo_success_rate"] > 0
    online = json.loads((stages / "online_qc_seed0.json").read_text())
    assert online["env_steps"] >= 120 and online["actor_exit_codes"] == [0]
    evaluated = json.loads((stages / "eval_online_qc_seed0.json").read_text())
    assert evaluated["summary"]["num_episodes"] == 2


def test_a_robot_with_two_envs_is_a_one_line_config_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", CODE, "collect", f"--run_dir={tmp_path}", "--env.robot.driver=sim"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "robot-rl: config error: env.num_envs=2: a robot (env.robot) is one env; set env.num_envs=1"
    ]
