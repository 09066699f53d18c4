"""``robot-rl eval --deploy.server=...`` evaluates through the policy server: ``robot-rl serve`` holds the
checkpoint in its own process and the eval process gets every chunk over ZeroMQ (RemotePolicy), driving
the sim-backed robot (RobotEnv -> safety layer -> SimServerRobot -> the robot server process). All three
are real processes on localhost."""

import json
import os
import subprocess
import sys

import pytest
from online_setup import CODE, copy_run, free_address, overrides

from robot_rl.hardware.sim_server import serve_in_subprocess

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _eval(run_dir, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", CODE, "eval", "--algo", "bc", *overrides(run_dir, *extra)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=ENV)


def _serve(checkpoint) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-c", CODE, "serve", "--checkpoint", str(checkpoint), "--threads", "1"]
    proc = subprocess.Popen(
        [*cmd, "--address", "tcp://127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        proc.kill()
        raise RuntimeError(f"robot-rl serve did not start: {line}{proc.stderr.read()}")
    return proc, line


@pytest.mark.e2e
def test_eval_on_the_robot_server_through_the_policy_server(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    served, banner = _serve(run / "checkpoints" / "bc_seed0")
    address, model_id = banner.split()[1], banner.split()[3]
    try:
        with serve_in_subprocess() as robot:
            proc = _eval(
                run,
                "--env.robot.driver=sim_server",
                "--env.robot.timeout_s=5",  # two xdist workers share the 2 CI cores with the server
                f"--env.robot.address={robot.address}",
                f"--deploy.server={address}",
                "--deploy.timeout_s=30",
            )
            assert robot.process.poll() is None
        assert proc.returncode == 0, proc.stderr[-3000:]
    finally:
        served.terminate()
        out, err = served.communicate(timeout=30)
    assert served.returncode == 0, err
    evaluated = json.loads((run / "eval" / "bc_seed0.json").read_text())
    assert evaluated["policy"] == {"server": address, "model_id": model_id}
    assert model_id.startswith("bc_seed0@")
    assert [e["env_seed"] for e in evaluated["episodes"]] == sorted(
        e["env_seed"] for e in evaluated["episodes"]
    )
    assert len(evaluated["episodes"]) == 2 and evaluated["summary"]["num_episodes"] == 2
    chunks = int(out.split("stopped: served ")[1].split()[0])  # the server's own count
    assert chunks >= 2, out


@pytest.mark.e2e
def test_eval_with_the_policy_server_down_is_one_line(tmp_path):
    down = free_address()  # nothing listens there
    proc = _eval(tmp_path, f"--deploy.server={down}", "--deploy.timeout_s=0.5")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("robot-rl: connection error: ") and down in lines[0]
    assert "robot-rl serve" in lines[0]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("extra", "mode"),
    [
        (("--policy.execution=temporal_ensemble",), "ensemble"),
        (("--deploy.async_lead=2", "--deploy.async_blend=1"), "async"),
    ],
)
def test_ensembled_and_async_execution_through_the_policy_server(tiny_offline_run, tmp_path, extra, mode):
    """On the direct sim env: temporal ensembling asks the server once per control step; async execution
    asks for the next chunk when ``async_lead`` actions remain, i.e. more often than every h steps."""
    from robot_rl.config import load_config
    from robot_rl.stages.evaluate import evaluate

    run = copy_run(tiny_offline_run, tmp_path / "run")
    served, banner = _serve(run / "checkpoints" / "bc_seed0")
    try:
        args = overrides(run, f"--deploy.server={banner.split()[1]}", "--eval.episodes_per_seed=1", *extra)
        cfg = load_config(None, args)
        evaluated = evaluate(cfg, "bc", 0)
    finally:
        served.terminate()
        out, err = served.communicate(timeout=30)
    chunks = int(out.split("stopped: served ")[1].split()[0])
    steps, h = evaluated["episodes"][0]["steps"], cfg.policy.horizon
    assert evaluated["policy"]["model_id"] == banner.split()[3]
    if mode == "ensemble":
        assert chunks == steps
    else:
        assert -(-steps // h) < chunks <= steps
