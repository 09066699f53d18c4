"""CO-RFT (docs/algorithms.md §6): per-prefix targets by hand, the prefix critic, the Cal-QL term, the TD3+BC
actor's gradients, the sampler's per-prefix fields, the CLI train -> eval smoke, and bad input."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from robot_rl import keys
from robot_rl.algos.corft import CORFTAgent, PrefixChunkCritic, cal_ql_term
from robot_rl.algos.targets import prefix_targets
from robot_rl.config import ConfigError, CORFTConfig, OfflineRLConfig, PolicyConfig, load_config
from robot_rl.data.training.sampler import ChunkSampler
from robot_rl.policies.factory import build_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM as D
from robot_rl_testing.fakes import SIM_OBS_SHAPES, fake_obs, fake_stats

H, G = 3, 0.9


def test_prefix_targets_by_hand_with_a_termination_inside_the_chunk():
    r = torch.tensor([[1.0, 2.0, 4.0], [1.0, 1.0, 0.0]])
    done = torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0]])  # row 1 terminates at its 2nd step
    nq = torch.tensor([[10.0, 20.0, 30.0], [5.0, 6.0, 7.0]])
    y = prefix_targets(r, done, nq, G)
    want = [
        [1 + G * 10, 1 + G * 2 + G**2 * 20, 1 + G * 2 + G**2 * 4 + G**3 * 30],
        [1 + G * 5, 1 + G * 1, 1 + G * 1],  # no bootstrap after the termination
    ]
    assert torch.allclose(y, torch.tensor(want))
    with pytest.raises(ValueError, match="must all be"):
        prefix_targets(r, done, nq[:, :2], G)


def test_sampler_prefix_fields_with_a_termination_and_a_truncation():
    # episode 0: 4 frames ending in a termination; episode 1: 3 frames truncated (no done)
    n = 7
    arrays = {
        "s": np.arange(n, dtype=np.float32)[:, None],
        keys.ACTION: np.zeros((n, 1), np.float32),
        keys.REWARD: np.arange(1, n + 1, dtype=np.float32),
        keys.DONE: np.array([0, 0, 0, 1, 0, 0, 0]),
    }
    ep = np.array([0, 0, 0, 0, 1, 1, 1])
    sampler = ChunkSampler(arrays, ep, ["s"], H, G, prefixes=True)
    b = sampler.get(np.array([0, 2, 5]))
    assert np.allclose(b["step_rewards"], [[1, 2, 3], [3, 4, 0], [6, 7, 0]])
    assert np.allclose(b["step_dones"], [[0, 0, 0], [0, 1, 0], [0, 0, 0]])
    assert np.allclose(b["prefix_observations"]["s"][..., 0], [[1, 2, 3], [3, 3, 3], [6, 6, 6]])
    # prefix k of t=2 ends at the termination (k=2 kept: no next state needed); t=5 truncates after k=1,
    # and its s[7] is not recorded (no final_obs), so no prefix reaching the end can be trained
    assert np.allclose(b["prefix_critic_valid"], [[1, 1, 1], [1, 1, 0], [1, 0, 0]])
    assert np.allclose(b["mc_returns"], [1 + G * 2 + G**2 * 3 + G**3 * 4, 3 + G * 4, 6 + G * 7])
    assert np.allclose(b["mc_discounts"], [1 + G + G**2 + G**3, 1 + G, 1 + G])
    # with the episodes' final observations recorded, the truncated prefix bootstraps from it
    final = {"s": np.array([[40.0], [70.0]], np.float32)}
    b = ChunkSampler(arrays, ep, ["s"], H, G, final_obs=final, prefixes=True).get(np.array([5]))
    assert np.allclose(b["prefix_observations"]["s"][..., 0], [[6, 70, 70]])
    assert np.allclose(b["prefix_critic_valid"], [[1, 1, 0]])
    assert "step_rewards" not in ChunkSampler(arrays, ep, ["s"], H, G).get(np.array([0]))


def _agent(seed=0, **corft) -> CORFTAgent:
    torch.manual_seed(seed)
    offline = OfflineRLConfig(critic_hidden_dims=[32, 32], reward_norm="none", lr=3e-3)
    policy = PolicyConfig(horizon=H, hidden_dims=[32, 32], flow_steps=3)
    cfg = CORFTConfig(**corft)
    return build_agent("corft", policy, offline, SIM_OBS_SHAPES, D, fake_stats(), corft_cfg=cfg)


def test_prefix_heads_fit_a_toy_regression_and_ignore_the_suffix():
    critic = _agent().critic
    assert isinstance(critic, PrefixChunkCritic)
    obs = fake_obs(64, seed=0)
    a = torch.rand(64, H, D) * 2 - 1
    target = torch.cumsum(a[..., 0], dim=1)  # Q_k = sum of the first action channel over the prefix
    opt = torch.optim.Adam(critic.parameters(), lr=3e-3)
    for _ in range(150):
        loss = ((critic.prefix_q_from_features(critic.features(obs), a) - target) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.02
    with torch.no_grad():
        q = critic.prefix_q_from_features(critic.features(obs), a)
        a2 = a.clone()
        a2[:, 1:] = torch.rand(64, H - 1, D)  # change everything after step 0
        q2 = critic.prefix_q_from_features(critic.features(obs), a2)
        assert torch.equal(q[..., 0], q2[..., 0])  # Q_1 cannot see the suffix
        assert torch.allclose(critic(obs, a), q[..., -1])  # forward = full-chunk Q_h


def _batch(b=16, seed=0) -> dict:
    g = torch.Generator().manual_seed(seed)
    valid = torch.ones(b, H)
    return {
        "observations": fake_obs(b, seed=seed),
        "next_observations": fake_obs(b, seed=seed + 1),
        "prefix_observations": {k: v.reshape(b, H, *v.shape[1:]) for k, v in fake_obs(b * H, seed=2).items()},
        "actions": -2.0 + 5.0 * torch.rand(b, H, D, generator=g),
        "rewards": torch.zeros(b),
        "step_rewards": torch.rand(b, H, generator=g),
        "step_dones": torch.zeros(b, H),
        "masks": torch.ones(b),
        "valid": valid,
        "critic_valid": torch.ones(b),
        "prefix_critic_valid": torch.ones(b, H),
        "mc_returns": 5.0 * torch.rand(b, generator=g),
        "mc_discounts": torch.full((b,), 3.0),
    }


def test_cal_ql_term_is_its_formula_and_off_at_alpha_zero():
    qp, qd, v = torch.tensor([[1.0, 5.0]]), torch.tensor([[2.0, 2.0]]), torch.tensor([3.0, 4.0])
    assert torch.isclose(cal_ql_term(qp, qd, v), torch.tensor((3 + 5) / 2 - 2.0))
    batch = _batch()
    off = _agent(cal_ql_alpha=0.0)
    actions = off.policy.normalize_actions(batch["actions"])
    out = off.critic_losses(batch, batch["observations"], actions)
    assert "cal_ql" not in out and torch.equal(out["critic_loss"], out["td_loss"])
    on = _agent(cal_ql_alpha=2.0)
    torch.manual_seed(5)
    out = on.critic_losses(batch, batch["observations"], actions)
    torch.manual_seed(5)
    _ = on.prefix_targets(batch)  # same noise draws as inside critic_losses
    with torch.no_grad():
        pi = on._pi(batch["observations"], 16)
        feat = on.critic.features(batch["observations"])
        want = cal_ql_term(on.critic.q_from_features(feat, pi), out["q"][..., -1], batch["mc_returns"])
    assert torch.isclose(out["cal_ql"], want)
    assert torch.isclose(out["critic_loss"], out["td_loss"] + 2.0 * want)
    del batch["mc_returns"]
    with pytest.raises(ValueError, match="mc_returns"):
        on.critic_losses(batch, batch["observations"], actions)


def _actor_step(agent, batch, term: str) -> tuple[float, float]:
    """One SGD step of the one-step policy on one actor term; returns the change in the critic's Q of the
    policy's chunk and in its squared distance to the data chunk, both measured outside the loss."""
    obs, valid = batch["observations"], batch["valid"]
    actions = agent.policy.normalize_actions(batch["actions"])
    opt = torch.optim.SGD(agent.one_step.parameters(), lr=1e-2)
    z = torch.randn(actions.shape, generator=torch.Generator().manual_seed(1))

    @torch.no_grad()
    def measure():
        mu = agent.one_step(obs, z)
        return float(agent.critic(obs, agent.policy.clip_normalized(mu)).mean()), float(
            ((mu - actions) ** 2).mean()
        )

    before = measure()
    torch.manual_seed(1)  # actor_losses draws the same z
    loss = agent.actor_losses(obs, actions, valid)[term]
    opt.zero_grad()
    loss.backward()
    opt.step()
    after = measure()
    return after[0] - before[0], after[1] - before[1]


