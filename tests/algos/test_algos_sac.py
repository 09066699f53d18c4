"""SAC agent, the HIL-SERL recipe on single-step actions (docs/algorithms.md §5)."""

import math

import numpy as np
import pytest
import torch

from robot_rl.algos import SACAgent
from robot_rl.config import PipelineConfig, PolicyConfig, SACConfig, config_to_dict
from robot_rl.data.normalize import compute_stats
from robot_rl.keys import ACTION, STATE
from robot_rl.policies import METHODS, build_agent, build_agent_from_config, load_agent, save_agent
from robot_rl.policies.gaussian import GaussianTanhPolicy
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch, fake_obs, fake_stats

D = SIM_ACTION_DIM
PCFG = PolicyConfig(horizon=1, hidden_dims=[32, 32])


def _cfg(**kw):
    base = dict(critic_hidden_dims=[32, 32], actor_hidden_dims=[32, 32], lr=1e-3)
    base.update(kw)
    return SACConfig(**base)


def _agent(stats=None, obs_shapes=SIM_OBS_SHAPES, action_dim=D, **kw):
    torch.manual_seed(0)
    stats = stats or fake_stats()
    agent = build_agent("sac", PCFG, _cfg(**kw), obs_shapes, action_dim, stats)
    assert isinstance(agent, SACAgent)
    return agent


def _batches(agent, b, seed):
    """``agent.batches_per_update`` independent fake batches of ``b`` samples."""
    return [fake_batch(b, 1, seed=1000 * seed + i) for i in range(agent.batches_per_update)]


def _box(agent):
    """The action box in robot units (here the fake data's min/max: no box configured)."""
    lo = agent.policy.unnormalize_actions(agent.policy.action_low_norm)
    hi = agent.policy.unnormalize_actions(agent.policy.action_high_norm)
    return lo, hi


def test_act_shapes_dtype_and_box():
    agent = _agent()
    assert "sac" in METHODS
    assert agent.policy.horizon == 1 and agent.policy.action_dim == D
    assert set(agent.modules()) == {"policy", "critic", "target_critic", "temperature"}
    assert set(agent.optimizers) == {"actor", "critic", "temperature"}
    obs = fake_obs(5, seed=1)
    lo, hi = _box(agent)
    for noise in (None, 100.0 * torch.randn(5, 1, D), -100.0 * torch.ones(5, 1, D)):
        a = agent.act(obs, noise)
        assert a.shape == (5, 1, D) and a.dtype == torch.float32
        assert (a >= lo - 1e-5).all() and (a <= hi + 1e-5).all()
    z = torch.randn(5, 1, D)
    torch.testing.assert_close(agent.act(obs, z), agent.act(obs, z))  # noise fixes the sample
    agent.deterministic = True
    a_det = agent.act(obs)
    torch.testing.assert_close(a_det, agent.act(obs, z))  # noise ignored when deterministic
    mean, _ = agent.policy.dist_params(agent.policy.encode(obs))
    squashed = agent.policy.squash_center + agent.policy.squash_half * torch.tanh(mean)
    torch.testing.assert_close(a_det, agent.policy.unnormalize_actions(squashed).unsqueeze(1))
    # the squashed Gaussian spans the box exactly: the data's min/max, beyond its q01/q99 = [-1, 1]
    agent.deterministic = False
    torch.testing.assert_close(agent.act(obs, 100.0 * torch.ones(5, 1, D)), hi.expand(5, 1, D))
    assert (agent.policy.action_high_norm > 1).all() and (agent.policy.action_low_norm < -1).all()


def test_log_prob_matches_torch_tanh_normal():
    agent = _agent()
    obs = fake_obs(6, seed=3)
    eps = torch.randn(6, 1, D)
    with torch.no_grad():
        a, log_prob = agent.policy(obs, eps)
        mean, log_std = agent.policy.dist_params(agent.policy.encode(obs))
    u = mean + log_std.exp() * eps[:, 0]
    expected = torch.distributions.Normal(mean, log_std.exp()).log_prob(u).sum(-1)
    expected = expected - torch.log1p(-(torch.tanh(u) ** 2)).sum(-1)
    expected = expected - torch.log(agent.policy.squash_half).sum()  # rescaled from [-1, 1] to the box
    torch.testing.assert_close(log_prob, expected, rtol=1e-4, atol=1e-4)
    center, half = agent.policy.squash_center, agent.policy.squash_half
    torch.testing.assert_close(a[:, 0], center + half * torch.tanh(u))


