"""Q-chunking targets and critic loss against hand-computed numbers (docs/algorithms.md §3)."""

import pytest
import torch

from robot_rl.algos import aggregate_q, masked_critic_loss, qc_target
from robot_rl.algos.critic import ChunkCritic, make_target, polyak_update


class _Enc(torch.nn.Module):
    out_dim = 3

    def forward(self, obs):
        return obs["observation.state"]


def test_qc_target_hand_computed():
    # gamma 0.9, h 3 -> gamma^h = 0.729
    rewards = torch.tensor([1.0, 0.5, 2.0])
    masks = torch.tensor([1.0, 0.0, 1.0])
    next_q = torch.tensor([10.0, 10.0, -2.0])
    y = qc_target(rewards, masks, next_q, gamma=0.9, horizon=3)
    torch.testing.assert_close(y, torch.tensor([1.0 + 7.29, 0.5, 2.0 - 1.458]))


def test_masked_critic_loss_hand_computed():
    # two critics, three samples; the last sample's chunk runs past the episode end (valid[:, h-1] = 0)
    q = torch.tensor([[1.0, 2.0, 3.0], [0.0, 4.0, -3.0]])
    y = torch.tensor([2.0, 2.0, 100.0])
    valid = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    loss = masked_critic_loss(q, y, valid[:, -1])
    # squared errors kept: (1-2)^2=1, 0, (0-2)^2=4, (4-2)^2=4 -> sum 9 over K*B = 6
    assert loss.item() == pytest.approx(9.0 / 6.0)


def test_aggregations():
    qs = torch.tensor([[1.0, 5.0], [3.0, 2.0], [2.0, 0.0]])
    torch.testing.assert_close(aggregate_q(qs, "mean"), torch.tensor([2.0, 7.0 / 3.0]))
    torch.testing.assert_close(aggregate_q(qs, "min"), torch.tensor([1.0, 0.0]))
    r2 = aggregate_q(qs, "min_random2")
    assert r2.shape == (2,) and (r2 >= qs.min(0).values).all()
    with pytest.raises(ValueError, match="unknown critic aggregation"):
        aggregate_q(qs, "max")


def test_critic_shapes_and_polyak():
    critic = ChunkCritic(_Enc(), action_dim=2, horizon=3, hidden_dims=[16, 16], num_critics=4, agg="min")
    obs = {"observation.state": torch.randn(5, 3)}
    q = critic(obs, torch.randn(5, 3, 2))
    assert q.shape == (4, 5)
    # members differ (independent init)
    assert not torch.allclose(q[0], q[1])
    target = make_target(critic)
    with torch.no_grad():
        for p in critic.parameters():
            p.add_(1.0)
    before = [p.clone() for p in target.parameters()]
    polyak_update(target, critic, tau=0.25)
    for b, t, s in zip(before, target.parameters(), critic.parameters(), strict=True):
        torch.testing.assert_close(t, 0.75 * b + 0.25 * s)


def test_algos_core_does_not_import_policies():
    import subprocess
    import sys

    code = "import sys, robot_rl.algos; assert 'robot_rl.policies' not in sys.modules, 'policies imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_reward_normalisation_maps_every_valid_step_as_the_sampler_sums_them():
    """normalize_chunk_rewards(R, valid) equals the sampler's chunk sum of per-step r' = scale (r - shift),
    on a real ChunkSampler whose last chunks run past the episode end (issue 14 §2)."""
    import numpy as np

    from robot_rl import keys
    from robot_rl.algos.targets import normalize_chunk_rewards, reward_affine
    from robot_rl.data.training.sampler import ChunkSampler

    r = np.array([0.0, 2.0, 5.0, 10.0, 1.0, 0.0, 3.0], dtype=np.float32)
    arrays = {
        "observation.state": np.zeros((7, 1), np.float32),
        keys.ACTION: np.zeros((7, 1), np.float32),
        keys.REWARD: r,
        keys.DONE: np.array([0, 0, 0, 1, 0, 0, 0], bool),
    }
    episodes = np.array([0, 0, 0, 0, 1, 1, 1])
    shift, scale = reward_affine("max", [0.0, 10.0])
    assert (shift, scale) == (10.0, 0.1)
    raw = ChunkSampler(arrays, episodes, ["observation.state"], 3, 0.9).get(np.arange(7))
    mapped = ChunkSampler(
        {**arrays, keys.REWARD: scale * (r - shift)}, episodes, ["observation.state"], 3, 0.9
    )
    expected = mapped.get(np.arange(7))["rewards"]
    got = normalize_chunk_rewards(torch.tensor(raw["rewards"]), torch.tensor(raw["valid"]), 0.9, shift, scale)
    torch.testing.assert_close(got, torch.tensor(expected))
    assert float(got.max()) <= 0.0
    assert reward_affine("scale", [-2.0, 2.0]) == (0.0, 0.25)
    assert reward_affine("none", []) == (0.0, 1.0)
    assert reward_affine("max", [1.0, 1.0]) == (1.0, 1.0)  # one reward value: shift only
    with pytest.raises(ValueError, match="offline.reward_range"):
        reward_affine("max", [])
    with pytest.raises(ValueError, match="offline.reward_norm"):
        reward_affine("minmax", [0.0, 1.0])


def test_keep_terminal_chunks_trains_chunks_past_a_termination_but_never_past_a_truncation():
    """Item 9: with terminal_chunks='keep' a chunk that runs past a true termination (mask 0) keeps its
    exact target; a chunk that runs past a truncation (mask 1) stays out of the loss either way."""
    from robot_rl.algos.targets import critic_td_step

    torch.manual_seed(0)
    critic = ChunkCritic(_Enc(), action_dim=1, horizon=2, hidden_dims=[8], num_critics=2)
    obs = {"observation.state": torch.randn(3, 3)}
    actions = torch.zeros(3, 2, 1)
    batch = {
        "rewards": torch.tensor([1.0, 1.0, 1.0]),
        "masks": torch.tensor([1.0, 0.0, 1.0]),  # sample 1 ends in a termination, sample 2 in a truncation
        "valid": torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]]),
        "critic_valid": torch.tensor([1.0, 0.0, 0.0]),
    }
    losses = {}
    for keep in (False, True):
        opt = torch.optim.SGD(critic.parameters(), lr=0.0)
        loss, q, y = critic_td_step(
            critic,
            opt,
            obs,
            actions,
            torch.zeros(3),
            batch,
            0.9,
            2,
            terminal_chunks="keep" if keep else "drop",
        )
        err = (q.detach() - y.unsqueeze(0)) ** 2
        losses[keep] = loss.item()
        weights = torch.tensor([1.0, float(keep), 0.0])
        assert loss.item() == pytest.approx(float((err * weights).mean()))
    assert losses[True] > losses[False]
