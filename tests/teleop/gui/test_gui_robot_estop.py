"""The GUI's e-stop reaches a robot behind the real-time robot server: a real ``robot-rl online
--intervention.device=gui`` whose actor drives the MuJoCo robot server (``env.robot.driver=sim_server``)
through RobotEnv and the safety layer; the e-stop comes through the GUI server's API (the browser's button
sends the same hub command, tests/teleop/gui/test_gui_live.py)."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request

import numpy as np
import pytest
from online_setup import copy_run, free_address, overrides, start, wait_for

from robot_rl.hardware.drivers.sim_server import SimServerRobot
from robot_rl.hardware.sim_server import serve_in_subprocess


def _api(url: str, path: str, method: str = "GET") -> dict:
    req = urllib.request.Request(f"{url}{path}", method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def _events(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.mark.e2e
def test_gui_estop_latches_the_safety_layer_and_holds_the_arm_on_the_robot_server(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    faults = tmp_path / "faults.jsonl"
    with serve_in_subprocess() as server:
        args = overrides(
            run,
            f"--online.address={free_address()}",
            "--online.env_steps=100000",  # runs while the test drives it; killed at the end
            "--env.robot.driver=sim_server",
            f"--env.robot.address={server.address}",
            "--env.robot.timeout_s=5",  # the real-time server shares a loaded 2-core machine
            f"--env.robot.safety.fault_log={faults}",
            "--intervention.device=gui",
            "--intervention.gui_port=0",
        )
        proc = start("online", *args, log=tmp_path / "online.log")
        try:
            info = run / "gui.json"
            wait_for(info.is_file, timeout_s=180, procs=(proc,), what="the GUI server")
            url = f"http://127.0.0.1:{json.loads(info.read_text())['port']}"
            status = lambda: _api(url, "/api/live")["status"].get("0", {})  # noqa: E731
            wait_for(lambda: status().get("observed", 0) >= 5, timeout_s=300, procs=(proc,), what="steps")
            _api(url, "/api/estop", "POST")
            wait_for(lambda: status().get("estop"), timeout_s=30, procs=(proc,), what="the actor latched")
            wait_for(  # the actor latched the robot's safety layer, whose watchdog holds the arm
                lambda: any(e["kind"] == "estop" and e["reason"] == "GUI e-stop" for e in _events(faults)),
                timeout_s=30,
                procs=(proc,),
                what="the safety layer's e-stop in its fault log",
            )
            observed = status()["observed"]
            robot = SimServerRobot(server.address, timeout_s=5)
            robot.connect()
            try:
                time.sleep(1.0)  # the hold brakes the arm to a stop
                before = robot.read().joint_pos
                time.sleep(1.0)
                after = robot.read().joint_pos
            finally:
                robot.disconnect()
            assert np.abs(after - before).max() < 5e-3  # rad: the arm holds
            assert status()["observed"] - observed <= 1 and status()["steps_after_latch"] <= 1
            _api(url, "/api/estop/reset", "POST")
            wait_for(
                lambda: any(e["kind"] == "estop_reset" for e in _events(faults)),
                timeout_s=30,
                procs=(proc,),
                what="the safety layer's reset",
            )
            wait_for(
                lambda: status().get("observed", 0) > observed + 5,
                timeout_s=60,
                procs=(proc,),
                what="the actor acting again",
            )
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
