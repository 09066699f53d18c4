"""RECAP (docs/algorithms.md §7): labels, distributional value, indicator conditioning, guidance, CLI
smoke."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from robot_rl.algos.recap import (
    POSITIVE,
    UNCONDITIONED,
    DistributionalValue,
    IndicatorConditioner,
    guided_velocity,
)
from robot_rl.algos.recap_labels import (
    advantages,
    indicators,
    normalised_returns,
    recap_rewards,
    value_bins,
)
from robot_rl.cli.main import main
from robot_rl.config import ConfigError, PolicyConfig, RecapConfig, load_config
from robot_rl.data.normalize import FeatureStats
from robot_rl.data.training.training_set import TrainingSet
from robot_rl.eval.inference import apply_inference
from robot_rl.policies.encoders import ObservationEncoder
from robot_rl.policies.factory import build_agent, load_agent

SHAPES = {"observation.state": (3,)}


def _stats(action_dim: int = 2) -> dict[str, FeatureStats]:
    rng = np.random.default_rng(0)
    return {
        "observation.state": FeatureStats.from_array(rng.normal(size=(50, 3))),
        "action": FeatureStats.from_array(rng.uniform(-1, 1, size=(50, action_dim))),
    }


def _agent(**recap):
    policy = PolicyConfig(horizon=2, hidden_dims=[16, 16])
    cfg = RecapConfig(value_hidden_dims=[16], **recap)
    return build_agent("recap", policy, cfg, SHAPES, 2, _stats())


def test_rewards_returns_and_bins_for_a_success_and_a_failure():
    # episode 0: 4 steps, success; episode 1: 3 steps, failure with c_fail = 5
    end = np.array([4, 4, 4, 4, 7, 7, 7])
    success = np.array([True] * 4 + [False] * 3)
    r = recap_rewards(end, success, c_fail=5.0)
    np.testing.assert_array_equal(r, [-1, -1, -1, 0, -1, -1, -5])
    g, r_norm = normalised_returns(r, end, np.zeros(7, dtype=int))
    # raw returns [-3, -2, -1, 0, -7, -6, -5]; the task's largest magnitude is 7
    np.testing.assert_allclose(g, np.array([-3, -2, -1, 0, -7, -6, -5]) / 7)
    np.testing.assert_allclose(r_norm, r / 7)
    assert g.min() == -1.0 and g.max() == 0.0
    np.testing.assert_array_equal(value_bins(g, 201), np.rint((g + 1) * 200).astype(int))
    assert value_bins(np.array([-1.0, 0.0, -0.5]), 201).tolist() == [0, 200, 100]


def test_returns_are_normalised_per_task():
    end = np.array([2, 2, 5, 5, 5])
    r = recap_rewards(end, np.array([True] * 5), c_fail=0.0)  # [-1, 0, -1, -1, 0]
    g, _ = normalised_returns(r, end, np.array([0, 0, 1, 1, 1]))
    np.testing.assert_allclose(g, [-1.0, 0.0, -1.0, -0.5, 0.0])


def test_value_cross_entropy_fit_predicts_the_right_bin():
    torch.manual_seed(0)
    stats = {"observation.state": FeatureStats.from_array(np.array([[-1.0] * 3, [1.0] * 3]))}
    value = DistributionalValue(ObservationEncoder(SHAPES, stats), [32], bins=201)
    obs = {"observation.state": torch.tensor([[-1.0] * 3, [1.0] * 3]).repeat(16, 1)}
    targets = torch.tensor([40, 170]).repeat(16)
    opt = torch.optim.Adam(value.parameters(), lr=1e-2)
    first = float(value.loss(obs, targets).detach())
    for _ in range(60):
        loss = value.loss(obs, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.2 * first
    two = {"observation.state": obs["observation.state"][:2]}
    assert value(two).argmax(-1).tolist() == [40, 170]
    mean = value.expected(two)
    np.testing.assert_allclose(mean.numpy(), [-1 + 40 / 200, -1 + 170 / 200], atol=0.03)


def test_advantage_and_indicator_with_a_forced_intervention_segment():
    # one episode of 6 frames, N = 2; normalised rewards -0.1 each, values given by hand
    r = np.full(6, -0.1)
    v = np.array([-0.5, -0.2, -0.6, -0.3, -0.2, -0.1])
    end = np.full(6, 6)
    adv = advantages(r, v, end, lookahead=2)
    expected = [
        -0.2 + v[2] - v[0],  # -0.3
        -0.2 + v[3] - v[1],  # -0.3
        -0.2 + v[4] - v[2],  # 0.2
        -0.2 + v[5] - v[3],  # 0.0
        -0.2 + 0.0 - v[4],  # t + N reaches the end: no bootstrap -> 0.0
        -0.1 + 0.0 - v[5],  # truncated to one step -> 0.0
    ]
    np.testing.assert_allclose(adv, expected, atol=1e-12)
    # two tasks: the top 30% of each task's advantages are positive; frames 0-1 were a human correction
    adv2 = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, -5.0, -4.0, -3.0])
    task = np.array([0] * 10 + [1] * 3)
    interv = np.zeros(13)
    interv[:2] = 1
    labels, eps = indicators(adv2, task, 0.3, interv)
    assert eps[0] == pytest.approx(np.quantile(adv2[:10], 0.7))
    assert labels.tolist() == [1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 1]
    labels_plain, _ = indicators(adv2, task, 0.3)
    assert labels_plain[:2].tolist() == [0, 0]


def test_drop_prob_sets_the_unconditioned_fraction():
    torch.manual_seed(0)
    agent = _agent(drop_prob=0.1)
    labels = torch.full((40000,), POSITIVE, dtype=torch.long)
    dropped = agent.drop(labels)
    frac = float((dropped == UNCONDITIONED).float().mean())
    assert 0.09 < frac < 0.11
    assert set(dropped.unique().tolist()) == {POSITIVE, UNCONDITIONED}
    assert (_agent(drop_prob=0.0).drop(labels) == POSITIVE).all()


def test_guidance_beta_one_is_positive_and_beta_zero_unconditioned():
    torch.manual_seed(0)
    agent = _agent()
    policy, cond = agent.policy, agent.conditioner
    torch.nn.init.normal_(cond.embed.weight)  # trained embeddings differ per label
    obs = {"observation.state": torch.randn(4, 3)}
    feat = policy.encode(obs)
    x, t = torch.randn(4, 4), torch.rand(4, 1)
    with torch.no_grad():
        v_pos = policy.velocity_from_features(cond(feat, torch.full((4,), POSITIVE)), x, t)
        v_unc = policy.velocity_from_features(cond(feat, torch.full((4,), UNCONDITIONED)), x, t)
        assert not torch.allclose(v_pos, v_unc)
        torch.testing.assert_close(guided_velocity(policy, cond, feat, x, t, 1.0), v_pos)
        torch.testing.assert_close(guided_velocity(policy, cond, feat, x, t, 0.0), v_unc)
        torch.testing.assert_close(
            guided_velocity(policy, cond, feat, x, t, 2.0), v_unc + 2.0 * (v_pos - v_unc)
        )
    chunk = agent.act(obs)
    assert chunk.shape == (4, 2, 2) and torch.isfinite(chunk).all()


def test_conditioner_appends_a_token_to_vla_prefix_features():
    cond = IndicatorConditioner(8)
    torch.nn.init.normal_(cond.embed.weight)
    prefix = torch.randn(3, 5, 9)  # (B, L, W + 1) with W = 8
    out = cond(prefix, torch.tensor([0, 1, 2]))
    assert out.shape == (3, 6, 9)
    torch.testing.assert_close(out[:, :5], prefix)
    torch.testing.assert_close(out[:, 5, :8], cond.embed.weight)
    assert (out[:, 5, 8] == 1).all()
    with pytest.raises(ValueError, match="width 8"):
        cond(torch.randn(3, 5), torch.tensor([0, 1, 2]))


def test_update_before_prepare_is_refused():
    agent = _agent()
    with pytest.raises(RuntimeError, match="prepare"):
        agent.update({})


def test_train_and_eval_recap_from_the_cli(tiny_offline_run, tmp_path):
    from online_setup import TINY

    run = tmp_path / "run"
    run.mkdir()
    shutil.copytree(tiny_offline_run / "dataset", run / "dataset")
    shutil.copytree(tiny_offline_run / "checkpoints" / "bc_seed0", run / "checkpoints" / "bc_seed0")
    args = [
        f"--run_dir={run}",
        *TINY,
        "--offline.method=recap",
        "--recap.value_steps=20",
        "--recap.value_batch_size=32",
        "--recap.value_hidden_dims=[16]",
        "--data.val_episodes=[5]",
        "--data.val_every=5",
        "--data.val_max_frames=20",
    ]
    assert main(["train", "--algo", "offline", *args]) == 0
    ckpt = run / "checkpoints" / "offline_seed0"
    config = json.loads((ckpt / "config.json").read_text())
    assert config["method"] == "recap" and config["recap"]["value_bins"] == 201
    # the train report lists next.success, RECAP's episode success label, as read (not ignored)
    assert "next.success" in config["features"]["targets"]
    assert "next.success" not in config["features"]["ignored"]
    agent, _ = load_agent(ckpt)
    assert type(agent).__name__ == "RECAPAgent" and float(agent.value.fitted) == 1.0
    # a restored agent (resume, or a larger budget) relabels with its saved value instead of refitting it
    cfg = load_config(None, args)
    data = TrainingSet(run / "dataset", cfg.data, 5, 0.99, tmp_path / "cache", for_rl=True)
    before = [p.clone() for p in agent.value.parameters()]
    metrics = agent.prepare(data)
    assert "value_loss" not in metrics and 0.2 < metrics["positive_fraction"] < 0.35
    assert all(torch.equal(a, b) for a, b in zip(before, agent.value.parameters(), strict=True))
    assert agent.labels.shape == (len(data.train.rows),)
    assert main(["eval", "--algo", "offline", *args]) == 0
    result = json.loads((run / "eval" / "offline_seed0.json").read_text())
    assert len(result["episodes"]) == 2
    assert result["policy"]["inference"] == {"recap.cfg_beta": 1.5}  # the checkpoint's
    # an explicit eval override of the guidance weight takes effect and is recorded; reusing the default
    # evaluation's name for it is refused instead of returning that evaluation's result
    assert main(["eval", "--algo", "offline", *args, "--recap.cfg_beta=3.0"]) == 2
    assert main(["eval", "--algo", "offline", *args, "--recap.cfg_beta=3.0", "--eval.name=beta3"]) == 0
    result = json.loads((run / "eval" / "offline_seed0_beta3.json").read_text())
    assert result["policy"]["inference"] == {"recap.cfg_beta": 3.0}
    table = data.dataset.load_tabular()  # a demo frame: in distribution, so the chunk is not clipped
    obs = {k: torch.as_tensor(np.asarray(table[k][:1]), dtype=torch.float32) for k in config["obs_shapes"]}
    noise = torch.randn(1, config["policy"]["horizon"], config["action_dim"])
    default = agent.act(obs, noise)
    assert apply_inference(agent, {"recap.cfg_beta": 3.0}) == {"recap.cfg_beta": 3.0}
    assert not torch.allclose(agent.act(obs, noise), default)


@pytest.mark.parametrize(
    ("override", "match"),
    [("--recap.cfg_beta=0.5", "recap.cfg_beta=0.5"), ("--recap.positive_fraction=1", "positive_fraction")],
)
def test_bad_recap_values_are_config_errors(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])


def test_unknown_recap_key_is_refused():
    with pytest.raises(Exception, match="bogus"):
        load_config(None, ["--recap.bogus=1"])


def test_recap_runs_on_the_vla_policy(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    from tiny_vlm import IMAGE, build_tiny_vlm

    from robot_rl.config import VLAConfig
    from robot_rl_testing.fakes import fake_batch

    shapes = {"observation.state": (3,), "observation.images.front": (IMAGE, IMAGE, 3)}
    vlm = build_tiny_vlm(tmp_path / "vlm")
    vla = VLAConfig(vlm=str(vlm), expert_width=32, expert_layers=1, instruction="pick up the cube")
    policy = PolicyConfig(kind="vla", horizon=2, flow_steps=3, vla=vla)
    torch.manual_seed(0)
    agent = build_agent("recap", policy, RecapConfig(value_hidden_dims=[16]), shapes, 2, _stats())
    assert agent.conditioner.embed.embedding_dim == 32  # one extra prefix token of the expert's width
    agent.labels = torch.tensor([0, 1, 1, 0])  # as prepare() would label 4 training frames
    batch = fake_batch(4, 2, shapes, 2, seed=0)
    batch["index"] = torch.arange(4)
    metrics = agent.update(batch)
    assert np.isfinite(metrics["bc_loss"])
    assert agent.conditioner.embed.weight.abs().sum() > 0  # the indicator embedding trains
    chunk = agent.act(fake_batch(2, 2, shapes, 2, seed=1)["observations"])
    assert chunk.shape == (2, 2, 2) and torch.isfinite(chunk).all()
