"""QC best-of-N agent (docs/algorithms.md §3(a)) and flow BC agent."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from robot_rl.algos import FlowBC, QCAgent, batch_to_torch, best_of_n
from robot_rl.algos.critic import EnsembleLayerNorm
from robot_rl.algos.precision import learner_autocast, native_bfloat16, resolve_learner_dtype
from robot_rl.algos.qc import best_of_n_target
from robot_rl.config import BCConfig, OfflineRLConfig, PolicyConfig
from robot_rl.keys import STATE
from robot_rl.policies import build_agent, build_agent_from_config, build_policy
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch, fake_obs, fake_stats

H, D = 5, SIM_ACTION_DIM
PCFG = PolicyConfig(horizon=H, hidden_dims=[32, 32])
OCFG = OfflineRLConfig(critic_hidden_dims=[32, 32], best_of_n=8, batch_size=16, reward_norm="none")


class TargetCritic(nn.Module):
    """Q(s, A) = -||A - target||^2 per member: a critic whose argmax we know."""

    num_critics = 2
    agg = "mean"

    def __init__(self, target: torch.Tensor):
        super().__init__()
        self.target = target

    def features(self, obs):
        return torch.zeros(obs[STATE].shape[0], 1)

    def q_from_features(self, feat, actions):
        q = -((actions.reshape(actions.shape[0], -1) - self.target.reshape(1, -1)) ** 2).sum(-1)
        return torch.stack([q, q + 1.0])

    def forward(self, obs, actions):
        return self.q_from_features(self.features(obs), actions)

    def q_agg(self, qs, mode=None):
        return qs.mean(0)


def test_best_of_n_picks_argmax():
    torch.manual_seed(0)
    policy = build_policy(PCFG, SIM_OBS_SHAPES, D, fake_stats())
    critic = TargetCritic(torch.full((H, D), 0.3))
    obs = fake_obs(3, seed=0)
    noise = torch.randn(3, 16, H, D)
    chosen, q = best_of_n(policy, critic, obs, 16, noise)
    samples = policy.sample(obs, 16, noise)  # (3, 16, H, D)
    dist = ((samples - 0.3) ** 2).sum((-1, -2))
    idx = dist.argmin(1)
    torch.testing.assert_close(chosen, samples[torch.arange(3), idx])
    torch.testing.assert_close(q, -dist.min(1).values + 0.5)


def test_target_chunk_is_picked_by_the_online_critic_and_scored_by_the_target():
    """QC (acfql.py): A' = argmax_i Q_phi(s', A_i), y uses Qbar(s', A'). Picking with Qbar overestimates."""
    torch.manual_seed(0)
    policy = build_policy(PCFG, SIM_OBS_SHAPES, D, fake_stats())
    online, target = TargetCritic(torch.full((H, D), 0.5)), TargetCritic(torch.full((H, D), -0.5))
    obs = fake_obs(4, seed=2)
    noise = torch.randn(4, 16, H, D)
    value = best_of_n_target(policy, online, target, obs, 16, noise)
    picked, _ = best_of_n(policy, online, obs, 16, noise)
    torch.testing.assert_close(value, target.q_agg(target.q_from_features(None, picked)))
    samples = policy.sample(obs, 16, noise)
    q_target = -((samples - (-0.5)) ** 2).sum((-1, -2)) + 0.5  # Qbar of every candidate
    q_online = -((samples - 0.5) ** 2).sum((-1, -2))
    expected = q_target[torch.arange(4), q_online.argmax(1)]
    torch.testing.assert_close(value, expected)
    assert (value < q_target.max(1).values).any()  # the max over Qbar (the old target) is larger


@pytest.mark.parametrize(
    ("dtype", "flow_steps", "target_n"),
    [("float32", 0, 0), ("bfloat16", 0, 0), ("float32", 3, 0), ("float32", 0, 3)],
)
def test_qc_update_target_uses_online_selection(dtype, flow_steps, target_n):
    """The update's target is the online critic's pick scored by the target critic, in the learner's dtype
    (its products under the same autocast), from ``target_flow_steps``-step samples and among
    ``target_best_of_n`` of them (0: ``best_of_n``)."""
    cfg = replace(OCFG, learner_dtype=dtype, target_flow_steps=flow_steps, target_best_of_n=target_n)
    n = target_n or OCFG.best_of_n
    torch.manual_seed(0)
    agent = build_agent("qc", PCFG, cfg, SIM_OBS_SHAPES, D, fake_stats())
    with torch.no_grad():  # make the target critic disagree with the online critic
        for p in agent.target_critic.parameters():
            p.add_(0.5 * torch.randn_like(p))
    batch = fake_batch(16, H, seed=0)
    torch.manual_seed(1)
    noise = torch.randn(16, n, H * D)
    with learner_autocast(resolve_learner_dtype(dtype, "cpu"), "cpu"):
        next_q = best_of_n_target(
            agent.policy, agent.critic, agent.target_critic, batch["next_observations"], n, noise, flow_steps
        )
    expected = batch["rewards"] + OCFG.gamma**H * batch["masks"] * next_q
    torch.manual_seed(1)
    metrics = agent.update(batch)
    assert metrics["target_mean"] == pytest.approx(float(expected.mean()), rel=1e-5, abs=1e-6)


def test_target_flow_steps_sets_the_euler_steps_of_the_target_samples():
    """best_of_n's ``flow_steps`` samples with that many Euler steps (the policy's own K when 0) and picks
    among those samples; 3 and 10 steps give different chunks."""
    torch.manual_seed(0)
    policy = build_policy(PCFG, SIM_OBS_SHAPES, D, fake_stats())
    critic = TargetCritic(torch.full((H, D), 0.3))
    obs = fake_obs(3, seed=0)
    noise = torch.randn(3, 8, H, D)
    feat = policy.encode(obs).repeat_interleave(8, 0)
    for steps in (3, 0):
        samples = policy.sample_from_features(feat, noise.reshape(24, -1), steps).reshape(3, 8, H, D)
        chosen, _ = best_of_n(policy, critic, obs, 8, noise, flow_steps=steps)
        idx = ((samples - 0.3) ** 2).sum((-1, -2)).argmin(1)
        torch.testing.assert_close(chosen, samples[torch.arange(3), idx])
    three = policy.sample_from_features(feat, noise.reshape(24, -1), 3)
    torch.testing.assert_close(
        policy.sample_from_features(feat, noise.reshape(24, -1)), samples.reshape(24, -1)
    )
    assert (three - samples.reshape(24, -1)).abs().max() > 1e-3


def test_bfloat16_learner_keeps_float32_state_and_learns():
    """learner_dtype=bfloat16: parameters and Adam state stay float32, Q comes out float32 and within
    bfloat16 rounding of the float32 critic's, and the critic still fits a fixed batch."""
    torch.manual_seed(0)
    agent = build_agent("qc", PCFG, replace(OCFG, learner_dtype="bfloat16"), SIM_OBS_SHAPES, D, fake_stats())
    batch = fake_batch(16, H, seed=0)
    actions = agent.policy.normalize_actions(batch["actions"])
    q32 = agent.critic(batch["observations"], actions)
    with learner_autocast(torch.bfloat16, "cpu"):
        q16 = agent.critic(batch["observations"], actions)
    assert q16.dtype == torch.float32
    torch.testing.assert_close(q16, q32, rtol=0.05, atol=0.05)
    assert not torch.equal(q16, q32)  # the hidden layers did run in bfloat16
    losses = [agent.update(batch)["critic_loss"] for _ in range(30)]
    assert np.isfinite(losses).all() and losses[-1] < 0.5 * losses[0]
    for module in agent.modules().values():
        assert all(p.dtype == torch.float32 for p in module.parameters())
    for opt in agent.optimizers.values():
        assert all(v.dtype == torch.float32 for st in opt.state.values() for v in st.values() if v.dim())


