"""``env.backend=mjx`` end to end at small N on the CPU (issue 37): ``collect`` with the scripted expert,
BC, ``eval`` and ``robot-rl ppo`` all roll out on the MJX batched env, unchanged (the backend satisfies the
batched API they already drive)."""

from __future__ import annotations

import pytest

pytest.importorskip("jax")
pytest.importorskip("mujoco.mjx")

from robot_rl.cli import stages  # noqa: E402
from robot_rl.config import EnvConfig, PipelineConfig  # noqa: E402


def test_collect_bc_eval_and_ppo_on_mjx(tmp_path, capsys):
    from robot_rl.cli.main import main

    cfg = PipelineConfig(run_dir=str(tmp_path / "run"))
    cfg.env = EnvConfig(num_envs=2, max_episode_steps=60, backend="mjx")
    cfg.collect.num_episodes, cfg.collect.expert_noise = 2, 0.0
    cfg.bc.steps, cfg.bc.batch_size = 20, 16
    cfg.policy.hidden_dims = [32, 32]
    cfg.eval.episodes_per_seed = 2
    collected = stages.collect(cfg)
    assert collected["num_episodes"] == 2 and collected["demo_success_rate"] == 1.0, collected
    stages.train(cfg, "bc", 0)
    out = stages.evaluate(cfg, "bc", 0)
    assert out["summary"]["num_episodes"] == 2
    assert [e["env_seed"] for e in out["episodes"]] == [1_000_000, 1_000_001]
    args = [
        "ppo",
        f"--run_dir={cfg.run_dir}",
        "--seed=0",
        "--threads=1",
        f"--ppo.init={tmp_path / 'run' / 'checkpoints' / 'bc_seed0'}",
        "--env.backend=mjx",
        "--env.max_episode_steps=60",
        "--ppo.num_envs=2",
        "--ppo.rollout_chunks=2",
        "--ppo.env_steps=12",
        "--eval.episodes_per_seed=1",
    ]
    assert main(args) == 0, capsys.readouterr().err
    assert "eval ppo_flow_noise seed 0 (test split): success" in capsys.readouterr().out
