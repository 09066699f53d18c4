"""Q-chunking targets and critic loss against hand-computed numbers (ALGORITHMS.md §3)."""

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
