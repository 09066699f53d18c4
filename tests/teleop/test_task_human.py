"""The simulated human of place-in-bin, stack, push-to-target and open-drawer (``TaskHuman``) in the real
MuJoCo suite envs: from an idle policy it completes each task, it leaves the clean expert alone, it is
what ``intervention.device=sim_human`` builds for these tasks, and it is deterministic."""

from __future__ import annotations

import numpy as np
import pytest
from repo_paths import ROOT
from test_sim_human import idle_policy, run_episode

from robot_rl.config import InterventionConfig, load_config
from robot_rl.sim import make_env
from robot_rl.sim.tasks import make_expert
from robot_rl.teleop import make_device
from robot_rl.teleop.sim_human import SimulatedHuman
from robot_rl.teleop.task_human import TaskHuman

CONFIGS = ROOT / "configs"
TASKS = ["place_in_bin", "stack", "push_to_target", "open_drawer"]
SEEDS = range(5)
LOW, HIGH = np.array([-0.03] * 3 + [0.0]), np.array([0.03] * 3 + [1.0])


def _env_and_id(task: str):
    cfg = load_config(str(CONFIGS / f"panda_{task}.yaml"), [])
    return make_env(cfg.env), cfg.env.id


@pytest.mark.parametrize("task", TASKS)
def test_completes_the_task_from_an_idle_policy_and_leaves_the_clean_expert_alone(task):
    env, task_id = _env_and_id(task)
    try:
        human = make_device(InterventionConfig(device="sim_human"), LOW, HIGH, task_id=task_id)
        assert isinstance(human, TaskHuman)
        for seed in SEEDS:
            success, _, driven = run_episode(env, human, idle_policy, seed)
            assert success, (task, seed)
            assert human.takeovers >= 1 and human.last_reason == "stall"
            assert not any(driven[: InterventionConfig().stall_steps])  # it waits a full stall window
        takeovers = []
        for seed in SEEDS:
            expert = make_expert(task_id, noise=0.0, seed=seed)
            success, _, _ = run_episode(env, human, expert.act, seed)
            assert success, (task, seed)
            takeovers.append(human.takeovers)
        assert sum(takeovers) <= 1, takeovers  # push-to-target: once in 10 episodes (README)
    finally:
        env.close()


def test_the_pick_human_would_not_place_the_cube():
    """What ``sim_human`` built before for place-in-bin: the pick human lifts the cube and never places it."""
    env, task_id = _env_and_id("place_in_bin")
    try:
        human = SimulatedHuman(InterventionConfig())
        assert not any(run_episode(env, human, idle_policy, seed)[0] for seed in SEEDS)
    finally:
        env.close()


def test_is_deterministic_and_checks_its_task_and_thresholds():
    env, task_id = _env_and_id("stack")
    try:
        runs = [run_episode(env, TaskHuman(task_id), idle_policy, 3)[2] for _ in range(2)]
        assert runs[0] == runs[1]
    finally:
        env.close()
    with pytest.raises(ValueError, match="PandaPickCube-v0"):
        TaskHuman("robot_rl/PandaPickCube-v0")
    with pytest.raises(ValueError, match="intervention.takeover_steps"):
        TaskHuman(task_id, InterventionConfig(takeover_steps=0))