def test_update_finite_metrics_and_changes_every_module():
    agent = _agent()
    before = {n: {k: v.clone() for k, v in m.state_dict().items()} for n, m in agent.modules().items()}
    m = agent.update(*_batches(agent, 32, 0))
    expected = {"critic_loss", "critic_only_loss", "actor_loss", "temperature_loss", "temperature"}
    assert expected | {"entropy", "q_mean", "target_mean"} == set(m)
    assert all(isinstance(v, float) and math.isfinite(v) for v in m.values()), m
    for name, module in agent.modules().items():
        after = module.state_dict()
        changed = any(not torch.equal(before[name][k], after[k]) for k in after)
        assert changed, f"{name} did not change"
    assert m["temperature"] != pytest.approx(0.01, abs=0.0)


def test_temperature_moves_toward_target_entropy():
    # default target -d/2 = -2 is below the initial entropy: alpha shrinks
    agent = _agent()
    assert agent.target_entropy == -D / 2
    ms = [agent.update(*_batches(agent, 32, i)) for i in range(30)]
    assert ms[0]["entropy"] > agent.target_entropy
    assert ms[-1]["temperature"] < 0.01
    # a target above the largest entropy a tanh-Gaussian on [-1, 1]^d can reach (d log 2): alpha grows
    agent = _agent(target_entropy=10.0)
    assert agent.target_entropy == 10.0
    ms = [agent.update(*_batches(agent, 32, i)) for i in range(30)]
    assert ms[-1]["temperature"] > 0.01


def test_critic_loss_decreases_on_fixed_batch():
    agent = _agent(critic_only_updates=0)
    batch = fake_batch(32, 1, seed=0)
    losses = [agent.update(batch)["critic_loss"] for _ in range(150)]
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10]), (np.mean(losses[:10]), np.mean(losses[-10:]))


def _toy_batch(b, gen):
    a = torch.rand(b, 1, 1, generator=gen) * 2 - 1
    return {
        "observations": {STATE: torch.randn(b, 1, generator=gen)},
        "next_observations": {STATE: torch.randn(b, 1, generator=gen)},
        "actions": a,
        "rewards": -((a[:, 0, 0] - 0.5) ** 2),
        "masks": torch.zeros(b),
        "valid": torch.ones(b, 1),
        "critic_valid": torch.ones(b),
    }


def test_deterministic_action_moves_to_optimum_on_1d_toy():
    rng = np.random.default_rng(0)
    stats = compute_stats(
        {STATE: rng.standard_normal((512, 1)).astype(np.float32), ACTION: rng.uniform(-1, 1, (512, 1))}
    )
    agent = _agent(stats, {STATE: (1,)}, 1, lr=3e-3)
    agent.deterministic = True
    obs = {STATE: torch.linspace(-2, 2, 16).unsqueeze(1)}
    start = (agent.act(obs) - 0.5).abs().mean().item()
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        agent.update(_toy_batch(128, gen), _toy_batch(128, gen))
    err = (agent.act(obs) - 0.5).abs()
    assert err.mean().item() < 0.1 and err.mean().item() < 0.5 * start, (start, err.flatten())


def test_save_load_round_trip_identical_deterministic_actions(tmp_path):
    torch.manual_seed(0)
    cfg = PipelineConfig(policy=PCFG, sac=_cfg(num_critics=3, critic_agg="min_random2"))
    stats = fake_stats()
    agent = build_agent_from_config("sac", cfg, SIM_OBS_SHAPES, D, stats)
    assert agent.critic.num_critics == 3  # cfg.sac is used
    for i in range(3):
        agent.update(*_batches(agent, 16, i))
    save_agent(
        tmp_path / "ckpt", agent, config_to_dict(cfg), stats, SIM_OBS_SHAPES, D, include_optimizer=True
    )
    loaded, header = load_agent(tmp_path / "ckpt", load_optimizer=True)
    assert isinstance(loaded, SACAgent) and header.method == "sac"
    assert loaded.critic.num_critics == 3 and loaded.cfg == cfg.sac
    torch.testing.assert_close(loaded.temperature.log_alpha, agent.temperature.log_alpha)
    obs = fake_obs(7, seed=5)
    agent.deterministic = loaded.deterministic = True
    torch.testing.assert_close(loaded.act(obs), agent.act(obs), rtol=0, atol=0)
    z = torch.randn(7, 1, D)
    agent.deterministic = loaded.deterministic = False
    torch.testing.assert_close(loaded.act(obs, z), agent.act(obs, z), rtol=0, atol=0)
    assert math.isfinite(loaded.update(*_batches(loaded, 16, 9))["critic_loss"])


