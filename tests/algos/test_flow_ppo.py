"""π_RL flow PPO (docs/algorithms.md §8): Flow-Noise / Flow-SDE chains, their log-probabilities, chunk GAE,
the
PPO surrogate, the batched-env loop and its bad inputs."""

import math

import numpy as np
import pytest
import torch
from torch.distributions import Normal

from robot_rl.algos.flow_chain import FlowChain, NoiseHead, sde_sigma, step_mean_std
from robot_rl.algos.flow_ppo import FlowPPOAgent, chunk_gae, clipped_surrogate
from robot_rl.config import (
    ConfigError,
    EnvConfig,
    PipelineConfig,
    PolicyConfig,
    PPOConfig,
    config_to_dict,
    load_config,
)
from robot_rl.keys import ENV_STATE, STATE
from robot_rl.policies import build_agent, build_policy, load_agent, save_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_obs, fake_stats

H, D, K = 3, SIM_ACTION_DIM, 4
PCFG = PolicyConfig(horizon=H, flow_steps=K, hidden_dims=[32, 32])


def _policy(seed=0):
    torch.manual_seed(seed)
    return build_policy(PCFG, SIM_OBS_SHAPES, D, fake_stats())


def _ppo_cfg(**kw):
    return PPOConfig(**{"value_hidden_dims": [32], "lr": 1e-3, **kw})


def test_flow_noise_log_prob_is_the_chain_density():
    """The recorded chain's log-probability equals log N(x_0; 0, I) plus each step's Gaussian density
    around the Euler (ODE) step, computed here independently with torch.distributions; mean divides by
    K + 1 (RLinf), sum does not."""
    policy = _policy()
    head = NoiseHead(policy.encoder.out_dim, H * D)
    obs = fake_obs(6, seed=1)
    with torch.no_grad():
        feat = policy.encode(obs)
        sample = FlowChain(policy, "flow_noise", head, reduce="sum").sample(feat)
        chain = sample.chain
        assert chain.shape == (6, K + 1, H * D) and (sample.step == -1).all()
        expected = Normal(0.0, 1.0).log_prob(chain[:, 0])
        for k in range(K):
            tau = torch.full((6, 1), k / K)
            x = chain[:, k]
            mean = x + policy.velocity_from_features(feat, x, tau) / K  # the ODE Euler step
            std = head(feat, x, tau)
            assert (std >= 0.08).all() and (std <= 0.16).all()
            expected = expected + Normal(mean, std).log_prob(chain[:, k + 1])
        torch.testing.assert_close(sample.log_prob, expected, rtol=1e-5, atol=1e-4)
        mean_chain = FlowChain(policy, "flow_noise", head, reduce="mean")
        log_prob, entropy = mean_chain.log_prob(feat, chain, sample.step)
        torch.testing.assert_close(log_prob, expected / (K + 1), rtol=1e-5, atol=1e-5)
        # entropy: mean over elements of the (K+1)-term average of Gaussian entropies
        ent = Normal(0.0, 1.0).entropy() + sum(
            Normal(0.0, head(feat, chain[:, k], torch.full((6, 1), k / K))).entropy() for k in range(K)
        )
        torch.testing.assert_close(entropy, (ent / (K + 1)).mean(-1), rtol=1e-5, atol=1e-5)


def _sde_reference(x, v_pi, t, delta, a=0.5):
    """§8 verbatim in openpi's time (t = 1 noise); at t = 1 the 1 - t denominator is delta (RLinf)."""
    sigma = a * math.sqrt(t / (1 - t if t < 1 else delta))
    x0_hat, x1_hat = x - t * v_pi, x + (1 - t) * v_pi
    mean = (1 - (t - delta)) * x0_hat + (t - delta - sigma**2 * delta / (2 * t)) * x1_hat
    return mean, sigma * math.sqrt(delta)


