"""The simulated human in the real MuJoCo pick-cube env: takes over a stalling or drifting policy, leaves a
good one alone, is deterministic, and respects the per-episode cap; on pick-colour it lifts the cube the
episode's instruction names."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from robot_rl.config import EnvConfig, InterventionConfig
from robot_rl.runtime.intervention import InterventionDevice, start_episode
from robot_rl.sim import make_env
from robot_rl.sim.expert import PickCubeExpert
from robot_rl.teleop import make_device
from robot_rl.teleop.sim_human import GRASP_DONE_Z_M, SimulatedHuman


@pytest.fixture(scope="module")
def env():
    env = make_env(EnvConfig())
    yield env
    env.close()


def idle_policy(obs):
    """Zero end-effector delta, gripper open."""
    return np.zeros(4, dtype=np.float32)


def run_episode(env, human: InterventionDevice, policy, seed: int) -> tuple[bool, int, list[bool]]:
    """(success, steps, per-step 'the human drove'), executing the human's action when it gives one."""
    obs, info = env.reset(seed=seed)
    start_episode(human, seed, info["task"])
    driven = []
    while True:
        inp = human.poll(obs)
        policy_action = policy(obs)
        driven.append(inp.action is not None)
        obs, _, terminated, truncated, info = env.step(
            inp.action if inp.action is not None else policy_action
        )
        if terminated or truncated:
            return bool(info["is_success"]), len(driven), driven


def test_takes_over_idle_policy_and_succeeds(env):
    human = SimulatedHuman(InterventionConfig())
    for seed in (0, 1):
        success, steps, driven = run_episode(env, human, idle_policy, seed)
        assert success and steps <= 60, (seed, steps)
        assert human.takeovers >= 1 and human.last_reason == "stall"
        assert human.steps_driven == sum(driven) >= InterventionConfig().takeover_steps
        assert not any(driven[: InterventionConfig().stall_steps])  # it waits a full stall window


def test_lifts_the_instructed_cube_on_pick_colour():
    """Pick-colour draws the instruction per episode; from an idle policy the human lifts the cube it
    names, so the episode succeeds for every colour (before it lifted the first cube, red, whatever the
    instruction said). Without an instruction it falls back to the first cube, which fails the others."""
    env = make_env(EnvConfig(id="robot_rl/PandaPickColour-v0"))
    human = SimulatedHuman(InterventionConfig())
    try:
        asked = {}
        for seed in range(12):
            success, steps, _ = run_episode(env, human, idle_policy, seed)
            asked[env.unwrapped.task] = asked.get(env.unwrapped.task, 0) + 1
            assert success and human.takeovers >= 1, (seed, env.unwrapped.task, steps)
            assert human.target == env.unwrapped.target
        assert len(asked) == 3  # every colour was asked for
        seed = next(s for s in range(12) if env.reset(seed=s)[1]["task"] != env.unwrapped.instructions[0])
        obs, _ = env.reset(seed=seed)
        human.reset(seed)  # no instruct(): the first cube
        while True:
            inp = human.poll(obs)
            obs, _, terminated, truncated, info = env.step(
                inp.action if inp.action is not None else idle_policy(obs)
            )
            if terminated or truncated:
                break
        assert not info["is_success"]
    finally:
        env.close()


def test_never_takes_over_clean_expert(env):
    human = SimulatedHuman(InterventionConfig())
    for seed in range(5):
        expert = PickCubeExpert(noise=0.0, seed=seed)
        success, _, driven = run_episode(env, human, expert.act, seed)
        assert success and human.takeovers == 0 and not any(driven), seed


def test_takes_over_drifting_policy(env):
    def away(obs):  # moves sideways away from the cube at full speed
        side = -1.0 if obs["observation.environment_state"][1] > 0 else 1.0
        return np.array([0.0, 0.03 * side, 0.0, 0.0], dtype=np.float32)

    # a long stall window, so only the drift rule can fire (moving away is also no progress)
    human = SimulatedHuman(InterventionConfig(max_takeovers=1, stall_steps=40))
    _, _, driven = run_episode(env, human, away, seed=3)
    assert human.takeovers == 1 and human.last_reason == "drift"
    assert any(driven)


def test_deterministic(env):
    runs = [run_episode(env, SimulatedHuman(InterventionConfig()), idle_policy, seed=4) for _ in range(2)]
    assert runs[0] == runs[1]
    assert any(runs[0][2])


def test_max_takeovers_cap(env):
    cfg = InterventionConfig(
        takeover_steps=2
    )  # hands back while still approaching: the idle policy stalls again
    counts = {}
    for cap in (1, 2, 0):
        human = SimulatedHuman(dataclasses.replace(cfg, max_takeovers=cap))
        run_episode(env, human, idle_policy, seed=5)
        counts[cap] = human.takeovers
    assert counts[1] == 1 and counts[2] == 2 and counts[0] > 2, counts


def test_keeps_control_through_grasp(env):
    """Hand-back falls due while the expert closes the gripper: the human finishes the grasp instead of
    handing back a half-grasped cube (the idle policy would open the gripper and drop it)."""
    cfg = InterventionConfig(takeover_steps=10, max_takeovers=1)
    human = SimulatedHuman(cfg)
    success, _, driven = run_episode(env, human, idle_policy, seed=6)
    first = driven.index(True)
    assert success and all(driven[first:]) and human.steps_driven > cfg.takeover_steps, driven


def test_hands_back_once_cube_lifted():
    env = make_env(EnvConfig(lift_height_m=0.5))  # success out of reach: the episode runs on after the lift
    try:
        human = SimulatedHuman(InterventionConfig(takeover_steps=10, max_takeovers=1))
        obs, _ = env.reset(seed=7)
        human.reset(7)
        driven = []
        for _ in range(60):
            inp = human.poll(obs)
            if driven and driven[-1] and inp.action is None:
                assert obs["observation.environment_state"][2] >= GRASP_DONE_Z_M
            driven.append(inp.action is not None)
            obs, *_ = env.step(inp.action if inp.action is not None else idle_policy(obs))
        assert human.takeovers == 1 and driven.count(True) == human.steps_driven
        assert True in driven and not driven[-1]
    finally:
        env.close()


def test_config_validation_and_factory():
    with pytest.raises(ValueError, match="intervention.stall_steps"):
        SimulatedHuman(InterventionConfig(stall_steps=0))
    with pytest.raises(ValueError, match="intervention.drift_distance_m"):
        SimulatedHuman(InterventionConfig(drift_distance_m=0.0))
    low, high = np.array([-0.03] * 3 + [0.0]), np.array([0.03] * 3 + [1.0])
    assert isinstance(make_device(InterventionConfig(device="sim_human"), low, high), SimulatedHuman)
    with pytest.raises(ValueError, match="sim_human"):
        make_device(InterventionConfig(device="sim_human"), np.zeros(7), np.ones(7))


def test_an_env_without_a_scene_is_a_device_error_naming_the_key():
    """A robot without a simulated scene (a stock ROS 2 arm) gives no environment_state: before, a bare
    KeyError from the actor (restarted, crashing again) or from ``record --teleop sim_human``."""
    from robot_rl.runtime.intervention import DeviceError

    human = SimulatedHuman(InterventionConfig(device="sim_human"))
    start_episode(human, 0, "")
    with pytest.raises(DeviceError, match="observation.environment_state"):
        human.poll({"observation.state": np.zeros(22, np.float32)})