def test_nan_actions_in_valid_steps_raise_padded_ones_do_not():
    agent = _agent()
    critic_only, full = _batches(agent, 16, 0)
    for batch in (critic_only, full):
        batch["actions"][0, 0, 1] = float("nan")  # row 0 is padded (valid 0) in fake_batch
        assert batch["valid"][0, 0] == 0
    assert all(math.isfinite(v) for v in agent.update(critic_only, full).values())
    for batch in (critic_only, full):  # a valid row in the critic-only batch, then in the full-step one
        batch["actions"][1, 0, 0] = float("nan")
        with pytest.raises(ValueError, match="NaN"):
            agent.update(critic_only, full)
        batch["actions"][1, 0, 0] = 0.0


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="policy.horizon"):
        build_agent("sac", PolicyConfig(horizon=5), _cfg(), SIM_OBS_SHAPES, D, fake_stats())
    agent = _agent()
    with pytest.raises(ValueError, match=r"\(B, 1, 4\)"):
        agent.update(fake_batch(8, 5, seed=0), fake_batch(8, 5, seed=1))
    # one batch split in two is not what HIL-SERL does: each critic step needs its own batch
    with pytest.raises(ValueError, match=r"critic_only_updates \+ 1 = 2 independently drawn batches"):
        agent.update(fake_batch(32, 1, seed=0))


def test_each_critic_step_gets_its_own_full_batch():
    """Issue 14.7: with critic_only_updates=2 one update consumes 3 full batches; the critic-only steps see
    the first two whole (their losses equal a fresh agent's first critic losses on them) and the full
    step sees the last."""
    assert _agent().batches_per_update == 2  # HIL-SERL default: one extra critic-only update
    agent = _agent(critic_only_updates=2)
    assert agent.batches_per_update == 3
    batches = [fake_batch(32, 1, seed=10 * i) for i in range(3)]
    torch.manual_seed(1)
    m = agent.update(*batches)
    # replay the three critic steps on an agent of the same init: each step's loss is computed on its
    # whole batch before the step (a split of one batch would give other losses)
    reference = _agent(critic_only_updates=0)
    torch.manual_seed(1)
    losses = [reference._critic_step(batch)[0].item() for batch in batches]
    assert m["critic_only_loss"] == pytest.approx((losses[0] + losses[1]) / 2, rel=1e-5)
    assert m["critic_loss"] == pytest.approx(losses[2], rel=1e-5)


def test_backup_entropy_false_drops_exactly_alpha_log_pi_from_the_target():
    """Issue 14.7: HIL-SERL's configs use backup_entropy false, the default; true subtracts
    gamma * mask * alpha * log pi(a'|s') from every target."""
    assert SACConfig().backup_entropy is False
    alpha = 0.5
    batch = fake_batch(32, 1, seed=3)
    targets = {}
    for backup in (False, True):
        agent = _agent(critic_only_updates=0, backup_entropy=backup)
        assert agent.backup_entropy is backup
        with torch.no_grad():
            agent.temperature.log_alpha.fill_(math.log(alpha))
        torch.manual_seed(7)  # the same a' ~ pi(.|s') in both
        with torch.no_grad():
            _, next_log_prob = agent.policy(batch["next_observations"])
        torch.manual_seed(7)
        targets[backup] = agent._critic_step(batch)[2]
    expected = -agent.cfg.gamma * batch["masks"] * alpha * next_log_prob
    assert expected.abs().max() > 1e-3
    torch.testing.assert_close(targets[True] - targets[False], expected, rtol=1e-4, atol=1e-5)


def test_gaussian_policy_rejects_bad_stats():
    with pytest.raises(ValueError, match="action"):
        GaussianTanhPolicy(torch.nn.Identity(), D, [8], {})