def test_learner_dtype_resolution():
    assert resolve_learner_dtype("float32", "cpu") == torch.float32
    assert resolve_learner_dtype("bfloat16", "cpu") == torch.bfloat16
    auto = torch.bfloat16 if native_bfloat16("cpu") else torch.float32
    assert resolve_learner_dtype("auto", "cpu") == auto
    with pytest.raises(ValueError, match="offline.learner_dtype='half'"):
        build_agent("qc", PCFG, replace(OCFG, learner_dtype="half"), SIM_OBS_SHAPES, D, fake_stats())


def test_ensemble_layer_norm_affine():
    """The fused affine equals LayerNorm(x) * weight + bias per member."""
    torch.manual_seed(0)
    ln = EnsembleLayerNorm(3, 8)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = torch.randn(3, 5, 8)
    expected = torch.nn.functional.layer_norm(x, (8,)) * ln.weight + ln.bias
    torch.testing.assert_close(ln(x), expected)


def test_qc_update_and_act():
    torch.manual_seed(0)
    agent = build_agent("qc", PCFG, OCFG, SIM_OBS_SHAPES, D, fake_stats())
    assert isinstance(agent, QCAgent)
    batch = fake_batch(16, H, seed=0)
    metrics = [agent.update(batch) for _ in range(20)]
    for m in metrics:
        assert set(m) >= {"critic_loss", "bc_loss", "q_mean"} and all(np.isfinite(list(m.values())))
    assert metrics[-1]["critic_loss"] < metrics[0]["critic_loss"]
    # the target moved towards the online critic by Polyak
    a = agent.act(batch["observations"])
    assert a.shape == (16, H, D) and torch.isfinite(a).all()
    assert set(agent.modules()) == {"policy", "critic", "target_critic"}


def test_qc_act_uses_best_of_n_in_robot_units():
    torch.manual_seed(0)
    agent = build_agent("qc", PCFG, OCFG, SIM_OBS_SHAPES, D, fake_stats())
    obs = fake_obs(2, seed=1)
    noise = torch.randn(2, OCFG.best_of_n, H, D)
    chunks, _ = best_of_n(agent.policy, agent.critic, obs, OCFG.best_of_n, noise)
    torch.testing.assert_close(agent.act(obs, noise), agent.policy.unnormalize_actions(chunks))