@pytest.mark.parametrize("k", [0, 3, 5, 9])
def test_flow_sde_mean_and_std_match_section_8(k):
    """Our step k at τ = k/K is openpi's t = 1 - k/K with v_pi = -v; K = 10, δ = 0.1."""
    torch.manual_seed(k)
    x, v = torch.randn(2, 6), torch.randn(2, 6)
    tau = torch.full((2, 1), k / 10)
    mean, std = step_mean_std("flow_sde", x, v, tau, 0.1, torch.ones(2, 1, dtype=torch.bool))
    ref_mean, ref_std = _sde_reference(x, -v, 1 - k / 10, 0.1)
    torch.testing.assert_close(mean, ref_mean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(std, torch.full_like(std, ref_std), rtol=1e-6, atol=1e-7)
    # a deterministic row follows the ODE: the Euler step x + δ·v with std 0
    mean0, std0 = step_mean_std("flow_sde", x, v, tau, 0.1, torch.zeros(2, 1, dtype=torch.bool))
    torch.testing.assert_close(mean0, x + 0.1 * v, rtol=1e-5, atol=1e-6)
    assert (std0 == 0).all()


def test_flow_sde_sigma_values():
    """Hand values: a = 0.5, δ = 0.1: t = 0.5 gives σ = 0.5; t = 1 uses 1 - t_1 = δ, σ = 0.5·√10."""
    t = torch.tensor([[0.5], [1.0], [0.1]])
    torch.testing.assert_close(
        sde_sigma(t, 0.1, 0.5), torch.tensor([[0.5], [0.5 * math.sqrt(10)], [0.5 / 3]]), rtol=1e-6, atol=0
    )


@pytest.mark.parametrize("method", ["flow_noise", "flow_sde"])
def test_deterministic_chain_is_the_ode_policy_chunk(method):
    policy = _policy()
    head = NoiseHead(policy.encoder.out_dim, H * D) if method == "flow_noise" else None
    obs = fake_obs(5, seed=2)
    noise = torch.randn(5, H * D)
    with torch.no_grad():
        feat = policy.encode(obs)
        sample = FlowChain(policy, method, head).sample(feat, noise, deterministic=True)
        ode = policy.sample_from_features(feat, noise)
    torch.testing.assert_close(policy.clip_normalized(sample.chain[:, -1]), ode, rtol=1e-5, atol=1e-5)
    assert (sample.log_prob == 0).all()


def test_flow_sde_log_prob_is_the_chosen_steps_gaussian():
    policy = _policy()
    chain_fn = FlowChain(policy, "flow_sde")
    with torch.no_grad():
        feat = policy.encode(fake_obs(8, seed=3))
        s = chain_fn.sample(feat)
        assert ((s.step >= 0) & (s.step < K)).all()
        rows = torch.arange(8)
        x, nxt = s.chain[rows, s.step], s.chain[rows, s.step + 1]
        tau = (s.step.float() / K).unsqueeze(-1)
        v = policy.velocity_from_features(feat, x, tau)
        ref = [_sde_reference(x[i], -v[i], 1 - float(tau[i]), 1 / K) for i in range(8)]
        expected = torch.stack([Normal(m, sd).log_prob(nxt[i]) for i, (m, sd) in enumerate(ref)])
    torch.testing.assert_close(s.log_prob, expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("method", ["flow_noise", "flow_sde"])
def test_first_epoch_ratio_is_one_and_clip_inactive(method):
    torch.manual_seed(0)
    agent = build_agent("ppo", PCFG, _ppo_cfg(method=method), SIM_OBS_SHAPES, D, fake_stats())
    obs = fake_obs(16, seed=4)
    out = agent.explore(obs)
    assert out["actions"].shape == (16, H, D)
    valid = torch.ones(16, H)
    valid[::3, -1] = 0
    adv = torch.randn(16)
    with torch.no_grad():
        log_prob, _ = agent.chain.log_prob(agent.policy.encode(obs), out["chain"], out["step"])
    terms = clipped_surrogate(log_prob, out["log_prob"], adv, valid, H, 0.2)
    torch.testing.assert_close(terms["ratio"], torch.ones_like(terms["ratio"]), rtol=0, atol=1e-5)
    torch.testing.assert_close(terms["loss"], terms["unclipped"])
    assert float(terms["clip_frac"]) == 0.0
    before = [p.detach().clone() for p in agent.policy.parameters()]
    batch = {**out, "observations": obs, "advantages": adv, "returns": torch.randn(16), "valid": valid}
    metrics = agent.update(batch)
    assert abs(metrics["ratio_mean"] - 1) < 1e-5 and metrics["clip_frac"] == 0.0
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.policy.parameters(), strict=True))


def test_clipped_surrogate_clips_large_ratios():
    """A ratio of e^1 with a positive advantage is clipped at 1 + ε; the mask drops invalid steps."""
    lp = torch.zeros(1, H * D)
    lp[0, :D] = 1.0  # first chunk step: ratio e
    valid = torch.tensor([[1.0, 1.0, 0.0]])
    terms = clipped_surrogate(lp, torch.zeros(1, H * D), torch.tensor([2.0]), valid, H, 0.2)
    expected = -(D * 1.2 * 2.0 + D * 1.0 * 2.0) / (2 * D)
    assert float(terms["loss"]) == pytest.approx(expected)
    assert float(terms["unclipped"]) == pytest.approx(-(D * math.e * 2.0 + D * 2.0) / (2 * D))
    assert float(terms["clip_frac"]) == pytest.approx(0.5)


