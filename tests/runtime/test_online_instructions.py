"""Online RL on a task whose instruction is drawn per episode (pick-colour): the actor gives the policy
each episode's own instruction and records it (``task_index`` into the policy's ``policy.tasks``), and the
learner's batches carry it, online chunks and demo chunks alike. Real actor and learner processes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from online_setup import CODE, copy_run, free_address, overrides

from robot_rl import keys
from robot_rl.actor_build import describe_env
from robot_rl.config import load_config
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.policies import factory as agents
from robot_rl.runtime.actor import ACTOR_SEED_STRIDE, ONLINE_SEED_OFFSET
from robot_rl.runtime.batched_actor import ENV_SEED_KEY
from robot_rl.runtime.learner import Learner
from robot_rl.sim import make_env
from robot_rl.stages.collect import collect
from robot_rl.stages.train import train

COLOUR = [
    "--env.id=robot_rl/PandaPickColour-v0",
    "--collect.num_episodes=12",  # all three colours among the demos (6 hold two)
    "--intervention.device=none",
    "--online.env_steps=180",
]


@pytest.fixture(scope="module")
def colour_run(tmp_path_factory):
    """12 pick-colour demos (three instructions) and tiny BC + QC checkpoints conditioned on them."""
    root = tmp_path_factory.mktemp("colour_run")
    cfg = load_config(None, overrides(root, *COLOUR))
    collect(cfg)
    train(cfg, "offline", 0)
    return root


@pytest.mark.e2e
@pytest.mark.parametrize("envs_per_actor", [1, 2])
def test_each_episode_is_acted_recorded_and_trained_on_with_its_own_instruction(
    colour_run, tmp_path, envs_per_actor
):
    run = copy_run(colour_run, tmp_path / "run")
    batched = ["--online.envs_per_actor=2", "--env.backend=mujoco_cpu"] if envs_per_actor > 1 else []
    args = overrides(run, *COLOUR, f"--online.address={free_address()}", *batched)
    done = subprocess.run(
        [sys.executable, "-c", CODE, "online", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cfg = load_config(None, args)
    tasks = json.loads((run / "checkpoints" / "offline_seed0" / "config.json").read_text())["policy"]["tasks"]
    assert len(tasks) > 1
    folder = run / "online" / "online_qc_seed0"
    log = ZarrReplayBuffer(folder / "actor0" / "episodes")
    if envs_per_actor > 1:
        seeds = log.episode_arrays()[ENV_SEED_KEY].tolist()
    else:  # the single actor's episode j resets with the seed of Actor.env_seed(0, j)
        seeds = [ONLINE_SEED_OFFSET + 0 * ACTOR_SEED_STRIDE + j for j in range(log.num_episodes)]
    env = make_env(cfg.env)
    expected = [env.reset(seed=s)[1]["task"] for s in seeds]
    env.close()
    recorded = []
    for j in range(log.num_episodes):
        index = np.unique(log.episode(j)[keys.TASK_INDEX])
        assert len(index) == 1  # one instruction per episode
        recorded.append(tasks[int(index[0])])
    assert recorded == expected and len(set(expected)) > 1, expected
    replay = ZarrReplayBuffer(folder / "replay")
    np.testing.assert_array_equal(replay.arrays()[keys.TASK_INDEX], log.arrays()[keys.TASK_INDEX])
    # the learner's batches (demos and online chunks) carry each chunk's instruction as the policy reads it
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    online = learner.replay.sample_online(64, np.random.default_rng(0))
    states = replay.arrays()[keys.STATE]
    episode_of_frame = np.repeat(np.arange(replay.num_episodes), np.diff(replay.episode_ends, prepend=0))
    drawn = online["observations"]
    for state, task in zip(drawn[keys.STATE], drawn[keys.TASK], strict=True):
        frame = np.flatnonzero((states == state).all(axis=1))[0]
        assert task == expected[episode_of_frame[frame]]
    np.testing.assert_array_equal(online["next_observations"][keys.TASK], online["observations"][keys.TASK])
    (batch,) = learner.draw_batches()
    assert len(batch["observations"][keys.TASK]) == cfg.online.batch_size
    assert set(batch["observations"][keys.TASK]) <= set(tasks)
