"""``env.backend=mjx`` (issue 37) against ``mujoco_cpu`` on the CPU at small N: the same initial states,
trajectories within stated tolerances, the scripted experts' success, autoreset, and clear refusals.

Tolerances (MJX float32 vs MuJoCo C float64, same actions): reset observations 1e-5; over the first
control steps of the expert's approach, before any contact: joint positions and pinch pose 1e-3 (rad, m;
measured: below 1e-5), joint velocities 2e-2 rad/s (measured: up to 5e-3 on a 0.5 rad/s joint: the
implicit damping in float32), gripper closure 1e-2 (measured: 3.1e-3 after one closing step). With
contacts the trajectories diverge (different collision routines and solver), so the grasp and place are
compared by outcome: every env succeeds on both backends and, for pick-cube and stack, the episode
lengths differ by at most 3 control steps. Push is compared by success only: its expert pushes with the
closed fingers, whose convex hulls do not collide on mjx (only the pads do), so the cube slides
differently (measured lengths 47 and 25 steps on mjx vs 19 and 25 on mujoco_cpu, seed 3).

Compile cost: the first run compiles each task for about 90 s on a 2-core CPU; every MJX test uses the
same N and horizons (:mod:`mjx_shared`) and compiles under :func:`mjx_shared.compiled`'s lock, so each
program compiles once per session and JAX's persistent cache serves the rest.
"""

from __future__ import annotations

import numpy as np
import pytest
from mjx_shared import PICK, PLACE, PUSH, STACK, N, compiled, mjx_cfg

pytest.importorskip("jax")
pytest.importorskip("mujoco.mjx")

from robot_rl import keys  # noqa: E402
from robot_rl.config import EnvConfig, RandomizeConfig  # noqa: E402
from robot_rl.sim.batched_factory import make_batched_env  # noqa: E402
from robot_rl.sim.tasks import make_expert  # noqa: E402

FREE_STEPS = 3
POS_TOL = 1e-3
VEL_TOL = 2e-2
GRIP_TOL = 1e-2
VEL = slice(7, 14)
GRIP = 21
RESET_TOL = 1e-5
LENGTH_TOL = {PICK: 3, STACK: 3}


def _run_expert(env, task: str, seed: int, max_steps: int):
    """Roll each env's expert until every env has ended one episode; returns (first obs, per-step states,
    successes (N,), lengths (N,), obs after the autoreset)."""
    obs, _ = env.reset(seed=seed)
    first = {k: v.copy() for k, v in obs.items()}
    experts = [make_expert(task, noise=0.0, seed=seed + i) for i in range(env.num_envs)]
    done = np.zeros(env.num_envs, bool)
    success = np.zeros(env.num_envs, bool)
    length = np.zeros(env.num_envs, int)
    after: dict[str, np.ndarray] = {k: np.zeros_like(v) for k, v in obs.items()}
    states = []
    instructions = env.tasks()
    for _ in range(max_steps):
        acts = np.stack(
            [
                e.act(
                    {
                        keys.STATE: obs[keys.STATE][i],
                        keys.ENV_STATE: obs[keys.ENV_STATE][i],
                        keys.TASK: instructions[i],
                    }
                )
                for i, e in enumerate(experts)
            ]
        )
        obs, _, term, trunc, info = env.step(acts)
        states.append(info["final_observation"][keys.STATE].copy())
        ended = (term | trunc) & ~done
        success[ended] = info["is_success"][ended]
        length[ended] = len(states)
        for k in obs:
            after[k][ended] = obs[k][ended]
        done |= ended
        instructions = env.tasks()
        if done.all():
            break
    return first, np.stack(states), success, length, after


@pytest.mark.e2e
@pytest.mark.parametrize("task", [PICK, STACK, PUSH, PLACE])
def test_mjx_matches_mujoco_cpu_and_expert_succeeds(task):
    compiled(task)
    cfg = mjx_cfg(task)
    horizon = cfg.max_episode_steps
    with (
        make_batched_env(cfg, N) as mjx_env,
        make_batched_env(cfg, N, backend="mujoco_cpu", num_threads=1) as cpu,
    ):
        got = _run_expert(mjx_env, task, seed=3, max_steps=horizon)
        want = _run_expert(cpu, task, seed=3, max_steps=horizon)
    for k in got[0]:
        np.testing.assert_allclose(got[0][k], want[0][k], atol=RESET_TOL, err_msg=f"reset {k}")
    free_got, free_want = got[1][:FREE_STEPS], want[1][:FREE_STEPS]
    np.testing.assert_allclose(free_got[..., VEL], free_want[..., VEL], atol=VEL_TOL, err_msg="velocities")
    np.testing.assert_allclose(free_got[..., GRIP], free_want[..., GRIP], atol=GRIP_TOL, err_msg="gripper")
    free_got[..., VEL] = free_want[..., VEL] = free_got[..., GRIP] = free_want[..., GRIP] = 0.0
    np.testing.assert_allclose(free_got, free_want, atol=POS_TOL, err_msg="positions, pinch pose")
    assert want[2].all(), "the expert fails on mujoco_cpu: the comparison means nothing"
    assert got[2].all(), f"expert success on mjx {got[2]} vs mujoco_cpu {want[2]}"
    if task in LENGTH_TOL:
        assert np.abs(got[3] - want[3]).max() <= LENGTH_TOL[task], (got[3], want[3])
    # autoreset: the next episode starts from env i's own stream, as on mujoco_cpu
    np.testing.assert_allclose(got[4][keys.ENV_STATE], want[4][keys.ENV_STATE], atol=RESET_TOL)


