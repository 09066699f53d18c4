"""π_RL PPO on the VLA policy and on instruction-conditioned policies (issue 20): the chain's noise and value
heads read the VLA's pooled prefix, the rollout gives every env its episode's instruction, and
``robot-rl ppo`` runs from a VLA BC checkpoint to its evaluation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_vlm import IMAGE, build_tiny_vlm  # noqa: E402

from robot_rl.algos.flow_ppo import FlowPPOAgent  # noqa: E402
from robot_rl.cli.main import main  # noqa: E402
from robot_rl.config import (  # noqa: E402
    EnvConfig,
    PipelineConfig,
    PolicyConfig,
    PPOConfig,
    VLAConfig,
    config_to_dict,
)
from robot_rl.data.normalize import FeatureStats  # noqa: E402
from robot_rl.keys import ENV_STATE, STATE, TASK  # noqa: E402
from robot_rl.policies import build_agent, load_agent, save_agent  # noqa: E402

H, D, S = 3, 4, 5
SHAPES = {STATE: (S,), "observation.images.front": (IMAGE, IMAGE, 3)}


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    return build_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm"))


def _stats(shapes: dict) -> dict[str, FeatureStats]:
    rng = np.random.default_rng(0)
    out = {
        k: FeatureStats.from_array(rng.normal(size=(64, *v)).astype(np.float32)) for k, v in shapes.items()
    }
    out["action"] = FeatureStats.from_array(rng.uniform(-1, 1, size=(64, D)).astype(np.float32))
    return {k: v for k, v in out.items() if not k.startswith("observation.images.")}


def _obs(batch: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    image = torch.randint(0, 256, (batch, IMAGE, IMAGE, 3), generator=g).to(torch.uint8)
    return {STATE: torch.randn(batch, S, generator=g), "observation.images.front": image}


@pytest.mark.parametrize("method", ["flow_noise", "flow_sde"])
def test_ppo_on_the_vla_scores_its_own_chains_and_trains_only_what_the_vla_trains(vlm, method):
    """The recorded chain's log-probability, recomputed by the update, equals the rollout's (first-epoch
    ratio 1); the value and noise heads read the pooled prefix (B, 2 W: the state token beside the mean of
    the others); one update moves the expert and the
    fine-tuned language model, never the frozen vision tower."""
    torch.manual_seed(0)
    vla = VLAConfig(vlm=str(vlm), expert_width=32, expert_layers=1, instruction="pick up the cube")
    cfg = PolicyConfig(kind="vla", horizon=H, flow_steps=3, vla=vla)
    ppo_cfg = PPOConfig(method=method, value_hidden_dims=[16])
    agent = build_agent("ppo", cfg, ppo_cfg, SHAPES, D, _stats(SHAPES))
    assert isinstance(agent, FlowPPOAgent) and agent.policy.feature_dim == 64
    obs = _obs(3)
    out = agent.explore(obs)
    assert out["actions"].shape == (3, H, D) and out["chain"].shape == (3, 4, H * D)
    assert out["value"].shape == (3,) and out["log_prob"].shape == (3, H * D)
    feat = agent.policy.encode(obs)
    pooled = agent.policy.pool_features(feat)
    assert pooled.shape == (3, 64)
    torch.testing.assert_close(pooled[:, :32], feat[:, 0, :-1])  # the state token, kept whole
    again, _ = agent.chain.log_prob(feat, out["chain"], out["step"])
    torch.testing.assert_close(again, out["log_prob"], atol=1e-5, rtol=1e-5)
    before = {n: p.detach().clone() for n, p in agent.policy.named_parameters()}
    batch = {**out, "observations": obs, "valid": torch.ones(3, H)}
    batch.update(advantages=torch.tensor([1.0, -1.0, 0.5]), returns=torch.zeros(3))
    metrics = agent.update(batch)
    assert abs(metrics["ratio_mean"] - 1.0) < 1e-4 and metrics["clip_frac"] == 0.0
    moved = {n for n, p in agent.policy.named_parameters() if not torch.equal(p, before[n])}
    assert any(n.startswith("expert.") for n in moved)
    assert any(n.startswith("backbone.") for n in moved)  # the language model is fine-tuned
    assert not [n for n in moved if "vision" in n]


def test_ppo_gives_every_env_its_episodes_instruction(tmp_path, monkeypatch):
    """Pick-colour draws the instruction per episode: a flow policy conditioned on the three instructions
    is given each env's own, the one its episode was reset with, at every rollout and update (before, the
    policy got no instruction and the run failed at its first chunk)."""
    pytest.importorskip("mujoco")
    from robot_rl.cli.ppo import rollout_envs
    from robot_rl.policies import factory
    from robot_rl.run_dir import RunDir
    from robot_rl.sim.panda_tasks import PandaPickColourEnv
    from robot_rl.training import ppo

    instructions = list(PandaPickColourEnv.instructions)
    pcfg = PolicyConfig(horizon=H, flow_steps=2, hidden_dims=[16, 16], tasks=instructions)
    cfg = PipelineConfig(
        run_dir=str(tmp_path / "run"),
        policy=pcfg,
        env=EnvConfig(id="robot_rl/PandaPickColour-v0", backend="mujoco_cpu", max_episode_steps=6),
        ppo=PPOConfig(
            num_envs=3, rollout_chunks=4, epochs=1, minibatch=6, env_steps=36, value_hidden_dims=[16]
        ),
    )
    from robot_rl.sim.batched_factory import make_batched_env

    with make_batched_env(cfg.env, num_envs=1) as env:
        space = env.single_observation_space.spaces
        shapes = {k: space[k].shape for k in (ENV_STATE, STATE)}
        action_dim = env.single_action_space.shape[0]
    stats = _stats(shapes)
    stats["action"] = FeatureStats.from_array(np.random.default_rng(0).uniform(-1, 1, (64, action_dim)))
    bc = build_agent("bc", pcfg, cfg.bc, shapes, action_dim, stats)
    config = {**config_to_dict(cfg), "obs_keys": [ENV_STATE, STATE]}
    save_agent(tmp_path / "bc", bc, config, stats, shapes, action_dim)

    seen: list[np.ndarray] = []
    explore = FlowPPOAgent.explore

    def spy(self, obs):
        seen.append(np.asarray(obs[TASK], dtype=object).copy())
        return explore(self, obs)

    monkeypatch.setattr(FlowPPOAgent, "explore", spy)
    result = ppo.train_ppo(cfg, 0, RunDir(cfg.run_dir), tmp_path / "bc", factory, rollout_envs)
    assert result["episodes"] >= 3
    given = np.stack(seen)  # (chunks, N): the instruction each env's chunk was sampled under
    assert set(given.ravel()) <= set(instructions) and len(set(given.ravel())) > 1
    # replay env seeds the way train_ppo resets them: each env's instruction at its first chunk is the one
    # pick-colour draws for that seed
    with make_batched_env(cfg.env, num_envs=3) as env:
        env.reset(seed=[ppo.PPO_SEED_OFFSET + i for i in range(3)])
        assert list(given[0]) == env.tasks()
    loaded, _ = load_agent(RunDir(cfg.run_dir).checkpoint("ppo_flow_noise", 0))
    assert loaded.policy.cfg.tasks == instructions


def test_cli_ppo_from_a_vla_bc_checkpoint_then_eval(vlm, tmp_path, capsys):
    """``robot-rl ppo`` on a tiny random VLA rendering its camera: collect, BC, PPO (Flow-Noise) and the
    evaluation of both; the PPO checkpoint leaves out the frozen vision tower as BC's does."""
    pytest.importorskip("mujoco")
    from safetensors import safe_open

    run = tmp_path / "run"
    args = [
        "ppo",
        f"--run_dir={run}",
        "--seed=0",
        "--threads=1",
        "--env.cameras=[front]",
        f"--env.image_size={IMAGE}",
        "--env.max_episode_steps=8",
        "--env.num_envs=1",
        "--collect.num_episodes=2",
        "--policy.kind=vla",
        f"--policy.vla.vlm={vlm}",
        "--policy.vla.expert_width=32",
        "--policy.vla.expert_layers=1",
        "--policy.flow_steps=2",
        "--bc.steps=2",
        "--bc.batch_size=4",
        "--data.num_workers=0",
        "--ppo.num_envs=2",
        "--ppo.rollout_chunks=2",
        "--ppo.minibatch=2",
        "--ppo.env_steps=16",
        "--ppo.value_hidden_dims=[16]",
        "--eval.episodes_per_seed=1",
        "--eval.num_videos=0",
    ]
    try:
        code = main(args)
    except SystemExit as done:
        code = done.code
    assert code == 0, capsys.readouterr().err[-3000:]
    out = capsys.readouterr().out
    assert "eval bc seed 0 (test split): success" in out
    assert "eval ppo_flow_noise seed 0 (test split): success" in out
    saved = run / "checkpoints" / "ppo_flow_noise_seed0" / "model.safetensors"
    with safe_open(saved, "pt") as f:
        names = list(f.keys())
    assert [n for n in names if n.startswith("policy.expert.")]
    assert [n for n in names if n.startswith("noise_head.")]
    assert not [n for n in names if "vision" in n]
