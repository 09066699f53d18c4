"""QC-FQL agent (docs/algorithms.md §4 on flattened chunks)."""

import numpy as np
import torch

from robot_rl.algos import QCFQLAgent
from robot_rl.config import OfflineRLConfig, PolicyConfig
from robot_rl.policies import build_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch, fake_obs, fake_stats

H, D = 5, SIM_ACTION_DIM
PCFG = PolicyConfig(horizon=H, hidden_dims=[64, 64])


def _agent(**kw):
    torch.manual_seed(0)
    kw = {"reward_norm": "none", **kw}
    ocfg = OfflineRLConfig(method="qc_fql", critic_hidden_dims=[32, 32], lr=1e-3, **kw)
    agent = build_agent("qc_fql", PCFG, ocfg, SIM_OBS_SHAPES, D, fake_stats())
    assert isinstance(agent, QCFQLAgent)
    return agent


def test_fql_loss_terms_finite_and_q_normalized():
    agent = _agent()
    batch = fake_batch(16, H, seed=0)
    a_norm = agent.policy.normalize_actions(batch["actions"])
    losses = agent.actor_losses(batch["observations"], a_norm, batch["valid"])
    assert all(torch.isfinite(v) for v in losses.values())
    # normalised Q term is -mean(Q)/mean|Q|, so within [-1, 1]
    assert -1.0 - 1e-5 <= losses["q_loss"].item() <= 1.0 + 1e-5
    expected = losses["bc_loss"] + agent.cfg.fql_alpha * losses["distill_loss"] + losses["q_loss"]
    torch.testing.assert_close(losses["actor_loss"], expected)


def test_distillation_decreases():
    agent = _agent()
    batch = fake_batch(32, H, seed=0)
    metrics = [agent.update(batch) for _ in range(80)]
    for m in metrics:
        assert all(np.isfinite(list(m.values()))), m
    d = [m["distill_loss"] for m in metrics]
    assert np.mean(d[-10:]) < 0.8 * np.mean(d[:10]), (np.mean(d[:10]), np.mean(d[-10:]))


def test_fql_act_is_clipped_one_step_output():
    agent = _agent(extraction="actor")
    obs = fake_obs(3, seed=2)
    z = torch.randn(3, H, D)
    a = agent.act(obs, z)
    expected = agent.policy.unnormalize_actions(agent.one_step(obs, z).clamp(-1, 1))
    torch.testing.assert_close(a, expected)
    assert set(agent.modules()) == {"policy", "critic", "target_critic", "one_step"}
