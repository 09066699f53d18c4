"""``env.randomize``: each knob changes what it should and nothing else, a reset seed reproduces an episode
exactly, all-off is bit-identical to no randomisation, and the ``mujoco_cpu`` batched backend randomises
each sub-env from its own seed (real MuJoCo)."""

from dataclasses import replace

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.config import ConfigError, EnvConfig, RandomizeConfig, load_config
from robot_rl.sim import make_env
from robot_rl.sim.panda_pick_cube import PandaPickCubeEnv
from robot_rl.sim.tasks import build_task_env

ALL = RandomizeConfig(
    object_mass_scale=[0.5, 2.0],
    object_friction_scale=[0.5, 1.5],
    object_size_scale=[0.8, 1.2],
    object_pos_jitter_m=[-0.02, 0.02],
    object_yaw_jitter_rad=[-0.5, 0.5],
    joint_damping_scale=[0.5, 2.0],
    armature_scale=[0.5, 2.0],
    actuator_kp_scale=[0.8, 1.2],
    actuator_kd_scale=[0.8, 1.2],
    action_delay_steps=[0, 2],
    action_noise_std=[0.05, 0.1],
    obs_noise_std=[0.001, 0.01],
    camera_pos_jitter_m=[-0.03, 0.03],
    camera_rot_jitter_rad=[-0.05, 0.05],
    camera_fovy_jitter_deg=[-3.0, 3.0],
    light_pos_jitter_m=[-0.5, 0.5],
    light_diffuse_scale=[0.5, 1.5],
    rgba_jitter=[-0.2, 0.2],
)
ACTIONS = np.random.default_rng(0).uniform([-0.03, -0.03, -0.03, 0.0], [0.03, 0.03, 0.03, 1.0], (8, 4))


def _env(cameras=(), **knobs):
    return build_task_env(EnvConfig(cameras=list(cameras), image_size=32, randomize=RandomizeConfig(**knobs)))


def _rollout(env, seed, actions=ACTIONS):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        out.append(env.step(a)[0])
    return out


def _same(a, b):
    return all(np.array_equal(x[k], y[k]) for x, y in zip(a, b, strict=True) for k in x)


def _model_arrays(model):
    out = {}
    for name in dir(model):
        value = getattr(model, name, None)
        if not name.startswith("_") and isinstance(value, np.ndarray) and value.dtype.kind in "fiu":
            out[name] = value.copy()
    return out


def _changed(env, seed_a=1, seed_b=2):
    env.reset(seed=seed_a)
    before = _model_arrays(env.model)
    kp_kd = (env.controller.kp.copy(), env.controller.kd.copy())
    env.reset(seed=seed_b)
    after = _model_arrays(env.model)
    fields = {k for k in before if not np.array_equal(before[k], after[k])}
    if not np.array_equal(kp_kd[0], env.controller.kp):
        fields.add("controller.kp")
    if not np.array_equal(kp_kd[1], env.controller.kd):
        fields.add("controller.kd")
    return fields, before, after


MODEL_KNOBS = [
    ("object_mass_scale", {"body_mass", "body_inertia"}),
    ("object_friction_scale", {"geom_friction"}),
    ("object_size_scale", {"geom_size", "geom_rbound", "geom_aabb", "body_inertia"}),
    ("joint_damping_scale", {"dof_damping"}),
    ("armature_scale", {"dof_armature"}),
    ("actuator_kp_scale", {"controller.kp", "actuator_gainprm", "actuator_biasprm"}),
    ("actuator_kd_scale", {"controller.kd", "actuator_biasprm"}),
    ("camera_pos_jitter_m", {"cam_pos"}),
    ("camera_rot_jitter_rad", {"cam_quat"}),
    ("camera_fovy_jitter_deg", {"cam_fovy"}),
    ("light_pos_jitter_m", {"light_pos"}),
    ("light_diffuse_scale", {"light_diffuse"}),
    ("rgba_jitter", {"geom_rgba", "mat_rgba"}),
]


