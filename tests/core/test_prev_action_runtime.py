"""``observation.prev_action`` at run time (issue 14): a policy trained with ``data.prev_action`` must get, at
step t, the action executed at t − 1 (the human's where one took over) and the training start value at
t = 0, in ``robot-rl eval`` (robot_rl.source_build.policy_source + rollout) and in the online actor. Before,
neither fed it: eval refused the checkpoint (the env has no such observation) and the actor never set it.
With ``data.prev_action_steps`` = k (issue 38 item 4) each runtime feeds the last k executed actions, built
here for the recorded episode by training's own definition (robot_rl.data.prev_action.previous_actions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from online_setup import free_address, overrides

from robot_rl import keys
from robot_rl.actor_build import build_actor_parts
from robot_rl.config import (
    BCConfig,
    DataConfig,
    EnvConfig,
    PipelineConfig,
    PolicyConfig,
    config_to_dict,
    load_config,
)
from robot_rl.data.normalize import FeatureStats
from robot_rl.data.prev_action import previous_actions
from robot_rl.policies.factory import build_agent, save_agent
from robot_rl.rollout import rollout
from robot_rl.source_build import policy_source
from robot_rl.stages.envs import make_rollout_vec_env


def _save_prev_action_policy(path: Path, space, steps: int = 1) -> list[str]:
    """A flow BC policy with h = 1 that reads observation.prev_action (the last ``steps`` actions), acting
    deterministically (from x0 = 0), saved as a checkpoint; returns its observation keys."""
    obs_space, action_space = space
    d = int(action_space.shape[0])
    shapes = {k: tuple(s.shape) for k, s in obs_space.spaces.items() if not keys.is_image_key(k)}
    shapes[keys.PREV_ACTION] = (steps * d,)
    rng = np.random.default_rng(0)
    stats = {k: FeatureStats.from_array(rng.normal(size=(64, *s))) for k, s in shapes.items()}
    stats[keys.ACTION] = FeatureStats.from_array(
        rng.uniform(0.5 * action_space.low, 0.5 * action_space.high, (64, d))
    )
    cfg = PipelineConfig(
        data=DataConfig(prev_action=True, prev_action_steps=steps),
        policy=PolicyConfig(horizon=1, hidden_dims=[16]),
        bc=BCConfig(act_noise=0.0),
    )
    torch.manual_seed(0)
    agent = build_agent("bc", cfg.policy, cfg.bc, shapes, d, stats)
    save_agent(path, agent, {**config_to_dict(cfg), "obs_keys": sorted(shapes)}, stats, shapes, d)
    return sorted(shapes)


def _expected(
    agent, obs_keys: list[str], frames: dict, low, high, steps: int = 1, oldest_first: bool = False
) -> np.ndarray:
    """What the policy acts at every step when fed the last ``steps`` executed actions as training builds
    them from the recorded episode (0 before t = 0); ``oldest_first`` feeds them in the wrong order."""
    actions = frames[keys.ACTION]
    prev = previous_actions(actions, np.zeros(len(actions), np.int64), np.zeros_like(actions), steps)
    if steps == 1:  # the definition before data.prev_action_steps: the action one step back
        np.testing.assert_array_equal(prev, np.concatenate([np.zeros_like(actions[:1]), actions[:-1]]))
    if oldest_first:
        prev = prev.reshape(len(prev), steps, -1)[:, ::-1].reshape(len(prev), -1)
    obs = {**{k: frames[k] for k in obs_keys if k != keys.PREV_ACTION}, keys.PREV_ACTION: prev}
    with torch.no_grad():
        chunk = agent.act({k: torch.as_tensor(np.asarray(v, np.float32)) for k, v in obs.items()}).numpy()
    return np.clip(chunk[:, 0], low, high)


@pytest.mark.parametrize("steps", [1, 3])
def test_eval_feeds_the_previous_executed_action(tmp_path, steps):
    vec = make_rollout_vec_env(EnvConfig(num_envs=2, max_episode_steps=25))
    space = (vec.single_observation_space, vec.single_action_space)
    low, high = space[1].low, space[1].high
    obs_keys = _save_prev_action_policy(tmp_path / "ckpt", space, steps)
    cfg = PipelineConfig()
    source, _ = policy_source(cfg, tmp_path / "ckpt", 0, space, vec.num_envs)
    episodes = []
    try:
        rollout(vec, source, [1_000_000 + i for i in range(3)], episodes.append)
    finally:
        source.close()
        vec.close()
    assert len(episodes) == 3
    for ep in episodes:
        actions = ep.frames[keys.ACTION]
        np.testing.assert_allclose(
            actions, _expected(source.agent, obs_keys, ep.frames, low, high, steps), atol=1e-5
        )
        # the input matters: fed zeros throughout, the policy acts otherwise
        zeros = {**ep.frames, keys.ACTION: np.zeros_like(actions)}
        assert not np.allclose(
            actions[1:], _expected(source.agent, obs_keys, zeros, low, high, steps)[1:], atol=1e-4
        )
        if steps > 1:  # and so does the order of the history
            swapped = _expected(source.agent, obs_keys, ep.frames, low, high, steps, oldest_first=True)
            assert not np.allclose(actions[1:], swapped[1:], atol=1e-4)


@pytest.mark.parametrize("steps", [1, 2])
def test_actor_feeds_the_previous_executed_action_including_the_humans(tmp_path, steps):
    from robot_rl.runtime.actor import Actor
    from robot_rl.runtime.link import ZmqLearnerLink

    cfg = load_config(
        None,
        overrides(
            tmp_path / "run",
            "--intervention.device=sim_human",
            "--intervention.takeover_steps=5",
            "--env.max_episode_steps=60",
        ),
    )
    actor = Actor(
        cfg, 0, 0, ZmqLearnerLink(free_address(), timeout_s=0.2), build_actor_parts(cfg, 0)
    )  # no learner: cached weights
    try:
        space = (actor.env.observation_space, actor.env.action_space)
        obs_keys = _save_prev_action_policy(actor._policy_dir(), space, steps)
        (actor._policy_dir() / "version.json").write_text('{"version": 0}')
        assert actor._load_policy()
        frames, error = actor._episode(2_000_000)
    finally:
        actor.env.close()
    assert error is None
    human = frames[keys.INTERVENTION].astype(bool)
    assert human.any() and (~human).sum() > 5, "the simulated human should take over part of the episode"
    expected = _expected(actor.source.agent, obs_keys, frames, actor.low, actor.high, steps)
    np.testing.assert_allclose(frames[keys.ACTION][~human], expected[~human], atol=1e-5)
    # the policy's first step after a takeover was fed the human's last action
    after = np.flatnonzero(~human[1:] & human[:-1]) + 1
    assert after.size


@pytest.mark.parametrize("steps", [1, 2])
def test_eval_through_the_policy_server_feeds_the_previous_executed_action(tmp_path, steps):
    """The same through ``robot-rl serve`` (a real server process): the client adds the key, with the start
    value the server's spec names."""
    import subprocess
    import sys

    from online_setup import CODE

    from robot_rl.policies import load_agent

    vec = make_rollout_vec_env(EnvConfig(num_envs=1, max_episode_steps=20))
    space = (vec.single_observation_space, vec.single_action_space)
    obs_keys = _save_prev_action_policy(tmp_path / "ckpt", space, steps)
    cmd = [sys.executable, "-c", CODE, "serve", "--checkpoint", str(tmp_path / "ckpt"), "--threads", "1"]
    served = subprocess.Popen(
        [*cmd, "--address", "tcp://127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    episodes = []
    try:
        banner = served.stdout.readline()
        assert banner.startswith("serving "), served.stderr.read()
        cfg = load_config(None, [f"--deploy.server={banner.split()[1]}", "--deploy.timeout_s=60"])
        source, named = policy_source(cfg, tmp_path / "ckpt", 0, space, vec.num_envs)
        try:
            rollout(vec, source, [1_000_000, 1_000_001], episodes.append)
        finally:
            source.close()
    finally:
        vec.close()
        served.terminate()
        served.communicate(timeout=30)
    assert "server" in named and len(episodes) == 2
    agent, _ = load_agent(tmp_path / "ckpt", evaluate=True, seed=0)
    for ep in episodes:
        expected = _expected(agent, obs_keys, ep.frames, space[1].low, space[1].high, steps)
        np.testing.assert_allclose(ep.frames[keys.ACTION], expected, atol=1e-5)
