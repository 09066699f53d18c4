"""``env.backend=mjx`` end to end at small N on the CPU (issue 37): ``collect`` with the scripted expert,
BC, ``eval`` and ``robot-rl ppo`` all roll out on the MJX batched env, unchanged (the backend satisfies the
batched API they already drive), on pick-cube, push-to-target and place-in-bin; and a batched online actor
on it.

Stack is not here: with the collect seeds, its expert succeeded in 1 of 2 demos on mjx against 2 of 2 on
``mujoco_cpu``: the MJX step blows up in seed 1's grasp (docs/simulation.md, "MJX backend", states what
was found); tests/sim/test_sim_mjx.py compares it on seed 3, where both succeed. Each MJX program is compiled
once per session (:func:`mjx_shared.compiled`)."""

from __future__ import annotations

import json

import pytest
from mjx_shared import HORIZON, PICK, PLACE, PUSH, compiled
from online_setup import copy_run, free_address, overrides, run_online

pytest.importorskip("jax")
pytest.importorskip("mujoco.mjx")

from robot_rl.config import EnvConfig, PipelineConfig  # noqa: E402
from robot_rl.data.replay import ZarrReplayBuffer  # noqa: E402
from robot_rl.runtime.batched_actor import ENV_INDEX_KEY  # noqa: E402
from robot_rl.stages.collect import collect  # noqa: E402
from robot_rl.stages.evaluate import evaluate  # noqa: E402
from robot_rl.stages.train import train  # noqa: E402


@pytest.mark.e2e
@pytest.mark.parametrize("task", [PICK, PUSH, PLACE])
def test_collect_bc_eval_and_ppo_on_mjx(task, tmp_path, capsys):
    from robot_rl.cli.main import main

    compiled(task)
    horizon = HORIZON[task]
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"))
    cfg.env = EnvConfig(id=task, num_envs=2, max_episode_steps=horizon, backend="mjx")
    cfg.collect.num_episodes, cfg.collect.expert_noise = 2, 0.0
    cfg.bc.steps, cfg.bc.batch_size = 20, 16
    cfg.policy.hidden_dims = [32, 32]
    cfg.eval.episodes_per_seed = 2
    collected = collect(cfg)
    assert collected["num_episodes"] == 2 and collected["demo_success_rate"] == 1.0, collected
    train(cfg, "bc", 0)
    out = evaluate(cfg, "bc", 0)
    assert out["summary"]["num_episodes"] == 2
    assert [e["env_seed"] for e in out["episodes"]] == [1_000_000, 1_000_001]
    args = [
        "ppo",
        f"--run_dir={cfg.run_dir}",
        "--seed=0",
        "--threads=1",
        f"--ppo.init={tmp_path / 'run' / 'checkpoints' / 'bc_seed0'}",
        f"--env.id={task}",
        "--env.backend=mjx",
        f"--env.max_episode_steps={horizon}",
        "--ppo.num_envs=2",
        "--ppo.rollout_chunks=2",
        "--ppo.env_steps=12",
        "--eval.episodes_per_seed=1",
    ]
    assert main(args) == 0, capsys.readouterr().err
    assert "eval ppo_flow_noise seed 0 (test split): success" in capsys.readouterr().out


@pytest.mark.e2e
def test_a_batched_online_actor_trains_on_mjx(tiny_offline_run, tmp_path):
    """A real learner and a batched actor process (``online.envs_per_actor=2``) on ``env.backend=mjx``: both
    envs' episodes reach the learner's replay, each once, and the run trains through its env-step budget."""
    compiled(PICK)  # the actor process's env (pick-cube, N = 2, the default horizon) loads it from the cache
    run = copy_run(tiny_offline_run, tmp_path / "run")
    args = overrides(
        run,
        f"--online.address={free_address()}",
        "--online.max_episode_steps=25",
        "--online.envs_per_actor=2",
        "--env.backend=mjx",
    )
    folder = run_online(args, timeout=500)
    summary = json.loads((folder / "summary.json").read_text())
    log = ZarrReplayBuffer(folder / "actor0" / "episodes")
    replay = ZarrReplayBuffer(folder / "replay")
    assert replay.num_episodes == log.num_episodes and summary["env_steps"] == len(replay) == len(log)
    assert summary["env_steps"] >= summary["env_steps_trained"] >= 120
    assert summary["updates"] >= summary["env_steps_trained"]
    assert set(log.episode_arrays()[ENV_INDEX_KEY].tolist()) == {0, 1}
