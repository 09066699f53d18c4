"""The default offline-RL guard (issue 38 item 2): QC-FQL and CO-RFT act with BC-anchored extraction, the
best of N behaviour-flow samples under their critic, so every acted chunk is a BC sample;
``offline.extraction=actor`` restores the one-step actor, and ``robot-rl eval`` may switch it."""

import pytest
import torch

from robot_rl.config import OfflineRLConfig, PolicyConfig
from robot_rl.eval.inference import apply_inference
from robot_rl.policies import build_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch, fake_obs, fake_stats

H, D, N = 5, SIM_ACTION_DIM, 6
PCFG = PolicyConfig(horizon=H, hidden_dims=[32, 32])


def _agent(method: str, **kw):
    torch.manual_seed(0)
    cfg = OfflineRLConfig(method=method, critic_hidden_dims=[32, 32], best_of_n=N, reward_norm="none", **kw)
    agent = build_agent(method, PCFG, cfg, SIM_OBS_SHAPES, D, fake_stats())
    for _ in range(3):  # a critic and actor that have moved from their initialisation
        batch = fake_batch(8, H, seed=0)
        if method == "corft":
            pre = fake_batch(8 * H, H, seed=2)["observations"]
            batch.update(
                prefix_observations={k: v.reshape(8, H, *v.shape[1:]) for k, v in pre.items()},
                step_rewards=torch.rand(8, H),
                step_dones=torch.zeros(8, H),
                prefix_critic_valid=torch.ones(8, H),
            )
        agent.update(batch)
    agent.eval()
    return agent


@pytest.mark.parametrize("method", ["qc_fql", "corft"])
def test_default_extraction_acts_with_the_critics_best_behaviour_flow_sample(method):
    agent = _agent(method)
    assert agent.cfg.extraction == "bc_anchored"
    obs = fake_obs(3, seed=4)
    noise = torch.randn(3, N, H, D)
    acted = agent.act(obs, noise)
    with torch.no_grad():
        samples = agent.policy.sample(obs, num_samples=N, noise=noise)  # (B, N, h, d) normalised
        q = torch.stack([agent.critic.q_agg(agent.critic(obs, samples[:, i])) for i in range(N)], 1)
        best = samples[torch.arange(3), q.argmax(1)]
    torch.testing.assert_close(acted, agent.policy.unnormalize_actions(best, obs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["qc_fql", "corft"])
def test_actor_extraction_acts_with_the_one_step_policy_and_eval_can_switch_it(method):
    agent = _agent(method)
    assert apply_inference(agent, {"offline.extraction": "actor"})["offline.extraction"] == "actor"
    obs, z = fake_obs(3, seed=4), torch.randn(3, H, D)
    with torch.no_grad():
        actor = agent.policy.unnormalize_actions(agent.policy.clip_normalized(agent.one_step(obs, z)), obs)
    torch.testing.assert_close(agent.act(obs, z), actor)
    with torch.no_grad():  # the actor's chunk is none of the flow's samples: the two extractions differ
        samples = agent.policy.unnormalize_actions(agent.policy.sample(obs, N), obs)
    assert (samples - actor[:, None]).abs().amax((2, 3)).min() > 1e-3
