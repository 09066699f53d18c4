"""``env.backend=maniskill`` (issue 19): ManiSkill3's own PickCube-v1 on SAPIEN's PhysX (CPU) behind the
batched API, checked against a plain ManiSkill env for the same seeds and actions."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import av
import numpy as np
import pytest
from repo_paths import ROOT

from robot_rl import keys
from robot_rl.config import ConfigError, EnvConfig, load_config
from robot_rl.sim import make_batched_env

ID = "PickCube-v1"
CONFIG = ROOT / "configs" / "maniskill_pick_cube.yaml"


@pytest.fixture(scope="module")
def maniskill():
    """The ManiSkill module, or a skip naming what is missing (the package, or a Vulkan driver)."""
    if importlib.util.find_spec("mani_skill") is None:
        pytest.skip("ManiSkill3 is not installed (pip install 'robot-rl[maniskill]'; setup.sh test has it)")
    try:
        make_batched_env(EnvConfig(id=ID), num_envs=1, backend="maniskill").close()
    except RuntimeError as err:
        if "Vulkan" not in str(err):
            raise
        pytest.skip(str(err))
    import gymnasium as gym

    return gym


def _env(n: int, **kwargs):
    return make_batched_env(EnvConfig(id=ID, kwargs=kwargs), num_envs=n, backend="maniskill")


def _reference(gym, seed: int, actions: np.ndarray) -> list[np.ndarray]:
    """A plain ManiSkill env (its own gym.make, num_envs=1): the flat state after reset and each action."""
    from robot_rl.sim.batched_maniskill import DEFAULTS, _split

    env = gym.make(ID, num_envs=1, obs_mode="state_dict", **DEFAULTS)
    try:
        raw, _ = env.reset(seed=seed)
        out = [np.concatenate(_split(raw))]
        for a in actions:
            raw, *_ = env.step(a.astype(np.float32))
            out.append(np.concatenate(_split(raw)))
        return out
    finally:
        env.close()


def _flat(obs: dict[str, np.ndarray], i: int) -> np.ndarray:
    return np.concatenate([obs[keys.STATE][i], obs[keys.ENV_STATE][i]])


def _expert(obs: dict[str, np.ndarray]) -> np.ndarray:
    """A few lines of P-control on ManiSkill's state (tcp at state[18:21]; is_grasped, goal, cube position
    first in the environment state): above the cube, down, close, carry to the goal. (N, 4) in [-1, 1]."""
    out = []
    for s, e in zip(obs[keys.STATE], obs[keys.ENV_STATE], strict=True):
        tcp, grasped, goal, cube = s[18:21], e[0] > 0.5, e[1:4], e[4:7]
        if grasped:
            target, grip = goal, -1.0
        elif np.linalg.norm((cube - tcp)[:2]) > 0.01:
            target, grip = cube + [0.0, 0.0, 0.05], 1.0
        else:
            target, grip = cube, (1.0 if abs(cube[2] - tcp[2]) > 0.005 else -1.0)
        out.append([*np.clip((target - tcp) * 30.0, -1, 1), grip])
    return np.asarray(out, np.float32)


@pytest.mark.e2e
def test_keys_shapes_and_the_same_episode_as_a_plain_maniskill_env(maniskill):
    rng = np.random.default_rng(0)
    actions = rng.uniform(-1, 1, (12, 2, 4)).astype(np.float32)
    env = _env(2)
    try:
        assert env.single_observation_space[keys.STATE].shape == (25,)
        assert env.single_observation_space[keys.ENV_STATE].shape == (17,)
        assert env.single_action_space.shape == (4,)
        assert env.task == "Pick up the red cube and move it to the green goal."
        assert env.tasks() == [env.task] * 2
        obs, info = env.reset(seed=[5, 9])
        assert obs[keys.STATE].dtype == np.float32 and obs[keys.STATE].shape == (2, 25)
        assert obs[keys.ENV_STATE].shape == (2, 17) and not info["is_success"].any()
        got = [[_flat(obs, i)] for i in range(2)]
        for a in actions:
            obs, reward, terminated, truncated, info = env.step(a)
            assert reward.dtype == np.float32 and reward.shape == (2,)
            for i in range(2):
                got[i].append(_flat(obs, i))
        for i, seed in enumerate((5, 9)):
            want = _reference(maniskill, seed, actions[:, i])
            np.testing.assert_array_equal(np.stack(got[i]), np.stack(want))
    finally:
        env.close()


@pytest.mark.e2e
def test_success_terminates_with_reward_one_and_timeouts_truncate_keeping_the_final_observation(maniskill):
    env = _env(2)
    try:
        obs, _ = env.reset(seed=[0, 3])
        ended = {}
        for t in range(50):
            before = obs
            obs, reward, terminated, truncated, info = env.step(_expert(obs))
            for i in np.flatnonzero(info["_final"]):
                if i not in ended:
                    ended[int(i)] = (t + 1, reward[i], terminated[i], truncated[i], info["is_success"][i])
                    final = info["final_observation"]
                    assert not np.array_equal(final[keys.STATE][i], obs[keys.STATE][i])  # a new episode
                    moved = np.abs(final[keys.STATE][i, :9] - before[keys.STATE][i, :9]).max()
                    assert moved < 0.2  # the joints one control step after the previous observation
            if len(ended) == 2:
                break
        assert set(ended) == {0, 1}
        outcomes = sorted(ended.values(), key=lambda e: e[0])
        for steps, reward, terminated, truncated, success in outcomes:
            if success:  # ManiSkill's sparse reward and its end on success
                assert (reward, terminated, truncated) == (1.0, True, False) and steps < 50
            else:  # its own 50-step horizon
                assert (reward, terminated, truncated) == (0.0, False, True) and steps == 50
        assert any(e[4] for e in outcomes), "the scripted P-controller lifts the cube on seed 0 or 3"
    finally:
        env.close()


@pytest.mark.e2e
def test_per_env_seeds_reproduce_later_episodes_whatever_the_other_env_does(maniskill):
    def starts(seeds: list[int], n_resets: int) -> list[np.ndarray]:
        env = _env(2)
        try:
            obs, _ = env.reset(seed=seeds)
            out = [obs[keys.ENV_STATE][1].copy()]
            for _ in range(n_resets):
                obs = env._reset_envs(np.array([True, True]))
                out.append(obs[keys.ENV_STATE][1].copy())
            return out
        finally:
            env.close()

    a, b = starts([1, 7], 2), starts([4, 7], 2)
    np.testing.assert_array_equal(np.stack(a), np.stack(b))
    assert not np.array_equal(a[1], a[2])  # later episodes are new draws


@pytest.mark.e2e
def test_step_chunk_stops_each_env_at_its_episode_end(maniskill):
    env = _env(2)
    try:
        env.reset(seed=[0, 1])
        idle = np.zeros((2, 4), np.float32)
        idle[:, 3] = 1.0
        for _ in range(45):
            env.step(idle)
        result = env.step_chunk(np.repeat(idle[:, None], 8, axis=1))
        assert result.final.all() and (result.steps == 5).all()  # the 50-step horizon, inside the chunk
        assert result.truncated[:, 4].all() and not result.valid[:, 5:].any()
    finally:
        env.close()


@pytest.mark.e2e
def test_maniskill_settings_that_are_refused(maniskill, tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env:\n  backend: maniskill\n  id: PickCube-v1\n")
    assert load_config(path).env.backend == "maniskill"
    path.write_text("env:\n  backend: mani_skill\n")
    with pytest.raises(ConfigError, match="env.backend.*maniskill"):
        load_config(path)
    cases = [
        (EnvConfig(), "ManiSkill3's own tasks"),
        (EnvConfig(id="NoSuchTask-v9"), "not a registered ManiSkill3 task"),
        (EnvConfig(id=ID, cameras=["front"]), r"\['front'\]: PickCube-v1 has the cameras \['base_camera'\]"),
        (EnvConfig(id=ID, spawn_region=[0.0, 0.1, 0.0, 0.1]), "spawn_region must be unset"),
        (EnvConfig(id=ID, kwargs={"sim_backend": "physx_cuda"}), "only physx_cpu"),
        (EnvConfig(id=ID, kwargs={"obs_mode": "rgb"}), "reads state_dict"),
    ]
    for cfg, match in cases:
        with pytest.raises(ValueError, match=match):
            make_batched_env(cfg, num_envs=1, backend="maniskill")
    with pytest.raises(ValueError, match="render_mode must be None or 'rgb_array'"):
        make_batched_env(EnvConfig(id=ID), num_envs=1, backend="maniskill", render_mode="human")
    env = _env(1)
    try:
        env.reset(seed=0)
        with pytest.raises(ValueError, match="outside its bounds"):
            env.step(np.array([[0.0, 0.0, 2.0, 0.0]]))
        with pytest.raises(ValueError, match="NaN"):
            env.step(np.array([[np.nan, 0.0, 0.0, 0.0]]))
    finally:
        env.close()


@pytest.mark.e2e
def test_push_cube_expert_pushes_into_the_goal_and_noise_slows_it(maniskill):
    from robot_rl.sim.tasks import has_expert, make_expert

    assert has_expert("PushCube-v1") and not has_expert("LiftPegUpright-v1")
    env = make_batched_env(EnvConfig(id="PushCube-v1"), num_envs=1, backend="maniskill")
    try:
        steps = {}
        for noise in (0.0, 1.0):
            expert, lengths = make_expert("PushCube-v1", noise=noise, seed=0), []
            for seed in range(6):
                obs, _ = env.reset(seed=[seed])
                expert.reset(seed=[0, seed])
                length, info = 0, {"_final": [False]}
                while not info["_final"][0]:  # the env truncates at its 50-step horizon
                    obs, _, _, _, info = env.step(expert.act({k: v[0] for k, v in obs.items()})[None])
                    length += 1
                assert noise or info["is_success"][0], f"clean expert failed on seed {seed}"
                lengths.append(length)
            steps[noise] = np.mean(lengths)
        assert steps[1.0] > steps[0.0] + 2, steps
    finally:
        env.close()


@pytest.mark.e2e
def test_stack_cube_expert_stacks_and_noise_makes_it_fail_more(maniskill):
    from robot_rl.sim.tasks import make_expert

    env = make_batched_env(EnvConfig(id="StackCube-v1"), num_envs=1, backend="maniskill")
    try:
        wins = {}
        for noise in (0.0, 0.6):
            expert, wins[noise] = make_expert("StackCube-v1", noise=noise, seed=0), 0
            for seed in range(8):
                obs, _ = env.reset(seed=[seed])
                expert.reset(seed=[0, seed])
                info = {"_final": [False]}
                while not info["_final"][0]:
                    obs, _, _, _, info = env.step(expert.act({k: v[0] for k, v in obs.items()})[None])
                wins[noise] += bool(info["is_success"][0])
        assert wins[0.0] >= 6 and wins[0.6] < wins[0.0], wins
    finally:
        env.close()


@pytest.mark.e2e
def test_cameras_add_images_and_leave_the_state_and_the_physics_as_without(maniskill):
    """``env.cameras=[base_camera]``: uint8 (N, 32, 32, 3) frames of the scene that change as the arm moves,
    next to the same state keys, and the same states as the state-only env for the same seeds and actions
    (rendering never touches the simulation)."""
    cfg = EnvConfig(id=ID, cameras=["base_camera"], image_size=32)
    env, plain = make_batched_env(cfg, num_envs=2, backend="maniskill"), _env(2)
    key = keys.image_key("base_camera")
    try:
        space = env.single_observation_space
        assert space[key].shape == (32, 32, 3) and space[key].dtype == np.uint8
        assert space[keys.ENV_STATE].shape == (17,)
        obs, _ = env.reset(seed=[3, 4])
        ref, _ = plain.reset(seed=[3, 4])
        first = obs[key].copy()
        assert first.dtype == np.uint8 and first.shape == (2, 32, 32, 3) and first.std() > 5
        rng = np.random.default_rng(1)
        for _ in range(15):
            a = rng.uniform(-1, 1, (2, 4)).astype(np.float32)
            obs, *_ = env.step(a)
            ref, *_ = plain.step(a)
            for k in (keys.STATE, keys.ENV_STATE):
                np.testing.assert_array_equal(obs[k], ref[k])
        assert np.abs(obs[key].astype(int) - first).mean() > 0.5  # the arm moved in view
    finally:
        env.close()
        plain.close()


@pytest.mark.e2e
def test_scripted_expert_clean_succeeds_and_noise_makes_it_worse(maniskill):
    from robot_rl.sim.tasks import make_expert

    env = _env(1)
    try:
        rates = {}
        for noise in (0.0, 0.6):
            expert, wins = make_expert(ID, noise=noise, seed=0), 0
            for seed in range(8):
                obs, _ = env.reset(seed=[seed])
                expert.reset(seed=[0, seed])
                for _ in range(50):
                    obs, _, _, _, info = env.step(expert.act({k: v[0] for k, v in obs.items()})[None])
                    if info["_final"][0]:
                        wins += bool(info["is_success"][0])
                        break
            rates[noise] = wins / 8
        assert rates[0.0] == 1.0 and rates[0.6] < 1.0, rates
    finally:
        env.close()


@pytest.mark.e2e
def test_pipeline_collects_trains_and_evaluates_on_maniskill(maniskill, tmp_path):
    """`robot-rl pipeline --config configs/maniskill_pick_cube.yaml` with tiny budgets, in a real process:
    the dataset is written at ManiSkill's 20 Hz with its keys, both methods are evaluated on it, and the
    report's videos show ManiSkill's render camera."""
    code = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    run = tmp_path / "run"
    args = [
        *("pipeline", "--config", str(CONFIG), f"--run_dir={run}", "--seeds=[0]"),
        *("--collect.num_episodes=4", "--bc.steps=20", "--offline.steps=10", "--offline.best_of_n=4"),
        *("--eval.episodes_per_seed=2", "--eval.num_videos=1"),
    ]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads((run / "dataset" / "meta" / "info.json").read_text())
    assert info["fps"] == 20 and info["robot_type"] == "panda"
    assert info["features"][keys.STATE]["shape"] == [25]
    assert info["features"][keys.ENV_STATE]["shape"] == [17]
    assert info["features"][keys.ACTION]["shape"] == [4]
    report = json.loads((run / "report.json").read_text())
    assert report["dataset"]["num_episodes"] == 4 and 0.0 < report["dataset"]["demo_success_rate"] <= 1.0
    assert {m: s["num_episodes"] for m, s in report["methods"].items()} == {"bc": 2, "offline": 2}
    videos = sorted(run.glob("videos/*.mp4"))
    assert [v.name.split("_ep")[0] for v in videos] == ["bc", "offline"] and report["videos"]
    with av.open(str(videos[0])) as container:
        assert container.streams.video[0].average_rate == 20  # ManiSkill's control rate
        frame = next(container.decode(video=0)).to_ndarray(format="rgb24")
    assert frame.shape == (128, 128, 3) and frame.std() > 5


@pytest.mark.e2e
def test_collect_with_a_maniskill_camera_writes_its_video(maniskill, tmp_path):
    """`robot-rl collect` on ManiSkill with ``env.cameras=[base_camera]`` (a real process): the dataset has
    the camera as a LeRobot video feature at ManiSkill's rate next to the whole state, and its frames
    decode to images of the scene."""
    from robot_rl.data.lerobot.reader import LeRobotDataset

    code = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    run = tmp_path / "run"
    args = ["collect", "--config", str(CONFIG), f"--run_dir={run}", "--collect.num_episodes=2"]
    args += ["--env.cameras=[base_camera]", "--env.image_size=48"]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    key = keys.image_key("base_camera")
    info = json.loads((run / "dataset" / "meta" / "info.json").read_text())
    assert info["fps"] == 20 and info["features"][key]["dtype"] == "video"
    assert info["features"][key]["shape"] == [48, 48, 3] and info["features"][keys.ENV_STATE]["shape"] == [17]
    frame = LeRobotDataset(run / "dataset")[0][key]
    assert frame.shape == (3, 48, 48) and float(frame.std()) > 0.02


@pytest.mark.e2e
def test_make_env_builds_the_same_task_as_one_gymnasium_env(maniskill):
    from robot_rl.sim import make_env

    single = make_env(EnvConfig(id=ID, backend="maniskill"))
    batched = _env(1)
    try:
        assert single.metadata["render_fps"] == 20.0 and single.task == batched.task
        assert single.observation_space == batched.single_observation_space
        obs, info = single.reset(seed=4)
        ref, _ = batched.reset(seed=[4])
        assert info["task"] == batched.task and obs[keys.STATE].shape == (25,)
        action = np.array([0.5, -0.2, 0.1, 1.0], np.float32)
        for _ in range(3):
            obs, reward, terminated, truncated, info = single.step(action)
            ref, *_ = batched.step(action[None])
        np.testing.assert_array_equal(_flat({k: v[None] for k, v in obs.items()}, 0), _flat(ref, 0))
        assert isinstance(reward, float) and set(info) == {"is_success", "sim_unstable"}
        with pytest.raises(ValueError, match="outside its bounds"):
            single.step(np.array([0.0, 0.0, 0.0, 3.0]))
        assert single.render() is None  # no render_mode
    finally:
        single.close()
        batched.close()
    shown = make_env(EnvConfig(id=ID, backend="maniskill"), render_mode="rgb_array")
    try:
        shown.reset(seed=4)
        frame = shown.render()
        assert frame.dtype == np.uint8 and frame.shape == (128, 128, 3) and frame.std() > 5
    finally:
        shown.close()
