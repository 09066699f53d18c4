"""The arm's joint PD in MuJoCo's actuators (``env.kwargs.controller=actuator``): one ``mj_step`` call per
control step instead of one per physics step, the arm tracks its target and holds against gravity as the
numpy controller does, the scripted expert still succeeds, randomised gains reach the actuators, and bad
settings fail clearly."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

from robot_rl import keys
from robot_rl.config import EnvConfig, RandomizeConfig
from robot_rl.sim import make_env
from robot_rl.sim.assets import load_model
from robot_rl.sim.controller import DiffIKController
from robot_rl.sim.expert import PickCubeExpert
from robot_rl.sim.tasks import build_task_env

MOVE = np.array([0.02, 0.0, -0.02, 0.0], np.float32)
HOLD = np.zeros(4, np.float32)


def _env(controller: str, **cfg):
    return make_env(EnvConfig(kwargs={"controller": controller}, **cfg))


@pytest.mark.parametrize(("controller", "calls"), [("numpy", 50), ("actuator", 1)])
def test_physics_calls_per_control_step(controller, calls, monkeypatch):
    env = _env(controller)
    env.reset(seed=0)
    counted = []
    step = mujoco.mj_step
    monkeypatch.setattr(mujoco, "mj_step", lambda m, d, n=1: (counted.append(n), step(m, d, n))[1])
    env.step(MOVE)
    env.close()
    assert len(counted) == calls and sum(counted) == 50


def test_actuator_controller_tracks_and_holds_like_the_numpy_one():
    """The same moves end within 3 mm of each other and of the commanded 10 cm; holding still, the arm
    does not sag (gravity compensated)."""
    ends = {}
    for controller in ("numpy", "actuator"):
        env = _env(controller)
        obs, _ = env.reset(seed=0)
        start = obs[keys.STATE][14:17].copy()
        for _ in range(5):
            obs, *_ = env.step(MOVE)
        for _ in range(5):
            obs, *_ = env.step(HOLD)
        held = obs[keys.STATE][14:17].copy()
        for _ in range(10):
            obs, *_ = env.step(HOLD)
        env.close()
        np.testing.assert_allclose(held - start, [0.1, 0.0, -0.1], atol=0.01)
        assert np.abs(obs[keys.STATE][14:17] - held).max() < 2e-3, controller
        ends[controller] = held
    assert np.abs(ends["actuator"] - ends["numpy"]).max() < 3e-3


def test_scripted_expert_succeeds_with_the_actuator_controller():
    env = _env("actuator")
    successes = 0
    for seed in range(8):
        obs, _ = env.reset(seed=seed)
        expert = PickCubeExpert(noise=0.0, seed=seed)
        while True:
            obs, _, terminated, truncated, _ = env.step(expert.act(obs))
            if terminated or truncated:
                successes += int(terminated)
                break
    env.close()
    assert successes == 8


def test_randomised_gains_reach_the_actuators():
    cfg = EnvConfig(
        kwargs={"controller": "actuator"},
        randomize=RandomizeConfig(actuator_kp_scale=[0.5, 1.5], actuator_kd_scale=[0.5, 1.5]),
    )
    env = build_task_env(cfg)
    arm = env.controller.ctrl_adr
    seen = []
    for seed in (1, 2):
        env.reset(seed=seed)
        env.step(HOLD)
        kp, kd = env.controller.kp, env.controller.kd
        np.testing.assert_array_equal(env.model.actuator_gainprm[arm, 0], kp)
        np.testing.assert_array_equal(env.model.actuator_biasprm[arm, 1:3], np.stack([-kp, -kd], axis=1))
        seen.append(kp.copy())
    env.close()
    assert not np.array_equal(seen[0], seen[1])


def test_bad_controller_settings_fail_clearly():
    with pytest.raises(ValueError, match="controller must be one of"):
        _env("mujoco")
    with pytest.raises(ValueError, match="arm_gravcomp=True"):
        DiffIKController(load_model(), np.zeros(7), np.array([0.0, 1.0, 0.0, 0.0]), mode="actuator")
