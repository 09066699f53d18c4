"""The task suite (robot_rl.sim.tasks, issue 19) on real MuJoCo: every task's scripted expert succeeds at
noise 0, success is false at reset, the instructions, pick-colour's target colour (lifting another cube is
not success), the mujoco_cpu backend reproduces the single env, collect writes each episode's
instruction, and unknown ids fail clearly."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from robot_rl import keys
from robot_rl.config import EnvConfig, PipelineConfig
from robot_rl.sim import TASKS, make_env
from robot_rl.sim.batched_factory import make_batched_env
from robot_rl.sim.panda_tasks import COLOURS, PandaPickColourEnv
from robot_rl.sim.tasks import make_expert, task_env_class

SUITE = [t for t in TASKS if t != "robot_rl/PandaPickCube-v0"]
INSTRUCTIONS = {
    "robot_rl/PandaPlaceInBin-v0": "Put the cube in the bin.",
    "robot_rl/PandaStack-v0": "Stack the red cube on the blue cube.",
    "robot_rl/PandaPushToTarget-v0": "Push the cube onto the green target.",
    "robot_rl/PandaOpenDrawer-v0": "Open the drawer.",
}


def _run_expert(env, task_id: str, seed: int, task: str | None = None) -> tuple[bool, dict]:
    """One noise-0 expert episode; ``task`` overrides the instruction the expert is given."""
    obs, info = env.reset(seed=seed)
    expert = make_expert(task_id, noise=0.0, seed=seed)
    done = False
    while not done:
        action = expert.act({**obs, keys.TASK: task or info["task"]})
        obs, _, terminated, truncated, step_info = env.step(action)
        done = terminated or truncated
    return bool(step_info["is_success"]), obs


@pytest.mark.parametrize("task_id", SUITE)
def test_expert_succeeds_at_noise_zero_and_success_is_false_at_reset(task_id):
    env = make_env(EnvConfig(id=task_id, max_episode_steps=100))
    try:
        for seed in (0, 1):
            obs, info = env.reset(seed=seed)
            assert info["is_success"] is False and info["task"] == env.unwrapped.task
            assert obs[keys.ENV_STATE].shape == env.observation_space[keys.ENV_STATE].shape
            _, _, terminated, _, step_info = env.step(np.array([0, 0, 0, 0], np.float32))
            assert not terminated and not step_info["is_success"]  # nothing is done at the start
            success, _ = _run_expert(env, task_id, seed)
            assert success, f"{task_id} expert failed on seed {seed}"
    finally:
        env.close()
    if task_id in INSTRUCTIONS:
        assert env.unwrapped.task == INSTRUCTIONS[task_id]


def test_pick_colour_instruction_names_the_cube_that_must_be_lifted():
    env = PandaPickColourEnv(max_episode_steps=40)
    colours = list(COLOURS)
    seen = set()
    for seed in range(15):
        env.reset(seed=seed)
        seen.add(env.task)
        assert env.task == f"Pick up the {colours[env.target]} cube and lift it."
    assert seen == set(PandaPickColourEnv.instructions)  # every colour is drawn by some seed

    env.reset(seed=0)
    right = env.task
    wrong = next(t for t in PandaPickColourEnv.instructions if t != right)
    success, obs = _run_expert(env, "robot_rl/PandaPickColour-v0", 0, task=wrong)
    lifted = colours.index(wrong.split()[3])
    cubes = obs[keys.ENV_STATE].reshape(3, 7)
    assert cubes[lifted, 2] > 0.1 and not success  # the wrong cube was lifted high: not success
    success, obs = _run_expert(env, "robot_rl/PandaPickColour-v0", 0)
    assert success and env.task == right


def test_mujoco_cpu_reproduces_the_single_env_on_a_suite_task():
    cfg = EnvConfig(id="robot_rl/PandaStack-v0", max_episode_steps=5)
    actions = np.random.default_rng(0).uniform([-0.03] * 3 + [0], [0.03] * 3 + [1], (7, 4)).astype(np.float32)
    seeds = [3, 8]
    env = make_batched_env(cfg, num_envs=2, backend="mujoco_cpu", num_threads=2)
    singles = [make_env(cfg) for _ in seeds]
    try:
        obs, _ = env.reset(seed=seeds)
        refs = [s.reset(seed=seed)[0] for s, seed in zip(singles, seeds, strict=True)]
        assert env.tasks() == [s.task for s in singles]
        for a in actions:
            obs, reward, terminated, truncated, info = env.step(np.repeat(a[None], 2, axis=0))
            for i, single in enumerate(singles):
                refs[i], r, te, tr, step_info = single.step(a)
                if te or tr:
                    np.testing.assert_array_equal(
                        info["final_observation"][keys.ENV_STATE][i], refs[i][keys.ENV_STATE]
                    )
                    refs[i], _ = single.reset()
                assert (reward[i], terminated[i], truncated[i]) == (r, te, tr)
                assert info["is_success"][i] == step_info["is_success"]
                for k in refs[i]:
                    np.testing.assert_array_equal(obs[k][i], refs[i][k])
    finally:
        env.close()
        for s in singles:
            s.close()


@pytest.mark.parametrize("backend", ["mujoco_cpu", "gym_vector"])
def test_batched_envs_report_each_envs_instruction(backend):
    cfg = EnvConfig(id="robot_rl/PandaPickColour-v0")
    kwargs = {"asynchronous": False} if backend == "gym_vector" else {}
    env = make_batched_env(cfg, num_envs=2, backend=backend, **kwargs)
    single = PandaPickColourEnv()
    try:
        env.reset(seed=[0, 1])
        expected = [single.reset(seed=s)[1]["task"] for s in (0, 1)]
        assert env.tasks() == expected and expected[0] != expected[1]
    finally:
        env.close()


def test_collect_writes_each_pick_colour_episode_with_its_instruction(tmp_path):
    from robot_rl.data.lerobot.reader import LeRobotDataset
    from robot_rl.stages.collect import collect

    cfg = PipelineConfig(run_dir=str(tmp_path / "run"))
    cfg.env = EnvConfig(id="robot_rl/PandaPickColour-v0", num_envs=1, max_episode_steps=30)
    cfg.collect.num_episodes, cfg.collect.expert_noise = 5, 0.0
    result = collect(cfg)
    ds = LeRobotDataset(tmp_path / "run" / "dataset")
    table = ds.load_tabular()
    episode_tasks = [ds.tasks[int(table[keys.TASK_INDEX][lo])] for lo in ds.episode_from]
    expected = []
    env = PandaPickColourEnv()
    for seed in range(5):  # collect.seed 0: env seeds 0..4
        env.reset(seed=seed)
        expected.append(env.task)
    assert episode_tasks == expected and len(set(expected)) > 1
    assert result["demo_success_rate"] == 1.0


def test_unknown_task_ids_fail_clearly():
    with pytest.raises(ValueError, match="unknown built-in task 'robot_rl/PandaNope-v0'.*PandaStack-v0"):
        task_env_class("robot_rl/PandaNope-v0")
    with pytest.raises(ValueError, match="unknown built-in task"):
        make_expert("robot_rl/PandaNope-v0")
    with pytest.raises(ValueError, match="mujoco_cpu runs the built-in simulated tasks.*PandaPushToTarget"):
        make_batched_env(EnvConfig(id="robot_rl/PandaNope-v0"), backend="mujoco_cpu")
    with pytest.raises(gym.error.Error):
        make_env(EnvConfig(id="robot_rl/PandaNope-v0"))
    assert gym.spec("robot_rl/PandaPickColour-v0").entry_point == TASKS["robot_rl/PandaPickColour-v0"].env


def test_agent_source_passes_the_instruction_to_a_task_conditioned_policy():
    """Evaluation of a multi-task policy: the rollout's ``obs["task"]`` reaches the policy."""
    from robot_rl.algos import FlowBC
    from robot_rl.config import BCConfig, PolicyConfig
    from robot_rl.data.normalize import compute_stats
    from robot_rl.policies.factory import build_policy
    from robot_rl.sources import AgentSource

    rng = np.random.default_rng(0)
    shapes = {keys.STATE: (22,)}
    stats = compute_stats({keys.STATE: rng.normal(size=(16, 22)), keys.ACTION: rng.normal(size=(16, 4))})
    tasks = list(PandaPickColourEnv.instructions)
    cfg = PolicyConfig(horizon=2, flow_steps=2, hidden_dims=[16], tasks=tasks)
    agent = FlowBC(build_policy(cfg, shapes, 4, stats), BCConfig())
    low, high = np.full(4, -1.0, np.float32), np.ones(4, np.float32)
    source = AgentSource(agent, [keys.STATE], low, high, num_envs=2, seed=0)
    obs = {keys.STATE: rng.normal(size=(2, 22)).astype(np.float32)}
    for i in range(2):
        source.reset(i, i)
    chunks = source({**obs, keys.TASK: np.array(tasks[:2], dtype=object)}, np.arange(2))
    assert chunks.shape == (2, 2, 4)
    with pytest.raises(ValueError, match="conditioned on the task"):
        source(obs, np.arange(2))