def test_chunk_gae_hand_example():
    """2 envs, 3 chunks. Env 0 is truncated in chunk 1 (bootstrap V(final obs) = 0.5, no GAE across);
    env 1 terminates in chunk 0 (no bootstrap). γ = 0.9, λ = 0.5."""
    r = np.array([[1.0, 0.0], [2.0, 1.0], [0.0, 3.0]])
    v = np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])
    nv = np.array([[0.3, 9.0], [0.5, 0.6], [0.7, 0.8]])  # 9.0 must be ignored (terminated)
    term = np.array([[False, True], [False, False], [False, False]])
    done = np.array([[False, True], [True, False], [False, False]])
    g, lam = 0.9, 0.5
    # env 0
    d0 = [1.0 + g * 0.3 - 0.1, 2.0 + g * 0.5 - 0.3, 0.0 + g * 0.7 - 0.5]
    a0_2 = d0[2]
    a0_1 = d0[1]  # done: nothing from chunk 2
    a0_0 = d0[0] + g * lam * a0_1
    # env 1
    d1 = [0.0 - 0.2, 1.0 + g * 0.6 - 0.4, 3.0 + g * 0.8 - 0.6]
    a1_2 = d1[2]
    a1_1 = d1[1] + g * lam * a1_2
    a1_0 = d1[0]  # terminated: no bootstrap, nothing from chunk 1
    adv, ret = chunk_gae(r, v, nv, term, done, g, lam)
    expected = np.array([[a0_0, a1_0], [a0_1, a1_1], [a0_2, a1_2]], dtype=np.float32)
    np.testing.assert_allclose(adv, expected, rtol=1e-6)
    np.testing.assert_allclose(ret, expected + v, rtol=1e-6, atol=1e-6)


def test_bad_inputs_fail_clearly():
    r = np.zeros((2, 2))
    r[1, 0] = np.nan
    with pytest.raises(ValueError, match=r"rewards contain NaN or inf \(chunk 1, env 0\)"):
        chunk_gae(
            r, np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 2), bool), np.zeros((2, 2), bool), 0.9, 0.9
        )
    agent = build_agent("ppo", PCFG, _ppo_cfg(), SIM_OBS_SHAPES, D, fake_stats())
    obs = fake_obs(4, seed=5)
    out = agent.explore(obs)
    batch = {**out, "observations": obs, "returns": torch.zeros(4), "valid": torch.ones(4, H)}
    with pytest.raises(ValueError, match="advantages contain NaN"):
        agent.update({**batch, "advantages": torch.tensor([0.0, float("nan"), 0.0, 0.0])})
    with pytest.raises(ValueError, match="ppo.method='flow_ode'"):
        FlowPPOAgent(_policy(), _ppo_cfg(method="flow_ode"))
    with pytest.raises(ConfigError, match="ppo.method='flow_ode'"):
        load_config(overrides=["--ppo.method=flow_ode"])
    with pytest.raises(ConfigError, match="ppo.noise_std_min=0.2"):
        load_config(overrides=["--ppo.noise_std_min=0.2"])


def _bc_checkpoint(path, cfg):
    """A BC-format checkpoint of a fresh flow policy (weights need not be trained for these tests)."""
    torch.manual_seed(0)
    stats = fake_stats()
    bc = build_agent("bc", PCFG, PipelineConfig().bc, SIM_OBS_SHAPES, D, stats)
    config = {**config_to_dict(cfg), "obs_keys": [ENV_STATE, STATE]}
    save_agent(path, bc, config, stats, SIM_OBS_SHAPES, D)
    return bc