def test_flow_bc_agent_and_batch_to_torch():
    torch.manual_seed(0)
    agent = build_agent("bc", PCFG, BCConfig(lr=1e-3), SIM_OBS_SHAPES, D, fake_stats())
    assert isinstance(agent, FlowBC)
    tb = fake_batch(32, H, seed=0)
    np_batch = {
        k: ({kk: vv.numpy().astype(np.float64) for kk, vv in v.items()} if isinstance(v, dict) else v.numpy())
        for k, v in tb.items()
    }
    np_batch["valid"] = np_batch["valid"].astype(bool)
    np_batch["source"] = np.array(["demo"] * 32)
    batch = batch_to_torch(np_batch, "cpu")
    assert batch["valid"].dtype == torch.float32 and batch["observations"][STATE].dtype == torch.float32
    assert batch["source"] is np_batch["source"]
    losses = [agent.update(batch)["bc_loss"] for _ in range(60)]
    assert np.mean(losses[-10:]) < np.mean(losses[:10])
    a = agent.act(batch["observations"])
    assert a.shape == (32, H, D)
    with pytest.raises(KeyError, match="valid"):
        batch_to_torch({k: v for k, v in np_batch.items() if k != "valid"})


def test_build_agent_from_pipeline_config():
    from robot_rl.config import PipelineConfig

    cfg = PipelineConfig(policy=PCFG, offline=OCFG)
    agent = build_agent_from_config("qc", cfg, SIM_OBS_SHAPES, D, fake_stats(), device="cpu")
    assert isinstance(agent, QCAgent) and agent.cfg.best_of_n == 8
    assert isinstance(build_agent_from_config("bc", cfg, SIM_OBS_SHAPES, D, fake_stats()), FlowBC)


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown method"):
        build_agent("no_such_method", PCFG, OCFG, SIM_OBS_SHAPES, D, fake_stats())


def test_nan_in_padded_steps_is_ignored_but_not_in_valid_steps():
    torch.manual_seed(0)
    agent = build_agent("qc", PCFG, OCFG, SIM_OBS_SHAPES, D, fake_stats())
    batch = fake_batch(8, H, seed=0)
    batch["actions"][0, -1] = float("nan")  # sample 0 has valid[0, -1] == 0 (fake_batch pads every 4th)
    assert batch["valid"][0, -1] == 0
    assert all(np.isfinite(list(agent.update(batch).values())))
    batch["actions"][1, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        agent.update(batch)
    batch = fake_batch(8, H, seed=0)
    batch["next_observations"][STATE][2, 0] = float("inf")
    with pytest.raises(ValueError, match=r"observation\.state"):
        agent.update(batch)


@pytest.mark.parametrize("reuse", [1, 3])
def test_target_reuse_keeps_a_batchs_pick_for_k_updates(reuse):
    """offline.target_reuse = k: the first update on a batch samples the target's N chunks and picks A';
    the next k - 1 updates on the same next observations keep that pick, then a new one is drawn; another
    batch always gets its own pick, even right after (k = 1: a pick every update, QC's rule)."""
    agent = build_agent("qc", PCFG, replace(OCFG, target_reuse=reuse), SIM_OBS_SHAPES, D, fake_stats())
    assert agent.batch_reuse == reuse
    picks, sample = [], agent.policy.sample_from_features
    agent.policy.sample_from_features = lambda *args: picks.append(1) or sample(*args)
    first, other = fake_batch(16, H, seed=0), fake_batch(16, H, seed=1)
    counts = []
    for batch in (first, first, first, first, other, fake_batch(16, H, seed=1), first):
        agent.update(batch)
        counts.append(len(picks))
    assert counts == ([1, 1, 1, 2, 3, 3, 4] if reuse == 3 else [1, 2, 3, 4, 5, 6, 7])
    with pytest.raises(ValueError, match="offline.target_reuse=0"):
        build_agent("qc", PCFG, replace(OCFG, target_reuse=0), SIM_OBS_SHAPES, D, fake_stats())


def test_same_obs_compares_tensors_and_the_instructions_strings():
    """A batch's observations may carry an instruction's strings beside its tensors (batch_to_torch passes
    them through); the target's pick is kept only when both are equal."""
    from robot_rl.algos.qc import same_obs

    obs = {STATE: torch.arange(6.0).reshape(2, 3), "task": np.array(["pick the cube", "open the drawer"])}
    copy = {STATE: obs[STATE].clone(), "task": obs["task"].copy()}
    assert same_obs(obs, copy)
    assert not same_obs(obs, {**copy, "task": np.array(["pick the cube", "push the cube"])})
    assert not same_obs(obs, {**copy, STATE: obs[STATE] + 1})
    assert not same_obs(obs, {**copy, STATE: obs[STATE].numpy()})
    assert not same_obs(obs, {STATE: obs[STATE]})
