"""Batched online RL (issue 19 item 5): an actor stepping ``online.envs_per_actor`` simulated envs as one
batch on the ``mujoco_cpu`` backend, with a real learner and actor process on localhost."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from online_setup import CODE, copy_run, free_address, overrides

from robot_rl import keys
from robot_rl.config import ConfigError, load_config
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.runtime.actor import ACTOR_SEED_STRIDE, ONLINE_SEED_OFFSET, Actor
from robot_rl.runtime.batched_actor import ENV_INDEX_KEY, ENV_SEED_KEY, BatchedActor, actor_class

BATCHED = ["--online.envs_per_actor=2", "--env.backend=mujoco_cpu"]


def _replay_on_single_env(cfg, seed: int, frames: dict) -> tuple[bool, bool]:
    """Re-run a logged episode on the single env from its seed with its actions; assert every recorded
    observation, reward and the final observation match bit for bit. Returns the env's last
    (terminated, truncated)."""
    from robot_rl.sim import make_env

    env = make_env(cfg.env)
    try:
        obs, _ = env.reset(seed=seed)
        ended = (False, False)
        for t, action in enumerate(frames[keys.ACTION]):
            assert not any(ended), f"the env's episode ended before logged step {t}"
            for k in (keys.STATE, keys.ENV_STATE):
                np.testing.assert_array_equal(frames[k][t], obs[k], err_msg=f"{k} at step {t}")
            obs, reward, terminated, truncated, _ = env.step(action)
            assert frames[keys.REWARD][t] == np.float32(reward)
            assert frames[keys.DONE][t] == terminated
            ended = (terminated, truncated)
        for k in (keys.STATE, keys.ENV_STATE):
            np.testing.assert_array_equal(frames[keys.final_key(k)], obs[k], err_msg=f"final {k}")
        return ended
    finally:
        env.close()


def test_two_envs_per_actor_train_and_log_every_envs_episodes(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    # the actor's own step cap (25 < the env's 60) and a tight throttle (fewer steps ahead than two
    # episodes in flight hold) are both exercised
    args = overrides(
        run,
        f"--online.address={free_address()}",
        "--online.max_episode_steps=25",
        "--online.max_env_steps_ahead=10",
        *BATCHED,
    )
    done = subprocess.run(
        [sys.executable, "-c", CODE, "online", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cfg = load_config(None, args)
    folder = run / "online" / "online_qc_seed0"
    summary = json.loads((folder / "summary.json").read_text())
    log = ZarrReplayBuffer(folder / "actor0" / "episodes")
    replay = ZarrReplayBuffer(folder / "replay")
    # the learner holds every episode of both envs, once, and counts all their steps (UTD 1)
    assert replay.num_episodes == log.num_episodes and summary["env_steps"] == len(replay) == len(log)
    assert summary["env_steps"] >= summary["env_steps_trained"] >= 120
    assert summary["updates"] >= summary["env_steps_trained"]
    np.testing.assert_array_equal(replay.arrays()[keys.ACTION], log.arrays()[keys.ACTION])
    np.testing.assert_array_equal(
        replay.episode_arrays()[keys.final_key(keys.STATE)], log.episode_arrays()[keys.final_key(keys.STATE)]
    )
    per_episode = log.episode_arrays()
    envs, seeds = per_episode[ENV_INDEX_KEY], per_episode[ENV_SEED_KEY]
    assert set(envs.tolist()) == {0, 1}
    base = ONLINE_SEED_OFFSET  # training seed 0, actor 0
    for env in (0, 1):  # episode j of env i: seed base + 2 j + i, in order
        np.testing.assert_array_equal(seeds[envs == env], base + 2 * np.arange((envs == env).sum()) + env)
    assert seeds.max() < base + ACTOR_SEED_STRIDE
    interventions = 0
    for index in range(log.num_episodes):
        frames = log.episode(index)
        steps = len(frames[keys.ACTION])
        terminated, truncated = _replay_on_single_env(cfg, int(seeds[index]), frames)
        # each episode ends where its own env ended it, or at the actor's cap
        assert terminated or truncated or steps == 25, (index, steps)
        assert steps <= 25
        intervened = int(frames[keys.INTERVENTION].sum())
        assert envs[index] == 0 or intervened == 0  # the simulated human drives env 0 only
        interventions += intervened
    assert interventions > 0  # the tiny policy stalls; the human takes over on env 0


def test_bad_envs_per_actor_fails_naming_the_keys(tmp_path):
    base = [f"--run_dir={tmp_path}"]
    with pytest.raises(ConfigError, match="online.envs_per_actor=0"):
        load_config(None, [*base, "--online.envs_per_actor=0"])
    with pytest.raises(ConfigError, match=r"online.envs_per_actor=2 needs env.backend=mujoco_cpu"):
        load_config(None, [*base, "--online.envs_per_actor=2"])  # the default backend is gym_vector
    with pytest.raises(ConfigError, match=r"online.envs_per_actor=2 with intervention.device=gui"):
        load_config(None, [*base, *BATCHED, "--intervention.device=gui"])
    with pytest.raises(ConfigError, match=r"online.envs_per_actor=2 with reward.mode='shaped'"):
        load_config(None, [*base, *BATCHED, "--reward.mode=shaped"])
    cfg = load_config(None, [*base, *BATCHED, "--intervention.device=sim_human"])
    assert actor_class(cfg) is BatchedActor
    assert actor_class(load_config(None, base)) is Actor  # N = 1: the single-env actor, unchanged