def test_actor_q_term_raises_q_and_bc_term_pulls_towards_the_data():
    agent, batch = _agent(), _batch()
    assert _actor_step(agent, batch, "q_loss")[0] > 0  # the Q term raises Q(s, pi(s))
    assert _actor_step(agent, batch, "bc_l2")[1] < 0  # the BC term moves pi(s) towards A_D
    metrics = agent.update(batch)
    assert all(np.isfinite(v) for v in metrics.values()) and "cal_ql" not in metrics
    with pytest.raises(ValueError, match="prefix_observations"):
        agent.update({k: v for k, v in batch.items() if k != "prefix_observations"})


def test_bad_lambda_and_unknown_key_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="corft.lambda_bc"):
        _agent(lambda_bc=-1.0)
    with pytest.raises(ConfigError, match="corft.lambda_bc"):
        load_config(None, [f"--run_dir={tmp_path}", "--corft.lambda_bc=-0.5"])
    with pytest.raises(ConfigError, match="lambda_cb"):
        load_config(None, [f"--run_dir={tmp_path}", "--corft.lambda_cb=1"])
    cfg = load_config(None, [f"--run_dir={tmp_path}", "--offline.method=corft", "--corft.cal_ql_alpha=0.5"])
    assert cfg.offline.method == "corft" and cfg.corft == replace(CORFTConfig(), cal_ql_alpha=0.5)


