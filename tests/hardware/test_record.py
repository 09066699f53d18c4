"""``robot-rl record`` on the sim-backed robot (driver ``sim``): the simulated human and a scripted operator
drive RobotEnv, episodes land in a LeRobot v3.0 dataset through collect's writer with success labels, a
dropped link keeps the episode so far, and a recording killed mid-episode loses no finished episode."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.config import EnvConfig, InterventionConfig, RobotConfig
from robot_rl.data.lerobot.reader import LeRobotDataset
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.hardware.errors import RobotConnectionError
from robot_rl.hardware.robot_env import RobotEnv
from robot_rl.recording import RECORD_SEED_OFFSET, record
from robot_rl.runtime.intervention import HumanInput
from robot_rl.sim import make_env
from robot_rl.sim.expert import PickCubeExpert
from robot_rl.stages.envs import dataset_features
from robot_rl.teleop.sim_human import SimulatedHuman

CODE = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
ROBOT = ["--env.num_envs=1", "--env.robot.driver=sim"]


class ScriptedOperator:
    """An operator who drives with the clean expert and presses the 'failure' key after ``label_after``
    steps (an InterventionDevice, as the keyboard is)."""

    def __init__(self, label_after: int) -> None:
        self.label_after = label_after

    def reset(self, env_seed: int) -> None:
        self.expert, self.t = PickCubeExpert(noise=0.0, seed=env_seed), 0

    def poll(self, obs):
        self.t += 1
        if self.t > self.label_after:
            return HumanInput(label="failure")
        return HumanInput(action=self.expert.act(obs))

    def close(self) -> None:
        pass


def _writer(env, root):
    features = dataset_features(env.observation_space, env.action_space)
    return LeRobotWriter(root, fps=10, features=features, robot_type="sim")


def _cfg() -> EnvConfig:
    return EnvConfig(num_envs=1, robot=RobotConfig(driver="sim"))


def test_sim_human_and_operator_labels_end_up_in_the_dataset(tmp_path):
    env = make_env(_cfg())
    try:
        writer = _writer(env, tmp_path / "ds")
        out = record(env, SimulatedHuman(InterventionConfig()), writer, env.task, 2)
        assert out == {"recorded": 2, "successes": 2, "num_episodes": 2}
        out = record(env, ScriptedOperator(label_after=5), writer, env.task, 3)  # a rerun appends
        assert out == {"recorded": 1, "successes": 0, "num_episodes": 3}
        writer.close()
    finally:
        env.close()
    ds = LeRobotDataset(tmp_path / "ds")
    table = ds.load_tabular()
    episodes = np.asarray(table[keys.EPISODE_INDEX]).reshape(-1)
    success = np.asarray(table[keys.SUCCESS]).reshape(-1)
    done = np.asarray(table[keys.DONE]).reshape(-1)
    assert ds.num_episodes == 3 and table[keys.STATE].shape[1] == 22
    assert success[episodes == 0][-1] and success[episodes == 1][-1]
    last = episodes == 2
    # the operator's failure label ends the episode without a success; like the actor's, not a termination
    assert last.sum() == 5 and not success[last].any() and not done[last].any()


def test_a_dropped_link_writes_the_episode_so_far_then_stops(tmp_path):
    from test_robot_env import FlakyRobot

    env = RobotEnv(FlakyRobot(fail_after=12), {}, _cfg())
    try:
        writer = _writer(env, tmp_path / "ds")
        with pytest.raises(RobotConnectionError, match="flaky_panda"):
            record(env, ScriptedOperator(label_after=100), writer, env.task, 3)
        assert writer.num_episodes == 1
    finally:
        env.close()
    table = LeRobotDataset(tmp_path / "ds").load_tabular()
    assert len(table[keys.ACTION]) == 12 and not np.asarray(table[keys.DONE]).any()


def _episodes(root) -> int:
    try:
        return json.loads((root / "meta" / "info.json").read_text())["total_episodes"]
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


@pytest.mark.e2e
def test_killed_recording_keeps_every_finished_episode_and_resumes(tmp_path):
    """Real time (10 Hz, about 2.6 s per episode), SIGKILL while the third episode is being recorded; the
    dataset holds the finished episodes, a rerun resumes to 4 and leaves the first ones untouched."""
    run = tmp_path / "run"
    args = [sys.executable, "-c", CODE, "record", "--teleop", "sim_human", f"--run_dir={run}", *ROBOT]
    proc = subprocess.Popen(
        [*args, "--num_episodes", "4", "--env.robot.realtime=always"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    root = run / "dataset"
    deadline = time.monotonic() + 180
    while _episodes(root) < 2:
        assert proc.poll() is None, proc.stdout.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(1.0)  # well inside the next episode (about 2.6 s long)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    kept = _episodes(root)
    assert kept in (2, 3)
    before = LeRobotDataset(root).load_tabular()
    assert len(np.unique(before[keys.EPISODE_INDEX])) == kept
    again = subprocess.run([*args, "--num_episodes", "4"], capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"{kept} of 4 episodes already there" in again.stdout
    after = LeRobotDataset(root).load_tabular()
    assert len(np.unique(after[keys.EPISODE_INDEX])) == 4
    n = len(before[keys.ACTION])
    for key in (keys.STATE, keys.ACTION, keys.SUCCESS):
        assert np.array_equal(np.asarray(after[key])[:n], np.asarray(before[key])), key


def test_each_episode_is_recorded_under_its_own_instruction(tmp_path):
    """Pick-colour draws the target colour from the seed: the operator is told each episode's instruction
    before driving, and each episode lands in the dataset under it (not under the first episode's)."""
    env = make_env(EnvConfig(id="robot_rl/PandaPickColour-v0", num_envs=1))
    told: list[str] = []
    try:
        writer = _writer(env, tmp_path / "ds")
        record(env, ScriptedOperator(label_after=2), writer, "unused", 5, announce=told.append)
        writer.close()
        expected = [env.reset(seed=RECORD_SEED_OFFSET + i)[1]["task"] for i in range(5)]
    finally:
        env.close()
    assert told == expected and len(set(expected)) > 1, expected
    ds = LeRobotDataset(tmp_path / "ds")
    table = ds.load_tabular()
    episodes = np.asarray(table[keys.EPISODE_INDEX]).reshape(-1)
    task_index = np.asarray(table[keys.TASK_INDEX]).reshape(-1)
    recorded = [ds.tasks[int(task_index[episodes == i][0])] for i in range(5)]
    assert recorded == expected and "unused" not in ds.tasks
