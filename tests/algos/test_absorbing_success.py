"""Absorbing success (issue 38 item 2): a chunk that ends in a success is worth the discounted value of the
absorbing success state, V = r'_a / (1 - gamma), in the TD targets of QC / QC-FQL (``success_tail``), of
CO-RFT's prefixes and its Monte-Carlo return; hand-computed numbers on sampler batches."""

import numpy as np
import pytest
import torch

from robot_rl import keys
from robot_rl.algos.batch import batch_to_torch
from robot_rl.algos.critic import ChunkCritic
from robot_rl.algos.targets import (
    check_success_value,
    critic_td_step,
    prefix_targets,
    reward_affine,
    success_tail,
    success_values,
)
from robot_rl.config import ConfigError, load_config
from robot_rl.data.training.sampler import ChunkSampler
from robot_rl.eval.q_values import calibration_returns

GAMMA = 0.5


def _arrays(with_success: bool = True) -> tuple[dict, np.ndarray]:
    """Episode 0: 4 frames, ends in a success (done and success at frame 3). Episode 1: 3 frames, ends in a
    failed termination (done at frame 6, success false)."""
    arrays = {
        "observation.state": np.arange(7, dtype=np.float32)[:, None].repeat(3, 1),
        keys.ACTION: np.zeros((7, 1), np.float32),
        keys.REWARD: np.array([0.1, 0.2, 0.3, 1.0, 0.5, 0.5, 0.5], np.float32),
        keys.DONE: np.array([0, 0, 0, 1, 0, 0, 1], bool),
    }
    if with_success:
        arrays[keys.SUCCESS] = np.array([0, 0, 0, 1, 0, 0, 0], bool)
    return arrays, np.array([0, 0, 0, 0, 1, 1, 1])


def _sampler(with_success: bool = True) -> ChunkSampler:
    arrays, episodes = _arrays(with_success)
    return ChunkSampler(arrays, episodes, ["observation.state"], horizon=2, gamma=GAMMA, prefixes=True)


def test_sampler_marks_a_success_inside_the_chunk_with_its_discount_and_reward():
    b = _sampler().get(np.array([0, 2, 3, 5]))
    # t=2: success at step 1 -> gamma^2; t=3: at step 0 -> gamma^1; t=0 none; t=5 a failed termination
    np.testing.assert_allclose(b["success_discount"], [0.0, 0.25, 0.5, 0.0])
    np.testing.assert_allclose(b["success_reward"], [0.0, 1.0, 1.0, 0.0])
    np.testing.assert_allclose(b["step_success"], [[0, 0], [0, 1], [1, 0], [0, 0]])
    # the Monte-Carlo return of t=0 ends in the success after 4 steps: gamma^4; episode 1 failed
    np.testing.assert_allclose(b["mc_success_discount"], [0.0625, 0.25, 0.5, 0.0])
    np.testing.assert_allclose(b["mc_success_reward"], [1.0, 1.0, 1.0, 0.0])


def test_without_a_success_column_every_termination_counts_as_a_success():
    b = _sampler(with_success=False).get(np.array([5]))
    np.testing.assert_allclose(b["success_discount"], [0.25])
    np.testing.assert_allclose(b["success_reward"], [0.5])


def test_absorbing_values_hand_computed_under_each_reward_map():
    r = torch.tensor([1.0])
    scale_map = reward_affine("scale", [0.0, 2.0])  # r' = r / 2
    # r_success: 0.5 / (1 - 0.5) = 1; r_max: (2 / 2) / 0.5 = 2; zero: 0
    assert success_values(r, "r_success", scale_map, [0.0, 2.0], GAMMA).item() == pytest.approx(1.0)
    assert success_values(r, "r_max", scale_map, [0.0, 2.0], GAMMA).item() == pytest.approx(2.0)
    assert success_values(r, "zero", scale_map, [0.0, 2.0], GAMMA).item() == 0.0
    max_map = reward_affine("max", [0.0, 2.0])  # r' = (r - 2) / 2 <= 0
    assert success_values(r, "r_max", max_map, [0.0, 2.0], GAMMA).item() == 0.0
    assert success_values(r, "r_success", max_map, [0.0, 2.0], GAMMA).item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="offline.reward_range"):
        success_values(r, "r_max", (0.0, 1.0), [], GAMMA)


