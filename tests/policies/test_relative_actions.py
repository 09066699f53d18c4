"""Relative actions and the previous-action observation (issue 14 §3): a flow BC policy on the G1 fixture
predicted absolute 390-dim chunks from the state alone and lost to repeating the last command."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from repo_paths import LEROBOT_FIXTURES

from robot_rl import keys
from robot_rl.algos.batch import batch_to_torch
from robot_rl.config import BCConfig, ConfigError, DataConfig, PolicyConfig
from robot_rl.data.normalize import FeatureStats
from robot_rl.data.prev_action import previous_actions
from robot_rl.data.training.training_set import TrainingSet
from robot_rl.policies import FlowChunkPolicy
from robot_rl.policies.factory import build_agent

G1 = LEROBOT_FIXTURES / "g1_pick_bottle_v30"
H, D = 4, 3


def test_previous_actions_stay_inside_each_episode():
    actions = np.arange(12, dtype=np.float32).reshape(6, 2)
    episodes = np.array([0, 0, 0, 1, 1, 2])
    prev = previous_actions(actions, episodes, -actions)
    # first frame of each episode: the start value; else the row before
    np.testing.assert_array_equal(prev[:, 0], [0, 0, 2, -6, 6, -10])
    assert prev.dtype == np.float32 and prev.shape == (6, 2)


def _stats() -> dict[str, FeatureStats]:
    rng = np.random.default_rng(0)
    return {
        keys.STATE: FeatureStats.from_array(rng.normal(size=(50, D))),
        keys.ACTION: FeatureStats.from_array(0.1 * rng.normal(size=(50, H, D))),  # per chunk step
    }


def _relative_policy() -> FlowChunkPolicy:
    torch.manual_seed(0)
    cfg = PolicyConfig(horizon=H, hidden_dims=[16], action_reference=keys.STATE)
    return FlowChunkPolicy(cfg, {keys.STATE: (D,)}, D, _stats())


def test_relative_actions_round_trip_and_subtract_the_reference():
    policy = _relative_policy()
    state = torch.tensor([[1.0, -2.0, 3.0], [0.5, 0.0, -0.5]])
    obs = {keys.STATE: state}
    chunk = state[:, None, :] + 0.05 * torch.randn(2, H, D)
    norm = policy.normalize_actions(chunk, obs)
    torch.testing.assert_close(policy.unnormalize_actions(norm, obs), chunk)
    expected = (chunk - state[:, None, :] - policy.action_offset) / policy.action_scale
    torch.testing.assert_close(norm, expected)
    # the chunk the policy acts is the reference plus the unnormalised sample
    noise = torch.zeros(2, 1, H, D)
    sample = policy.sample(obs, 1, noise)[:, 0]
    acted = state[:, None, :] + sample * policy.action_scale + policy.action_offset
    torch.testing.assert_close(policy.act(obs, noise), acted)
    with pytest.raises(ValueError, match="observation.state"):
        policy.normalize_actions(chunk)


@pytest.mark.skipif(not G1.is_dir(), reason=f"fixture absent: {G1}")
def test_g1_training_set_with_previous_action_and_relative_stats(tmp_path):
    cfg = DataConfig(
        path=str(G1), images=False, val_episodes=[4], prev_action=True, prev_action_start=keys.STATE
    )
    data = TrainingSet(G1, cfg, horizon=5, gamma=0.99, cache_dir=tmp_path, action_reference=keys.PREV_ACTION)
    assert data.obs_shapes[keys.PREV_ACTION] == (26,)
    batch = data.sample(8, seed=0, step=0)
    rows = data.train.rows[np.random.default_rng([0, 0]).integers(0, len(data.train.rows), size=8)]
    table = data.dataset.load_tabular()
    action = np.asarray(table[keys.ACTION]).reshape(-1, 26)
    episode = np.asarray(table[keys.EPISODE_INDEX]).reshape(-1)
    starts = np.array([data.dataset.episode_from[e] for e in episode[rows]])
    state = np.asarray(table[keys.STATE]).reshape(-1, 26)
    expected = np.where((rows == starts)[:, None], state[rows], action[np.maximum(rows - 1, starts)])
    np.testing.assert_array_equal(batch["observations"][keys.PREV_ACTION], expected)
    # the action statistics are those of a[t+k] - a[t-1]: a few hundredths of a radian, not the joint range
    absolute = FeatureStats.from_array(action[data.train.rows])
    stats = data.stats[keys.ACTION]
    assert (stats.q99 - stats.q01 < absolute.q99 - absolute.q01).sum() >= 20
    assert np.abs(stats.mean).max() < 0.05
    # a BC agent trains on it and acts around the previous command
    agent = build_agent(
        "bc",
        PolicyConfig(horizon=5, hidden_dims=[32], action_reference=keys.PREV_ACTION),
        type("B", (), {"lr": 1e-3})(),
        data.obs_shapes,
        26,
        data.stats,
    )
    torch_batch = batch_to_torch(batch, "cpu")
    assert np.isfinite(agent.update(torch_batch)["bc_loss"])
    chunk = agent.act(torch_batch["observations"])
    assert chunk.shape == (8, 5, 26)
    # the offline-RL validation pass (Q against Monte-Carlo returns) normalises relative chunks too
    from robot_rl.config import OfflineRLConfig
    from robot_rl.eval.q_values import q_calibration

    qc = build_agent(
        "qc",
        PolicyConfig(horizon=5, hidden_dims=[32], action_reference=keys.PREV_ACTION),
        OfflineRLConfig(critic_hidden_dims=[32], best_of_n=2, reward_norm="none"),
        data.obs_shapes,
        26,
        data.stats,
    )
    calibration = q_calibration(qc, data, data.val, max_frames=16)
    assert np.isfinite(calibration["val_q_data"]) and np.isfinite(calibration["val_q_policy"])
    with pytest.raises(ConfigError, match="policy.action_reference"):
        TrainingSet(G1, cfg, horizon=5, gamma=0.99, cache_dir=tmp_path, action_reference="observation.nope")


def test_bc_act_noise_zero_is_the_chunk_from_zero_noise():
    policy = _relative_policy()
    obs = {keys.STATE: torch.randn(3, D)}
    agent = build_agent("bc", policy.cfg, BCConfig(act_noise=0.0), {keys.STATE: (D,)}, D, _stats())
    agent.policy.load_state_dict(policy.state_dict())
    zero = torch.zeros(3, 1, H, D)
    torch.testing.assert_close(agent.act(obs), agent.act(obs, zero))
    torch.testing.assert_close(agent.act(obs), agent.act(obs))  # deterministic


def test_relative_actions_clip_to_the_per_step_range_and_clamp_to_a_box():
    policy = _relative_policy()
    with torch.no_grad():  # push the velocity field far out so the ODE leaves the data's range
        policy.velocity[-1].bias.fill_(50.0)
    obs = {keys.STATE: torch.zeros(2, D)}
    chunk = policy.sample(obs, 1)[:, 0]
    assert policy.action_high_norm.shape == (H, D)
    torch.testing.assert_close(chunk, policy.action_high_norm.expand(2, H, D))
    stats = _stats()
    cfg = PolicyConfig(
        horizon=H, hidden_dims=[16], action_reference=keys.STATE, action_low=[-1.0] * D, action_high=[0.5] * D
    )
    boxed = FlowChunkPolicy(cfg, {keys.STATE: (D,)}, D, stats)
    acted = boxed.unnormalize_actions(torch.full((2, H, D), 3.0), {keys.STATE: torch.full((2, D), 10.0)})
    assert (acted == 0.5).all()


def test_a_history_reference_uses_its_most_recent_command():
    """``observation.prev_action`` holding k commands (data.prev_action_steps), (B, k·d): relative actions
    are taken to its first d values, a[t−1], as with k = 1."""
    torch.manual_seed(0)
    cfg = PolicyConfig(horizon=H, hidden_dims=[16], action_reference=keys.PREV_ACTION)
    stats = {
        **_stats(),
        keys.PREV_ACTION: FeatureStats.from_array(np.random.default_rng(1).normal(size=(50, 3 * D))),
    }
    policy = FlowChunkPolicy(cfg, {keys.PREV_ACTION: (3 * D,)}, D, stats)
    history = torch.randn(2, 3 * D)
    chunk = history[:, None, :D] + 0.05 * torch.randn(2, H, D)
    norm = policy.normalize_actions(chunk, {keys.PREV_ACTION: history})
    torch.testing.assert_close(
        norm, (chunk - history[:, None, :D] - policy.action_offset) / policy.action_scale
    )
    torch.testing.assert_close(policy.unnormalize_actions(norm, {keys.PREV_ACTION: history}), chunk)


def test_a_velocity_reference_continues_the_last_change_at_every_chunk_step():
    """``policy.action_reference_velocity``: chunk step i is taken relative to a[t−1] + (i + 1)(a[t−1] −
    a[t−2]), the change being the second d values of ``observation.prev_action``; acting adds it back."""
    torch.manual_seed(0)
    cfg = PolicyConfig(
        horizon=H, hidden_dims=[16], action_reference=keys.PREV_ACTION, action_reference_velocity=True
    )
    stats = {
        **_stats(),
        keys.PREV_ACTION: FeatureStats.from_array(np.random.default_rng(1).normal(size=(50, 2 * D))),
    }
    policy = FlowChunkPolicy(cfg, {keys.PREV_ACTION: (2 * D,)}, D, stats)
    history = torch.randn(2, 2 * D)
    obs = {keys.PREV_ACTION: history}
    chunk = torch.randn(2, H, D)
    reference = history[:, None, :D] + torch.arange(1.0, H + 1)[None, :, None] * history[:, None, D:]
    norm = policy.normalize_actions(chunk, obs)
    torch.testing.assert_close(norm, (chunk - reference - policy.action_offset) / policy.action_scale)
    torch.testing.assert_close(policy.unnormalize_actions(norm, obs), chunk)
    noise = torch.zeros(2, 1, H, D)
    acted = reference + policy.sample(obs, 1, noise)[:, 0] * policy.action_scale + policy.action_offset
    torch.testing.assert_close(policy.act(obs, noise), acted)
    with pytest.raises(ValueError, match="chunks"):
        policy.normalize_actions(chunk[:, 0], obs)
    with pytest.raises(ValueError, match="data.prev_action_steps >= 2"):
        policy.normalize_actions(chunk, {keys.PREV_ACTION: history[:, :D]})
    with pytest.raises(ValueError, match="needs policy.action_reference"):
        FlowChunkPolicy(
            PolicyConfig(horizon=H, hidden_dims=[16], action_reference_velocity=True),
            {keys.STATE: (D,)},
            D,
            _stats(),
        )