def test_short_ppo_run_on_pick_cube(tmp_path):
    """N = 4 mujoco_cpu envs, episodes of 8 steps (time-limit truncations inside chunks), from a saved
    BC-format checkpoint: the loop runs, the weights change, and the checkpoint reloads as a PPO agent."""
    pytest.importorskip("mujoco")
    from robot_rl.cli.ppo import rollout_envs
    from robot_rl.policies import factory
    from robot_rl.run_dir import RunDir
    from robot_rl.training.ppo import train_ppo

    cfg = PipelineConfig(
        run_dir=str(tmp_path / "run"),
        policy=PCFG,
        env=EnvConfig(backend="mujoco_cpu", max_episode_steps=8),
        ppo=_ppo_cfg(num_envs=4, rollout_chunks=3, epochs=2, minibatch=6, env_steps=60),
    )
    bc = _bc_checkpoint(tmp_path / "bc", cfg)
    rows = []
    result = train_ppo(
        cfg, 0, RunDir(cfg.run_dir), tmp_path / "bc", factory, rollout_envs, on_log=rows.append
    )
    assert result["env_steps"] >= 60 and result["episodes"] >= 4  # 8-step episodes ended
    assert all(math.isfinite(r["approx_kl"]) and 0 <= r["clip_frac"] <= 1 for r in rows)
    loaded, saved = load_agent(RunDir(cfg.run_dir).checkpoint("ppo_flow_noise", 0))
    assert isinstance(loaded, FlowPPOAgent) and saved.method == "ppo"
    assert set(loaded.modules()) == {"policy", "value", "noise_head"}
    changed = [
        not torch.equal(a, b)
        for a, b in zip(bc.policy.state_dict().values(), loaded.policy.state_dict().values(), strict=True)
    ]
    assert any(changed)
    assert loaded.act(fake_obs(2, seed=0)).shape == (2, H, D)
    assert (RunDir(cfg.run_dir).train_log("ppo_flow_noise", 0)).is_file()


def test_cli_ppo_then_eval(tmp_path, capsys):
    """``robot-rl ppo`` from a given checkpoint runs PPO (Flow-SDE) and evaluates the result on the split it
    names; a bad method is a config error naming the key."""
    pytest.importorskip("mujoco")
    from robot_rl.cli.main import main

    _bc_checkpoint(tmp_path / "bc", PipelineConfig(policy=PCFG))
    run_dir = tmp_path / "run"
    args = [
        "ppo",
        f"--run_dir={run_dir}",
        "--seed=0",
        "--threads=1",
        f"--ppo.init={tmp_path / 'bc'}",
        "--ppo.method=flow_sde",
        "--env.backend=mujoco_cpu",
        "--env.max_episode_steps=6",
        "--env.num_envs=1",
        "--ppo.num_envs=2",
        "--ppo.rollout_chunks=2",
        "--ppo.env_steps=12",
        "--eval.episodes_per_seed=2",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "eval ppo_flow_sde seed 0 (test split): success" in out
    assert (run_dir / "checkpoints" / "ppo_flow_sde_seed0" / "model.safetensors").is_file()
    # the rerun keeps the trained policy and evaluates it on the validation split, and says so (it printed
    # "test split" and the test file's path while it ran the validation seeds)
    assert main([*args, "--eval.split=validation"]) == 0
    out = capsys.readouterr().out
    validation = run_dir / "eval" / "ppo_flow_sde_seed0_validation.json"
    assert "eval ppo_flow_sde seed 0 (validation split): success" in out and f"results: {validation}" in out
    assert validation.is_file()
    assert main([*args, "--ppo.method=flow_ode"]) == 2
    assert "ppo.method='flow_ode'" in capsys.readouterr().err


def test_ppo_improves_a_chunk_bandit():
    """End-to-end sign check without a simulator: one-chunk episodes rewarded by
    ``-mean((A - 0.5)^2)`` in normalised units; a few PPO iterations move the deterministic (ODE) chunk
    towards the target (a flipped advantage or ratio would move it away)."""
    torch.manual_seed(0)
    agent = build_agent("ppo", PCFG, _ppo_cfg(lr=3e-3), SIM_OBS_SHAPES, D, fake_stats())
    obs = fake_obs(32, seed=0)
    noise = torch.randn(32, 1, H, D)

    def score(chunks):
        return float(-((chunks - 0.5) ** 2).mean())

    before = score(agent.policy.sample(obs, 1, noise))
    for _ in range(10):
        out = agent.explore(obs)
        end = agent.policy.clip_normalized(out["chain"][:, -1])
        r = -((end - 0.5) ** 2).mean(-1).numpy()[None]
        one = np.ones_like(r, dtype=bool)
        adv, ret = chunk_gae(r, out["value"].numpy()[None], np.zeros_like(r), one, one, 0.99, 0.95)
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        batch = {**out, "observations": obs, "valid": torch.ones(32, H)}
        batch.update(advantages=torch.as_tensor(adv[0]), returns=torch.as_tensor(ret[0]))
        for _ in range(8):
            agent.update(batch)
    after = score(agent.policy.sample(obs, 1, noise))
    assert after > before + 0.1, (before, after)