@pytest.mark.parametrize(("knob", "expected"), MODEL_KNOBS, ids=[k for k, _ in MODEL_KNOBS])
def test_each_model_knob_changes_only_its_fields(knob, expected):
    """Two seeds differ exactly in the knob's model fields (and gains), and only in the right rows."""
    value = getattr(ALL, knob)
    env = _env(**{knob: value})
    fields, before, after = _changed(env)
    assert fields == expected
    m = env.model
    cube = m.body("block").id
    if knob == "object_mass_scale":  # only the cube's body row
        rows = np.flatnonzero(before["body_mass"] != after["body_mass"])
        assert rows.tolist() == [cube]
    if knob in ("object_friction_scale", "object_size_scale"):
        rows = np.flatnonzero(
            np.any(
                before["geom_size" if "size" in knob else "geom_friction"]
                != after["geom_size" if "size" in knob else "geom_friction"],
                axis=1,
            )
        )
        assert rows.tolist() == [m.geom("block").id]
    if knob == "joint_damping_scale":  # robot dofs only, never the cube's free joint
        rows = np.flatnonzero(before["dof_damping"] != after["dof_damping"])
        assert set(rows) <= set(np.flatnonzero(m.body_rootid[m.dof_bodyid] != cube))
        assert len(rows) > 7
    if knob == "actuator_kp_scale":
        rows = np.flatnonzero(np.any(before["actuator_gainprm"] != after["actuator_gainprm"], axis=1))
        assert rows.tolist() == [m.actuator("fingers_actuator").id]
    env.close()


def test_defaults_off_is_bit_identical_to_no_section():
    plain = PandaPickCubeEnv(image_size=32)  # no randomize argument at all
    off = make_env(EnvConfig(image_size=32))
    assert not off.randomizer.enabled
    assert _same(_rollout(plain, 3), _rollout(off, 3))


def test_pose_jitter_moves_the_cube_from_its_own_stream():
    """The jitter is added to the task's placement, which the randomiser's generator leaves unchanged."""
    plain, jit = _env(), _env(object_pos_jitter_m=[-0.02, 0.02])
    obs_p, _ = plain.reset(seed=4)
    obs_j, _ = jit.reset(seed=4)
    offset = jit.randomizer.values["object_pos_jitter_m"][0]
    np.testing.assert_allclose(obs_j[keys.ENV_STATE][:2], obs_p[keys.ENV_STATE][:2] + offset, atol=1e-6)
    assert np.abs(offset).max() > 0
    np.testing.assert_array_equal(obs_j[keys.STATE], obs_p[keys.STATE])


def test_yaw_and_size_knobs_set_the_initial_cube_pose():
    plain, rand = _env(), _env(object_yaw_jitter_rad=[0.3, 0.3], object_size_scale=[1.5, 1.5])
    obs_p, _ = plain.reset(seed=4)
    obs_r, _ = rand.reset(seed=4)
    pose_p, pose_r = obs_p[keys.ENV_STATE], obs_r[keys.ENV_STATE]
    np.testing.assert_array_equal(pose_r[:2], pose_p[:2])
    assert pose_r[2] == pytest.approx(1.5 * pose_p[2])  # a larger cube still rests on the floor
    np.testing.assert_allclose(pose_r[3:], [np.cos(0.15), 0, 0, np.sin(0.15)], atol=1e-6)
    np.testing.assert_array_equal(obs_r[keys.STATE], obs_p[keys.STATE])
    for _ in range(5):  # and stays there: no interpenetration kick
        obs_r = rand.step(np.zeros(4))[0]
    assert obs_r[keys.ENV_STATE][2] == pytest.approx(1.5 * pose_p[2], abs=1e-3)


def test_action_delay_applies_the_action_from_k_steps_ago():
    delayed = _env(action_delay_steps=[2, 2])
    plain = _env()
    hold = np.zeros((2, 4))  # the initial command: no move, gripper open
    got = _rollout(delayed, 0, ACTIONS)
    want = _rollout(plain, 0, np.concatenate([hold, ACTIONS[:-2]]))
    assert _same(got, want)
    assert not _same(got, _rollout(plain, 0, ACTIONS))


def test_obs_noise_changes_state_not_physics():
    plain, noisy = _env(), _env(obs_noise_std=[0.01, 0.01])
    a, b = _rollout(plain, 5), _rollout(noisy, 5)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x[keys.ENV_STATE], y[keys.ENV_STATE])
        diff = y[keys.STATE] - x[keys.STATE]
        assert 0.002 < diff.std() < 0.03
    np.testing.assert_array_equal(plain.data.qpos, noisy.data.qpos)


