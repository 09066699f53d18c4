"""Multi-task batches (``env.tasks`` on ``mujoco_cpu``, issue 20 item 2): env i runs ``tasks[i % T]`` exactly
as that task's single env (state, camera, reward, success, instruction), without the per-task
``observation.environment_state``; π_RL PPO trains one instruction-conditioned policy on it; collect and
eval refuse it, and the online runtime one with fewer envs per actor than tasks, with the key named (its
online run: tests/runtime/test_online_multitask.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.cli.main import main
from robot_rl.config import (
    ConfigError,
    EnvConfig,
    PipelineConfig,
    PolicyConfig,
    PPOConfig,
    config_to_dict,
    load_config,
)
from robot_rl.sim import make_env
from robot_rl.sim.batched_factory import make_batched_env
from robot_rl.sim.render import RendererError, select_backend

pytest.importorskip("mujoco")

PICK, DRAWER, PUSH = (
    "robot_rl/PandaPickCube-v0",
    "robot_rl/PandaOpenDrawer-v0",
    "robot_rl/PandaPushToTarget-v0",
)
LOW = np.array([-0.03] * 3 + [0.0], np.float32)
HIGH = np.array([0.03] * 3 + [1.0], np.float32)


def _cameras() -> list[str]:
    try:
        select_backend()
    except RendererError:
        return []  # state only where no offscreen GL works; the state/reward checks still run
    return ["front"]


def test_each_env_of_a_multitask_batch_is_its_tasks_single_env():
    cfg = EnvConfig(tasks=[PICK, DRAWER, PUSH], backend="mujoco_cpu", cameras=_cameras(), image_size=32)
    ids = [PICK, DRAWER, PUSH, PICK]  # env i runs tasks[i % 3]
    seeds = [3, 4, 5, 6]
    actions = np.random.default_rng(0).uniform(LOW, HIGH, size=(8, 4, 4)).astype(np.float32)
    env = make_batched_env(cfg, num_envs=4, num_threads=2)
    singles = [make_env(EnvConfig(id=t, cameras=cfg.cameras, image_size=32)) for t in ids]
    try:
        assert set(env.single_observation_space.spaces) == {keys.STATE} | {
            keys.image_key(c) for c in cfg.cameras
        }
        obs, _ = env.reset(seed=seeds)
        refs = [s.reset(seed=k)[0] for s, k in zip(singles, seeds, strict=True)]
        assert env.tasks() == [s.unwrapped.task for s in singles]
        assert len(set(env.tasks())) == 3
        for a in actions:
            for i, ref in enumerate(refs):
                for k in env.single_observation_space.spaces:
                    np.testing.assert_array_equal(obs[k][i], ref[k], err_msg=f"env {i} ({ids[i]}) {k}")
            obs, reward, terminated, truncated, info = env.step(a)
            steps = [s.step(a[i]) for i, s in enumerate(singles)]
            refs = [st[0] for st in steps]
            np.testing.assert_array_equal(reward, [st[1] for st in steps])
            np.testing.assert_array_equal(terminated, [st[2] for st in steps])
            np.testing.assert_array_equal(info["is_success"], [st[4]["is_success"] for st in steps])
        if cfg.cameras:  # the drawer's scene is drawn with its own renderer, not the pick-cube scene's
            img = obs[keys.image_key("front")]
            assert not np.array_equal(img[1], img[0])
    finally:
        env.close()
        for s in singles:
            s.close()


def test_a_single_task_list_keeps_the_environment_state():
    env = make_batched_env(EnvConfig(tasks=[DRAWER], backend="mujoco_cpu"), num_envs=2, num_threads=1)
    try:
        obs, _ = env.reset(seed=[0, 1])
        assert keys.ENV_STATE in obs and env.tasks() == ["Open the drawer."] * 2
    finally:
        env.close()


def test_bad_multitask_settings_name_the_key(tmp_path, capsys):
    with pytest.raises(ValueError, match="env.tasks has 3 tasks but the batch has 2 envs"):
        make_batched_env(EnvConfig(tasks=[PICK, DRAWER, PUSH]), num_envs=2, backend="mujoco_cpu")
    with pytest.raises(ValueError, match=r"env.tasks=\['Reacher-v5'\]"):
        make_batched_env(EnvConfig(tasks=[PICK, "Reacher-v5"]), num_envs=2, backend="mujoco_cpu")
    with pytest.raises(
        ConfigError, match="env.tasks.*needs env.backend=mujoco_cpu, not env.backend='gym_vector'"
    ):
        load_config(None, [f"--env.tasks=[{PICK},{DRAWER}]"])
    flags = [f"--run_dir={tmp_path / 'run'}", f"--env.tasks=[{PICK},{DRAWER}]", "--env.backend=mujoco_cpu"]
    for command, needle in [
        ("collect", "collect and eval run one task each"),
        ("eval", "collect and eval run one task each"),
        ("online", "set online.envs_per_actor to at least 2"),
    ]:
        assert main([command, *flags]) == 2, command
        assert needle in capsys.readouterr().err, command
    assert not (tmp_path / "run" / "dataset").exists()


def test_ppo_trains_one_policy_on_a_multitask_batch(tmp_path, monkeypatch, capsys):
    """``robot-rl ppo`` with ``env.tasks``: each env's chunks are sampled under its own task's instruction,
    the checkpoint keeps them all, and the run is not evaluated on the mixed batch (it says how instead)."""
    from robot_rl.algos.flow_ppo import FlowPPOAgent
    from robot_rl.data.normalize import FeatureStats
    from robot_rl.policies import build_agent, load_agent, save_agent
    from robot_rl.run_dir import RunDir

    env_cfg = EnvConfig(tasks=[PICK, DRAWER], backend="mujoco_cpu", max_episode_steps=6)
    with make_batched_env(env_cfg, num_envs=2) as env:
        instructions = env.tasks()
        shape = env.single_observation_space[keys.STATE].shape
        action_dim = env.single_action_space.shape[0]
    pcfg = PolicyConfig(horizon=3, flow_steps=2, hidden_dims=[16, 16], tasks=instructions)
    cfg = PipelineConfig(
        run_dir=str(tmp_path / "run"),
        policy=pcfg,
        env=env_cfg,
        ppo=PPOConfig(
            num_envs=4, rollout_chunks=4, epochs=1, minibatch=8, env_steps=48, value_hidden_dims=[16]
        ),
    )
    rng = np.random.default_rng(0)
    stats = {
        keys.STATE: FeatureStats.from_array(rng.normal(size=(64, *shape))),
        keys.ACTION: FeatureStats.from_array(rng.uniform(-1, 1, (64, action_dim))),
    }
    bc = build_agent("bc", pcfg, cfg.bc, {keys.STATE: shape}, action_dim, stats)
    save_agent(
        tmp_path / "bc",
        bc,
        {**config_to_dict(cfg), "obs_keys": [keys.STATE]},
        stats,
        {keys.STATE: shape},
        action_dim,
    )
    seen: list[np.ndarray] = []
    explore = FlowPPOAgent.explore

    def spy(self, obs):
        seen.append(np.asarray(obs[keys.TASK], dtype=object).copy())
        return explore(self, obs)

    monkeypatch.setattr(FlowPPOAgent, "explore", spy)
    flags = [
        f"--run_dir={cfg.run_dir}",
        f"--ppo.init={tmp_path / 'bc'}",
        f"--env.tasks=[{PICK},{DRAWER}]",
        "--env.backend=mujoco_cpu",
        "--env.max_episode_steps=6",
        "--ppo.num_envs=4",
        "--ppo.rollout_chunks=4",
        "--ppo.epochs=1",
        "--ppo.minibatch=8",
        "--ppo.env_steps=48",
        "--ppo.value_hidden_dims=[16]",
        "--threads=1",
    ]
    assert main(["ppo", *flags]) == 0
    out = capsys.readouterr().out
    assert "env.tasks: evaluate each task with `robot-rl eval --algo ppo --ppo.method=flow_noise" in out
    run = RunDir(cfg.run_dir)
    assert run.result("ppo_flow_noise_seed0")["episodes"] >= 4
    assert not (Path(cfg.run_dir) / "eval").exists()  # not evaluated on the mixed batch
    assert seen
    for given in seen:  # env i's chunks always carry tasks[i % 2]'s instruction
        assert list(given) == instructions * 2
    loaded, _ = load_agent(run.checkpoint("ppo_flow_noise", 0))
    assert loaded.policy.cfg.tasks == instructions


def test_padded_environment_state_keeps_the_task_and_its_expert_unchanged():
    """``env.environment_state_size`` appends zeros: the task's numbers, its expert's actions and its
    rewards are those of the unpadded env, and a multi-task batch then keeps the feature."""
    from robot_rl.sim.tasks import make_expert

    plain = make_env(EnvConfig(id=PUSH))
    padded = make_env(EnvConfig(id=PUSH, environment_state_size=12))
    experts = [make_expert(PUSH, noise=0.3, seed=0) for _ in range(2)]
    try:
        assert padded.observation_space[keys.ENV_STATE].shape == (12,)
        a, _ = plain.reset(seed=7)
        b, _ = padded.reset(seed=7)
        for _ in range(15):
            np.testing.assert_array_equal(b[keys.ENV_STATE][:10], a[keys.ENV_STATE])
            assert not b[keys.ENV_STATE][10:].any()
            act_a, act_b = experts[0].act(a), experts[1].act(b)
            np.testing.assert_array_equal(act_a, act_b)
            a, ra, *_ = plain.step(act_a)
            b, rb, *_ = padded.step(act_b)
            assert ra == rb
    finally:
        plain.close()
        padded.close()
    cfg = EnvConfig(tasks=[PICK, DRAWER, PUSH], backend="mujoco_cpu", environment_state_size=10)
    with make_batched_env(cfg, num_envs=3, num_threads=1) as env:
        obs, _ = env.reset(seed=[0, 1, 2])
        assert obs[keys.ENV_STATE].shape == (3, 10)
        assert not obs[keys.ENV_STATE][1, 4:].any() and obs[keys.ENV_STATE][1, :4].any()  # the drawer's 4
    with pytest.raises(ValueError, match="env.environment_state_size=3 is below PandaOpenDrawerEnv's 4"):
        make_env(EnvConfig(id=DRAWER, environment_state_size=3))
    with pytest.raises(ValueError, match="environment_state_size pads the built-in tasks' state only"):
        make_env(EnvConfig(id="Reacher-v5", environment_state_size=12))
    with pytest.raises(ConfigError, match="env.environment_state_size=-1"):
        load_config(None, ["--env.environment_state_size=-1"])
