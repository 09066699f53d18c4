"""A killed run resumes: SIGKILL a real `robot-rl collect` / `robot-rl train` process group mid-stage, rerun
the same command, and check that nothing recorded is lost or duplicated."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from robot_rl.config import load_config
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.stages.collect import collect
from robot_rl.training.resume import resume_checkpoint

CODE = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"


def _start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CODE, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, so the kill takes the env workers too
    )


def _kill_when(proc: subprocess.Popen, ready, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, f"process ended before the kill point:\n{proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, "kill point never reached"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def _episodes(root: Path) -> list[dict]:
    """Per-episode frame arrays of a LeRobot dataset, in episode order."""
    table = LeRobotDataset(root).load_tabular()
    index = table["episode_index"].reshape(-1)
    return [{k: v[index == ep] for k, v in table.items()} for ep in sorted(set(index.tolist()))]


def _info_episodes(root: Path) -> int:
    try:
        return json.loads((root / "meta" / "info.json").read_text())["total_episodes"]
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


@pytest.mark.e2e
def test_killed_collect_keeps_every_episode_and_continues(tmp_path):
    run = tmp_path / "run"
    args = ("collect", f"--run_dir={run}", "--collect.num_episodes=12", "--env.num_envs=1")
    first = _start(*args)
    _kill_when(first, lambda: _info_episodes(run / "dataset") >= 3)
    before = _episodes(run / "dataset")
    assert 3 <= len(before) < 12

    again = subprocess.run([sys.executable, "-c", CODE, *args], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    after = _episodes(run / "dataset")
    assert len(after) == 12
    for ep, frames in enumerate(before):  # episodes written before the kill are unchanged
        assert set(after[ep]) == set(frames)
        for key, value in frames.items():
            assert (after[ep][key] == value).all(), (ep, key)
    # The rerun continued with the remaining env seeds: a fresh, unkilled collection gives the same data.
    fresh = tmp_path / "fresh"
    collect(load_config(None, [f"--run_dir={fresh}", *args[2:]]))
    for ep, frames in enumerate(_episodes(fresh / "dataset")):
        assert (frames["action"] == after[ep]["action"]).all(), ep


def _log_steps(path: Path) -> list[int]:
    with open(path, newline="") as f:
        return [int(row["step"]) for row in csv.DictReader(f)]


@pytest.mark.e2e
def test_killed_training_resumes_from_its_checkpoint(tmp_path):
    run = tmp_path / "run"
    common = [f"--run_dir={run}", "--collect.num_episodes=4", "--checkpoint_every=100"]
    collect(load_config(None, common))
    tiny = ["--bc.steps=800", "--bc.batch_size=16", "--policy.hidden_dims=[32,32]"]
    args = ("train", "--algo=bc", "--seed=0", *common, *tiny)
    final = run / "checkpoints" / "bc_seed0"

    def resume_step() -> int:
        found = resume_checkpoint(final)
        return json.loads((found / "learner_state.json").read_text())["step"] if found else 0

    def checkpointed_twice() -> bool:
        try:
            return resume_step() >= 200
        except (FileNotFoundError, json.JSONDecodeError):  # a swap in progress: poll again
            return False

    first = _start(*args)
    _kill_when(first, checkpointed_twice)
    resumed_from = resume_step()  # a kill at any moment, even mid-swap, leaves a complete checkpoint
    assert 200 <= resumed_from < 800
    assert not (run / "stages" / "train_bc_seed0.json").exists()

    again = subprocess.run([sys.executable, "-c", CODE, *args], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{resumed_from}/800" in again.stderr  # the progress bar starts at the checkpoint, not at 0
    steps = _log_steps(run / "logs" / "bc_seed0.csv")
    assert steps == list(range(50, 801, 50))  # every logged step exactly once, none lost or repeated
    assert (run / "checkpoints" / "bc_seed0" / "model.safetensors").is_file()
    assert resume_checkpoint(final) is None
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["bc_seed0"]


def test_resume_checkpoint_survives_a_kill_mid_swap(tmp_path):
    """Killed between moving the old checkpoint aside and moving the new one in: the old one is used."""
    final = tmp_path / "checkpoints" / "bc_seed0"
    assert resume_checkpoint(final) is None
    old = final.with_name("bc_seed0_resume.old")
    old.mkdir(parents=True)
    (old / "learner_state.json").write_text('{"step": 300}')
    (final.with_name("bc_seed0_resume.tmp")).mkdir()  # the half-written successor is never used
    assert resume_checkpoint(final) == old
    current = final.with_name("bc_seed0_resume")
    current.mkdir()
    assert resume_checkpoint(final) == old  # an incomplete folder (no learner_state.json) is skipped
    (current / "learner_state.json").write_text('{"step": 400}')
    assert resume_checkpoint(final) == current