def test_cli_train_then_eval_corft_on_a_tiny_run(tiny_offline_run, tmp_path):
    from online_setup import copy_run, overrides

    from robot_rl.cli.main import main

    run = copy_run(tiny_offline_run, tmp_path / "run")
    shutil.rmtree(run / "checkpoints" / "offline_seed0")  # keep BC seed 0: the warm start
    args = overrides(run, "--offline.method=corft", "--corft.cal_ql_alpha=0.1")
    assert main(["train", "--algo", "offline", *args]) == 0
    assert main(["eval", "--algo", "offline", *args]) == 0
    result = json.loads((run / "eval" / "offline_seed0.json").read_text())
    assert len(result["episodes"]) == 2
    saved = json.loads((run / "checkpoints" / "offline_seed0" / "config.json").read_text())
    assert saved["method"] == "corft" and saved["corft"]["cal_ql_alpha"] == 0.1
    log = (run / "logs" / "offline_seed0.csv").read_text()
    assert "cal_ql" in log.splitlines()[0] and "q1_mean" in log.splitlines()[0]


def test_corft_updates_and_acts_on_the_vla_policy(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from tiny_vlm import IMAGE, build_tiny_vlm

    from robot_rl.config import VLAConfig
    from robot_rl.policies.vla import VLAPolicy
    from robot_rl.policies.vla.trunk import VLATrunkFeatures
    from robot_rl_testing.fakes import fake_batch

    shapes = {keys.STATE: (5,), "observation.images.front": (IMAGE, IMAGE, 3)}
    vla = VLAConfig(vlm=str(build_tiny_vlm(tmp_path)), expert_width=32, expert_layers=1, instruction="pick")
    policy = PolicyConfig(kind="vla", horizon=H, flow_steps=2, vla=vla)
    offline = OfflineRLConfig(critic_hidden_dims=[32, 32], reward_range=[0.0, 1.0])
    torch.manual_seed(0)
    agent = build_agent("corft", policy, offline, shapes, D, fake_stats(shapes, D), corft_cfg=CORFTConfig())
    assert isinstance(agent.policy, VLAPolicy)
    # the critic's and the one-step policy's features are the VLA's own trunk, not a second copy of it
    for net in (agent.critic, agent.target_critic, agent.one_step):
        assert isinstance(net.encoder, VLATrunkFeatures) and net.encoder._policy[0] is agent.policy
        assert not any(k.startswith("encoder.") for k in net.state_dict())
    batch = fake_batch(2, H, shapes, D, seed=0)
    pre = fake_batch(2 * H, H, shapes, D, seed=2)["observations"]
    batch.update(
        prefix_observations={k: v.reshape(2, H, *v.shape[1:]) for k, v in pre.items()},
        step_rewards=torch.rand(2, H),
        step_dones=torch.zeros(2, H),
        prefix_critic_valid=torch.ones(2, H),
    )
    before = agent.policy.expert.action_out.weight.detach().clone()
    head = agent.critic.net[0].weight.detach().clone()
    metrics = agent.update(batch)
    assert all(np.isfinite(v) for v in metrics.values())
    assert not torch.equal(before, agent.policy.expert.action_out.weight)  # the VLA's expert trains (BC)
    assert not torch.equal(head, agent.critic.net[0].weight)  # and the critic head on its trunk
    chunk = agent.act(fake_batch(2, H, shapes, D, seed=1)["observations"])
    assert chunk.shape == (2, H, D) and torch.isfinite(chunk).all()
