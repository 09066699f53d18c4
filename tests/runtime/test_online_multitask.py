"""Online human-in-the-loop RL on a multi-task batch (``env.tasks``, issue 20 item 4): each actor's batch
runs every task, env i of actor k runs ``tasks[(k + i) % T]``, so each actor's simulated human plays a
different task's scripted human on its env 0. Real learner and actor processes on localhost, real physics:
every logged episode replays bit for bit on its task's single env, and the interventions are the ones that
task's human makes on those observations."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from online_setup import CODE, free_address, overrides, replay_on_single_env

from robot_rl import keys
from robot_rl.config import EnvConfig, load_config
from robot_rl.data.lerobot.ops import merge
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.runtime.batched_actor import ENV_INDEX_KEY, ENV_SEED_KEY
from robot_rl.sim import make_env
from robot_rl.stages.collect import collect
from robot_rl.stages.train import train
from robot_rl.teleop import make_device

PICK, DRAWER = "robot_rl/PandaPickCube-v0", "robot_rl/PandaOpenDrawer-v0"
PADDED = "--env.environment_state_size=7"  # pick-cube's size: the drawer's 4 numbers padded to it
MULTI = [
    PADDED,
    f"--env.tasks=[{PICK},{DRAWER}]",
    "--env.backend=mujoco_cpu",
    "--online.envs_per_actor=2",
    "--online.num_actors=2",
    "--online.env_steps=240",
    "--online.max_episode_steps=40",
    # the human steps in quickly, so that each actor's env 0 sees takeovers within the tiny budget
    "--intervention.stall_steps=4",
]


@pytest.fixture(scope="module")
def two_task_run(tmp_path_factory):
    """4 demos each of pick-cube and open-drawer merged into one dataset, and tiny BC + QC checkpoints
    conditioned on both instructions."""
    root = tmp_path_factory.mktemp("two_task_run")
    for task, name in ((PICK, "pick"), (DRAWER, "drawer")):
        cfg = load_config(
            None,
            overrides(root / name, f"--env.id={task}", PADDED, "--collect.num_episodes=4"),
        )
        collect(cfg)
    merge([root / "pick" / "dataset", root / "drawer" / "dataset"], root / "run" / "dataset")
    cfg = load_config(None, overrides(root / "run", PADDED))
    train(cfg, "offline", 0)
    return root / "run"


@pytest.mark.e2e
def test_each_actor_runs_every_task_with_a_human_on_a_different_one(two_task_run):
    run = two_task_run
    args = overrides(run, *MULTI, f"--online.address={free_address()}")
    done = subprocess.run(
        [sys.executable, "-c", CODE, "online", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cfg = load_config(None, args)
    folder = run / "online" / "online_qc_seed0"
    tasks = json.loads((run / "checkpoints" / "offline_seed0" / "config.json").read_text())["policy"]["tasks"]
    instruction, box = {}, {}
    for t in (PICK, DRAWER):
        env = make_env(EnvConfig(id=t))
        instruction[t], box[t] = env.unwrapped.task, (env.action_space.low, env.action_space.high)
        env.close()
    assert sorted(tasks) == sorted(instruction.values())
    intervened = {}
    for k in (0, 1):
        log = ZarrReplayBuffer(folder / f"actor{k}" / "episodes")
        per_episode = log.episode_arrays()
        envs, seeds = per_episode[ENV_INDEX_KEY].tolist(), per_episode[ENV_SEED_KEY].tolist()
        assert set(envs) == {0, 1}, k
        for j, (env, seed) in enumerate(zip(envs, seeds, strict=True)):
            task = (PICK, DRAWER)[(k + env) % 2]
            frames = log.episode(j)
            assert {tasks[int(i)] for i in frames[keys.TASK_INDEX]} == {instruction[task]}
            human = None
            if env == 0:
                human = make_device(cfg.intervention, *box[task], task_id=task)
            else:
                assert not frames[keys.INTERVENTION].any()
            replay_on_single_env(EnvConfig(id=task, environment_state_size=7), seed, frames, device=human)
            intervened[task] = intervened.get(task, 0) + int(frames[keys.INTERVENTION].sum())
    # each task had a human: actor 0's on pick-cube, actor 1's on the drawer
    assert intervened[PICK] > 0 and intervened[DRAWER] > 0, intervened
    replay = ZarrReplayBuffer(folder / "replay")
    assert set(np.unique(replay.arrays()[keys.TASK_INDEX]).tolist()) == {0, 1}


def test_a_policy_that_reads_a_state_the_batch_leaves_out_is_refused(two_task_run, tmp_path, capsys):
    """Without padding, the two tasks' object states differ in size, so the batch leaves the feature out;
    the checkpoint (trained on it) is refused before any actor starts, naming env.tasks and the key."""
    from robot_rl.cli.main import main

    unpadded = [f for f in MULTI if f != PADDED]
    flags = overrides(
        tmp_path / "run", *unpadded, f"--online.init={two_task_run / 'checkpoints' / 'offline_seed0'}"
    )
    assert main(["online", *flags]) == 2
    err = capsys.readouterr().err
    assert "the checkpoint does not fit env.tasks=" in err and keys.ENV_STATE in err, err
    assert not (tmp_path / "run" / "online").exists()