@pytest.mark.e2e
def test_mjx_randomize_dynamics_per_env():
    """env.randomize's dynamics draws reach each env's model: heavier/slipperier cubes per env, and the
    same draws as mujoco_cpu's for the same seeds (the placement jitter shows in the reset observation)."""
    compiled(PICK)
    rnd = RandomizeConfig(object_mass_scale=[0.5, 2.0], object_pos_jitter_m=[-0.02, 0.02])
    cfg = mjx_cfg(PICK, randomize=rnd)
    with (
        make_batched_env(cfg, N) as env,
        make_batched_env(cfg, N, backend="mujoco_cpu", num_threads=1) as cpu,
    ):
        obs, _ = env.reset(seed=5)
        ref, _ = cpu.reset(seed=5)
        np.testing.assert_allclose(obs[keys.ENV_STATE], ref[keys.ENV_STATE], atol=RESET_TOL)
        masses = env._params["body_mass"][:, cpu.envs[0]._cube_body]
        np.testing.assert_allclose(masses, [e.model.body_mass[e._cube_body] for e in cpu.envs], rtol=1e-6)
        assert masses[0] != masses[1]


@pytest.mark.parametrize(
    "change, key",
    [
        ({"cameras": ["front"]}, "env.cameras"),
        ({"id": "robot_rl/PandaOpenDrawer-v0"}, "env.id"),
        ({"randomize": RandomizeConfig(action_noise_std=[0.0, 0.1])}, "env.randomize.action_noise_std"),
        ({"kwargs": {"controller": "numpy"}}, "env.kwargs.controller"),
    ],
)
def test_mjx_refuses_what_it_does_not_run(change, key):
    base = {"id": PICK, "backend": "mjx"}
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        make_batched_env(EnvConfig(**{**base, **change}), N)


@pytest.mark.e2e
def test_step_device_shares_buffers_with_torch_and_equals_the_host_path():
    """The DLPack path (issue 37): the observations a torch policy reads are the sim's own buffers (same
    address), the torch action enters the sim without a copy, and the device path's results equal the numpy
    path's from the same state (same program)."""
    import torch

    from robot_rl.sim.mjx_dlpack import to_jax

    compiled(PICK)
    with make_batched_env(mjx_cfg(PICK), N) as host, make_batched_env(mjx_cfg(PICK), N) as dev:
        want, _ = host.reset(seed=7)
        dev.reset(seed=7)
        seen = dev.observation_device()
        for k in want:
            np.testing.assert_array_equal(seen[k].numpy(), want[k])
            assert seen[k].data_ptr() == dev._obs[k].unsafe_buffer_pointer(), k
        actions = torch.tensor([[0.01, -0.02, -0.03, 1.0], [-0.02, 0.01, 0.0, 0.0]], dtype=torch.float32)
        assert to_jax(actions).unsafe_buffer_pointer() == actions.data_ptr()
        for _ in range(3):
            want, reward, term, trunc, info = host.step(actions.numpy())
            got = dev.step_device(actions)
            for k in want:
                assert got.obs[k].data_ptr() == dev._obs[k].unsafe_buffer_pointer(), k
                np.testing.assert_array_equal(got.obs[k].numpy(), want[k], err_msg=k)
            np.testing.assert_array_equal(got.reward.numpy(), reward)
            np.testing.assert_array_equal(got.terminated.numpy(), term)
            np.testing.assert_array_equal(got.truncated.numpy(), trunc)
            np.testing.assert_array_equal(got.sim_unstable.numpy(), info["sim_unstable"])
        assert not np.allclose(want[keys.STATE], host.reset(seed=7)[0][keys.STATE]), "the arm did not move"
        with pytest.raises(ValueError, match=r"shape \(2, 4\)"):
            dev.step_device(actions[:1])
