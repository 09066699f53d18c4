"""ChunkCritic's member-by-member forward (issue 38 item 3): the same Q and gradients as the batched
ensemble on the concatenated input it replaced, with the state's part of the first layer computed once per
state (docs/algorithms.md §3)."""

import pytest
import torch

from robot_rl.algos.critic import split_first_layer
from robot_rl.config import OfflineRLConfig, PolicyConfig
from robot_rl.policies import build_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_obs, fake_stats

H, D = 5, SIM_ACTION_DIM


def make_critic():
    """A QC agent's critic with every LayerNorm affine moved off (1, 0), so a dropped or misplaced affine
    changes Q."""
    torch.manual_seed(0)
    cfg = OfflineRLConfig(critic_hidden_dims=[32, 32], reward_norm="none", learner_dtype="float32")
    agent = build_agent("qc", PolicyConfig(horizon=H, hidden_dims=[32]), cfg, SIM_OBS_SHAPES, D, fake_stats())
    with torch.no_grad():
        for name, p in agent.critic.net.named_parameters():
            if p.shape[1] == 1:  # LayerNorm weights and biases, linear biases: (K, 1, D)
                p.normal_(0.5 if name.endswith("weight") else 0.0, 0.3)
    return agent.critic


def batched_q(critic, feat: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """The computation before: every state's features repeated for its n chunks, concatenated with the
    chunk, and the K members run as one batched matmul per layer (the modules' own forward)."""
    n = actions.shape[0] // feat.shape[0]
    x = torch.cat([feat.repeat_interleave(n, 0), actions.reshape(actions.shape[0], -1)], dim=-1)
    return critic.net(x.unsqueeze(0).expand(critic.num_critics, -1, -1)).squeeze(-1)


@pytest.mark.parametrize("n", [1, 2, 8])
def test_member_forward_equals_the_batched_ensemble(n):
    critic = make_critic()
    obs = fake_obs(6, seed=1)
    actions = torch.rand(6 * n, H, D) * 2 - 1
    feat = critic.features(obs)
    q = critic.q_from_features(feat, actions)
    assert q.shape == (2, 6 * n) and q.dtype == torch.float32
    torch.testing.assert_close(q, batched_q(critic, feat, actions), rtol=1e-5, atol=1e-5)
    # chunk i belongs to state i // n: pairing chunks with the wrong states changes Q
    shuffled = actions.reshape(6, n, H, D).roll(1, dims=0).reshape(6 * n, H, D)
    assert (critic.q_from_features(feat, shuffled) - q).abs().max() > 1e-3


def test_member_forward_gives_the_batched_gradients():
    critic = make_critic()
    obs = fake_obs(6, seed=2)
    actions = torch.rand(12, H, D) * 2 - 1  # two chunks per state: the per-member path
    grads = []
    for q_fn in (critic.q_from_features, lambda f, a: batched_q(critic, f, a)):
        critic.zero_grad(set_to_none=True)
        (q_fn(critic.features(obs), actions) ** 2).mean().backward()
        grads.append({name: p.grad.clone() for name, p in critic.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) == len(list(critic.net.parameters()))
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-5, atol=1e-6, msg=name)


def test_split_first_layer_equals_the_concatenated_layer():
    torch.manual_seed(0)
    feat, actions = torch.randn(4, 7), torch.randn(12, 5)
    weight, bias = torch.randn(12, 9), torch.randn(9)
    want = torch.addmm(bias, torch.cat([feat.repeat_interleave(3, 0), actions], -1), weight)
    torch.testing.assert_close(split_first_layer(feat, actions, weight, bias), want, rtol=1e-5, atol=1e-5)


def test_actions_not_a_multiple_of_the_states_fail_clearly():
    critic = make_critic()
    feat = critic.features(fake_obs(4, seed=0))
    with pytest.raises(ValueError, match=r"actions \(B\*n"):
        critic.q_from_features(feat, torch.zeros(6, H, D))
