"""``robot-rl hardware check`` on the in-process sim robot with a recorded-video camera, and its one-line
errors: a missing SDK extra, an unreachable controller, a camera that stops delivering frames."""

import re
import sys

import numpy as np
import pytest
import yaml

from robot_rl.cli.main import main
from robot_rl.data.lerobot.video import encode_video

FPS = 20


def _config(tmp_path, frames):
    video = tmp_path / "wrist.mp4"
    encode_video(video, np.full((frames, 48, 64, 3), 120, np.uint8), FPS)
    cfg = {
        "env": {
            "num_envs": 1,
            "robot": {"driver": "sim", "cameras": {"wrist": {"driver": "video", "source": str(video)}}},
        }
    }
    path = tmp_path / "robot.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_hardware_check_reads_robot_and_camera_and_jogs_only_when_asked(tmp_path, capsys):
    config = _config(tmp_path, frames=40)  # 2 s of video: enough for two 0.5 s reads
    assert main(["hardware", "check", "--config", config, "--camera-seconds", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "robot sim_panda+safety (driver sim): connected" in out and "joint_pos (rad)" in out
    assert "nothing moved" in out and "jog" not in out.split("nothing moved")[0]
    size, rate = re.search(r"camera wrist \(video .*wrist.mp4\): (\d+x\d+) px, ([\d.]+) Hz", out).groups()
    # Paced at the file's rate: never faster. A loaded machine may deliver fewer frames (CI saw 14.7 Hz).
    assert size == "64x48" and 0 < float(rate) < FPS + 3

    assert main(["hardware", "check", "--config", config, "--camera-seconds", "0.2", "--move"]) == 0
    out = capsys.readouterr().out
    moved, back = re.search(r"jog \(joint_position\): moved ([\d.]+), back within ([\d.]+)", out).groups()
    assert 0.03 < float(moved) <= 0.051 and float(back) < 0.01


def test_hardware_check_missing_sdk_is_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "rtde_receive", None)  # an install without the ur extra
    code = main(
        ["hardware", "check", "--env.num_envs=1", "--env.robot.driver=ur", "--env.robot.address=192.168.1.10"]
    )
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1
    assert err.startswith("robot-rl: missing optional package: env.robot.driver=ur needs rtde_receive: ")
    assert "pip install 'robot-rl[ur]'" in err


def test_hardware_check_unreachable_robot_and_dead_camera_are_one_line(tmp_path, capsys):
    pytest.importorskip("rtde_receive")
    assert (
        main(
            [
                "hardware",
                "check",
                "--env.num_envs=1",
                "--env.robot.driver=ur",
                "--env.robot.address=127.0.0.1",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(
        r"robot-rl: hardware error: ur@127.0.0.1: cannot connect to the UR controller at 127\.0\.0\.1 .*", err
    )
    config = _config(tmp_path, frames=4)  # 0.2 s of video, read for 1 s: the camera stops delivering
    assert main(["hardware", "check", "--config", config]) == 1
    err = capsys.readouterr().err.strip()
    assert re.fullmatch(
        r"robot-rl: hardware error: camera 'wrist' \(.*wrist.mp4\): stopped delivering frames after 4", err
    )
    assert main(["hardware", "check"]) == 2
    assert "config error: hardware check needs env.robot" in capsys.readouterr().err