def test_gamma_one_allows_only_a_zero_absorbing_reward():
    check_success_value("r_max", "max", 1.0)
    check_success_value("zero", "none", 1.0)
    with pytest.raises(ValueError, match="offline.success_value"):
        check_success_value("r_max", "scale", 1.0)
    with pytest.raises(ValueError, match="offline.success_value"):
        check_success_value("r_success", "max", 1.0)
    with pytest.raises(ValueError, match="offline.success_value='first'"):
        check_success_value("first", "max", 0.99)


def test_a_config_with_an_infinite_absorbing_value_is_refused_at_load():
    """The same rule in the offline section's validate(): one line naming the keys, before any work."""
    load_config(None, ["--offline.gamma=1.0", "--offline.success_value=zero", "--offline.reward_norm=scale"])
    with pytest.raises(ConfigError, match=r"offline\.success_value='r_max' with offline\.gamma=1\.0"):
        load_config(None, ["--offline.gamma=1.0", "--offline.reward_norm=scale"])


class _Enc(torch.nn.Module):
    out_dim = 3

    def forward(self, obs):
        return obs["observation.state"]


def test_qc_target_adds_the_absorbing_value_of_a_success_and_zero_restores_the_old_target():
    batch = batch_to_torch(_sampler().get(np.array([2, 5])))
    affine = reward_affine("scale", [0.0, 2.0])
    critic = ChunkCritic(_Enc(), action_dim=1, horizon=2, hidden_dims=[8], num_critics=2)
    opt = torch.optim.SGD(critic.parameters(), lr=0.0)
    obs, actions, next_q = batch["observations"], torch.zeros(2, 2, 1), torch.tensor([7.0, 7.0])
    ys = {}
    for mode in ("r_success", "zero"):
        tail = success_tail(batch, mode, affine, [0.0, 2.0], GAMMA)
        ys[mode] = critic_td_step(critic, opt, obs, actions, next_q, batch, GAMMA, 2, affine, "drop", tail)[2]
    # t=2: R' = (0.3 + 0.5 * 1.0) / 2 = 0.4, terminal (mask 0); the success at step 1 adds
    # gamma^2 * (1.0 / 2) / (1 - gamma) = 0.25; t=5 ends in a failure: R' = (0.5 + 0.25) / 2 = 0.375
    torch.testing.assert_close(ys["r_success"], torch.tensor([0.65, 0.375]))
    torch.testing.assert_close(ys["zero"], torch.tensor([0.4, 0.375]))


def test_corft_prefix_targets_add_the_absorbing_value_after_the_success_step():
    rewards = torch.tensor([[0.3, 1.0]])
    dones = torch.tensor([[0.0, 1.0]])
    next_q = torch.tensor([[4.0, 4.0]])
    absorbing = torch.tensor([[0.0, 2.0]])  # V = 2 after the success at step 1
    y = prefix_targets(rewards, dones, next_q, GAMMA, absorbing)
    # k=1: 0.3 + 0.5 * 4 = 2.3; k=2: 0.3 + 0.5 * 1.0 + 0.25 * 2 (absorbing), no bootstrap = 1.3
    torch.testing.assert_close(y, torch.tensor([[2.3, 1.3]]))
    torch.testing.assert_close(prefix_targets(rewards, dones, next_q, GAMMA), torch.tensor([[2.3, 0.8]]))


def test_calibration_returns_count_the_absorbing_success_as_the_targets_do():
    """The critic calibration's Monte-Carlo returns (r' = r / 2, gamma 0.5): episode 0 ends in a success
    worth V = (r_max / 2) / (1 - 0.5) = 2 after its last frame; episode 1 fails and earns nothing after."""
    scale_map = reward_affine("scale", [0.0, 2.0])
    g = calibration_returns(_sampler(), "r_max", scale_map, [0.0, 2.0])
    np.testing.assert_allclose(g, [0.325, 0.55, 0.9, 1.5, 0.4375, 0.375, 0.25])
    g0 = calibration_returns(_sampler(), "zero", scale_map, [0.0, 2.0])  # the returns before the tail
    np.testing.assert_allclose(g0, [0.2, 0.3, 0.4, 0.5, 0.4375, 0.375, 0.25])