def test_action_noise_perturbs_the_trajectory_within_the_box():
    plain, noisy = _env(), _env(action_noise_std=[0.1, 0.1])
    a, b = _rollout(plain, 5), _rollout(noisy, 5)
    np.testing.assert_array_equal(a[0][keys.STATE], b[0][keys.STATE])
    assert not np.array_equal(a[-1][keys.STATE], b[-1][keys.STATE])
    for _ in range(20):  # noise pushes past the bound: clipped to the box, never an error
        applied = noisy.randomizer.action(np.array([0.03, 0.03, 0.03, 1.0]))
        assert np.all(applied <= noisy.action_space.high) and np.all(applied >= noisy.action_space.low)


def test_visual_knobs_change_the_image_not_the_states():
    visuals = {
        k: getattr(ALL, k) for k in ALL.__dataclass_fields__ if k.startswith(("camera", "light", "rgba"))
    }
    plain, vis = _env(["front"]), _env(["front"], **visuals)
    a, b = _rollout(plain, 6, ACTIONS[:3]), _rollout(vis, 6, ACTIONS[:3])
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x[keys.STATE], y[keys.STATE])
        np.testing.assert_array_equal(x[keys.ENV_STATE], y[keys.ENV_STATE])
        assert np.abs(x[keys.image_key("front")].astype(int) - y[keys.image_key("front")]).mean() > 1.0
    plain.close()
    vis.close()


def test_a_seed_reproduces_an_episode_and_another_differs():
    env, twin = build_task_env(EnvConfig(cameras=["front"], image_size=32, randomize=ALL)), None
    first = _rollout(env, 7)
    assert _same(first, _rollout(env, 7))
    assert not _same(first, _rollout(env, 8))
    twin = build_task_env(EnvConfig(cameras=["front"], image_size=32, randomize=ALL))
    _rollout(env, 7)
    _rollout(twin, 7)
    env.reset()  # unseeded resets continue the seeded stream
    twin.reset()
    assert env.randomizer.values.keys() == twin.randomizer.values.keys()
    assert all(
        np.array_equal(env.randomizer.values[k], twin.randomizer.values[k]) for k in env.randomizer.values
    )
    env.close()
    twin.close()


def test_mujoco_cpu_randomises_each_sub_env_from_its_seed():
    from robot_rl.sim.batched_mujoco import MujocoCpuBatchedEnv

    knobs = RandomizeConfig(
        object_mass_scale=[0.5, 2.0], obs_noise_std=[0.01, 0.01], camera_pos_jitter_m=[-0.05, 0.05]
    )
    cfg = EnvConfig(cameras=["front"], image_size=32, randomize=knobs)
    batched = MujocoCpuBatchedEnv(cfg, num_envs=2, num_threads=2)
    obs, _ = batched.reset(seed=[11, 12])
    single = build_task_env(cfg)
    for i, seed in enumerate((11, 12)):
        want, _ = single.reset(seed=seed)
        np.testing.assert_array_equal(batched.envs[i].model.body_mass, single.model.body_mass)
        for k in want:
            np.testing.assert_array_equal(obs[k][i], want[k])
    assert batched.envs[0].model.body_mass[-1] != batched.envs[1].model.body_mass[-1]
    batched.close()
    single.close()


@pytest.mark.parametrize(
    ("knobs", "needle"),
    [
        (
            {"object_mass_scale": [1.2, 0.8]},
            "env.randomize.object_mass_scale=[1.2, 0.8]: low must be <= high",
        ),
        ({"joint_damping_scale": [-0.5, 1.0]}, "env.randomize.joint_damping_scale=[-0.5, 1.0]: each element"),
        ({"action_delay_steps": [3]}, "env.randomize.action_delay_steps=[3]: must be []"),
    ],
)
def test_a_bad_range_fails_naming_the_key(knobs, needle):
    with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        _env(**knobs)
    overrides = [f"--env.randomize.{k}={v}".replace(" ", "") for k, v in knobs.items()]
    with pytest.raises(ConfigError, match=f"env.randomize.{next(iter(knobs))}"):
        load_config(None, overrides)


def test_randomize_is_refused_for_foreign_envs_and_robots():
    cfg = replace(EnvConfig(id="CartPole-v1"), randomize=RandomizeConfig(obs_noise_std=[0.0, 0.1]))
    with pytest.raises(ValueError, match="env.randomize"):
        make_env(cfg)
    with pytest.raises(ConfigError, match="env.randomize: randomises the simulator only"):
        load_config(
            None, ["--env.robot.driver=sim", "--env.num_envs=1", "--env.randomize.obs_noise_std=[0,0.1]"]
        )
