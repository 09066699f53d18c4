"""No surprises for a new user (issue 21, item 7): a LeRobot dataset from another robot, trained and
evaluated through the adapter by config only, each through the real CLI (``main([...])`` in process, or a
``robot-rl`` subprocess where the process boundary matters: progress output, warnings, exit codes).

The third-party env is :mod:`foreign_envs` (tests/): 25 Hz, ``info["success"]``, an observation outside
its declared space, its camera only through ``env.render()``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from foreign_envs import ENV_ID, IMAGE_HW, RENDER_FPS
from random_source import RandomSource
from repo_paths import TESTS

from robot_rl import keys
from robot_rl.cli.main import main
from robot_rl.config import ConfigError, load_config
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.rollout import RecordedEpisode, rollout
from robot_rl.stages.envs import EVAL_SEED_OFFSET, dataset_features, make_rollout_vec_env

CODE = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
STATE = "{observation: {observation.state: [pos, goal, gain]}, task: reach, success_key: success}"
CAMERA = (
    "{observation: {observation.state: [pos, goal]}, task: reach, success_key: success, "
    "render_camera: observation.images.top, render_rotate: 90, render_flip: horizontal}"
)
TINY = [
    f"--env.id={ENV_ID}",
    "--env.module=foreign_envs",
    "--env.num_envs=1",
    "--seeds=[0]",
    "--bc.steps=20",
    "--offline.steps=10",
    "--bc.batch_size=16",
    "--offline.batch_size=16",
    "--policy.hidden_dims=[32,32]",
    "--policy.image_features=8",
    "--offline.critic_hidden_dims=[32,32]",
    "--offline.best_of_n=2",
    "--data.num_workers=0",
    "--eval.episodes_per_seed=4",
    "--eval.num_videos=0",
]


def _args(run_dir: Path, adapter: str = STATE, *extra: str) -> list[str]:
    return [f"--run_dir={run_dir}", f"--env.adapter={adapter}", *TINY, *extra]


def _record(root: Path, args: list[str], episodes: int = 6) -> None:
    """Record ``episodes`` random-action demos of the foreign env through the adapter into ``root``."""
    cfg = load_config(None, args)
    vec = make_rollout_vec_env(cfg.env)
    try:
        features = dataset_features(vec.single_observation_space, vec.single_action_space)
        with LeRobotWriter(root, fps=RENDER_FPS, features=features, robot_type="toy") as writer:

            def add(ep: RecordedEpisode) -> None:
                writer.add_episode(ep.frames, task="reach", source="demo")

            space = vec.single_action_space
            rollout(vec, RandomSource(space.low, space.high), list(range(episodes)), add)
    finally:
        vec.close()


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("foreign") / "dataset"
    _record(root, _args(root.parent))
    return root


@pytest.fixture(scope="module")
def trained(tmp_path_factory, dataset) -> Path:
    """A run dir whose BC checkpoint was trained by ``robot-rl train`` on the foreign dataset."""
    run = tmp_path_factory.mktemp("trained")
    assert main(["train", *_args(run, STATE, f"--data.path={dataset}")]) == 0
    return run


def _eval(run: Path, *extra: str, adapter: str = STATE) -> dict:
    assert main(["eval", *_args(run, adapter, *extra)]) == 0
    return json.loads((run / "eval" / "bc_seed0.json").read_text())


def _copy_checkpoints(src: Path, dst: Path) -> Path:
    shutil.copytree(src / "checkpoints", dst / "checkpoints")
    return dst


def _subprocess(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    env.update(env_extra or {})
    cmd = [sys.executable, "-c", CODE, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def test_cycle_time_uses_the_foreign_envs_own_rate(trained, tmp_path):
    result = _eval(_copy_checkpoints(trained, tmp_path))
    episodes = result["episodes"]
    # the env succeeds at step 3 + seed % 4 whatever the policy does; at 25 Hz, not env.control_hz's 10
    assert [e["steps"] for e in episodes] == [3 + (EVAL_SEED_OFFSET + i) % 4 for i in range(4)]
    assert all(e["success"] for e in episodes)
    assert [e["cycle_time_s"] for e in episodes] == pytest.approx([e["steps"] / RENDER_FPS for e in episodes])
    assert result["summary"]["cycle_time_s"] == pytest.approx(np.mean([e["steps"] for e in episodes]) / 25)


@pytest.mark.parametrize(
    ("extra", "hz"),
    [
        (["--env.kwargs={render_fps: null}"], RENDER_FPS),
        (["--env.kwargs={render_fps: null}", "--env.adapter.fps=50"], 50),
    ],
    ids=["dataset_fps", "adapter_fps"],
)
def test_cycle_time_of_an_env_without_render_fps(trained, tmp_path, extra, hz):
    """No metadata["render_fps"]: env.adapter.fps, else the fps of the dataset the policy was trained on."""
    episodes = _eval(_copy_checkpoints(trained, tmp_path), *extra)["episodes"]
    assert [e["cycle_time_s"] for e in episodes] == pytest.approx([e["steps"] / hz for e in episodes])


def test_eval_outcomes_do_not_depend_on_the_number_of_env_workers(trained, tmp_path):
    one = _eval(_copy_checkpoints(trained, tmp_path / "one"), "--env.num_envs=1")
    two = _eval(_copy_checkpoints(trained, tmp_path / "two"), "--env.num_envs=2")
    returns = [e["episode_return"] for e in one["episodes"]]
    assert len(set(returns)) == 4  # the policy's actions matter for the return
    assert one["episodes"] == two["episodes"]


def test_render_camera_feeds_an_image_policy(tmp_path):
    from robot_rl.sim import make_env

    args = _args(tmp_path, CAMERA)
    env = make_env(load_config(None, args).env)
    try:
        obs, _ = env.reset(seed=3)
        top = obs[keys.image_key("top")]
        raw = env.unwrapped.render()
        assert raw.shape == (*IMAGE_HW, 3) and top.shape == (IMAGE_HW[1], IMAGE_HW[0], 3)  # rotated 90
        np.testing.assert_array_equal(top, np.rot90(raw)[:, ::-1])
        assert top[-1, -1].tolist() == [255, 255, 255]  # top-left marker: rotated to bottom-left, flipped
        assert env.observation_space.contains(obs)
    finally:
        env.close()
    _record(tmp_path / "dataset", args, episodes=4)
    assert main(["train", *args]) == 0
    checkpoint = json.loads((tmp_path / "checkpoints" / "bc_seed0" / "config.json").read_text())
    assert keys.image_key("top") in checkpoint["obs_keys"]
    assert _eval(tmp_path, adapter=CAMERA)["summary"]["num_episodes"] == 4


def test_bad_render_settings_are_config_errors(tmp_path, capsys):
    bad = CAMERA.replace("render_rotate: 90", "render_rotate: 45")
    assert main(["eval", *_args(tmp_path, bad)]) == 2
    assert "env.adapter.render_rotate=45" in capsys.readouterr().err


def test_missing_success_key_warns(trained, tmp_path):
    adapter = STATE.replace(", success_key: success", "")  # the default, is_success, which this env lacks
    with pytest.warns(UserWarning, match=r"success_key='is_success'.*\['success'\]"):
        result = _eval(_copy_checkpoints(trained, tmp_path), adapter=adapter)
    assert result["summary"]["success_rate"] == 0.0


def test_pipeline_on_a_foreign_env_trains_on_data_path_and_writes_the_report(dataset, tmp_path):
    args = _args(
        tmp_path, STATE, f"--data.path={dataset}", "--eval.num_videos=1", "--eval.episodes_per_seed=2"
    )
    assert main(["pipeline", *args]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["dataset"]["path"] == str(dataset) and report["dataset"]["num_episodes"] == 6
    assert set(report["methods"]) == {"bc", "offline"}
    assert report["methods"]["bc"]["num_episodes"] == 2
    assert (tmp_path / "curves.png").is_file() and (tmp_path / "report.md").is_file()
    assert len(report["videos"]) == 2 and all((tmp_path / v).is_file() for v in report["videos"])
    assert not (tmp_path / "dataset").exists()  # nothing was collected


def test_rerun_with_a_larger_budget_continues_training(dataset, tmp_path, capsys):
    args = _args(tmp_path, STATE, f"--data.path={dataset}")
    assert main(["train", *args, "--bc.steps=10"]) == 0
    capsys.readouterr()
    assert main(["train", *args, "--bc.steps=10"]) == 0
    assert "already trained (10 steps" in capsys.readouterr().out
    assert main(["train", *args, "--bc.steps=60"]) == 0
    out = capsys.readouterr().out
    assert "continuing from step 10 to bc.steps=60" in out and "60 steps" in out
    log = (tmp_path / "logs" / "bc_seed0.csv").read_text().splitlines()
    assert [int(row.split(",")[0]) for row in log[1:]] == [10, 50, 60]  # LOG_EVERY=50 and the last step
    saved = json.loads((tmp_path / "checkpoints" / "bc_seed0" / "config.json").read_text())
    assert saved["bc"]["steps"] == 60


def test_train_and_eval_print_human_summaries(dataset, tmp_path, capsys):
    args = _args(tmp_path, STATE, f"--data.path={dataset}", "--data.val_episodes=[5]", "--data.val_every=10")
    assert main(["train", *args]) == 0
    out = capsys.readouterr().out
    assert "train bc seed 0: 20 steps in" in out
    assert "final training metrics: bc_loss=" in out
    assert "validation (held-out episodes): val_bc_loss=" in out and "val_action_mae=" in out
    assert f"checkpoint: {tmp_path / 'checkpoints' / 'bc_seed0'}" in out
    assert main(["eval", *args]) == 0
    out = capsys.readouterr().out
    assert "eval bc seed 0 (test split): success 100% (95% CI" in out and "over 4 episodes" in out
    assert f"results: {tmp_path / 'eval' / 'bc_seed0.json'}" in out
    assert "{'num_episodes'" not in out


@pytest.mark.parametrize(
    ("adapter", "named"),
    [
        ("{observation: {observation.state: [pos, velocity]}}", "'velocity'"),
        ("{observation: {observation.state: [pos], observation.images.top: [goal]}}", "shape (2,)"),
    ],
)
def test_adapter_mistakes_are_one_line_config_errors(tmp_path, capsys, adapter, named):
    assert main(["eval", *_args(tmp_path, adapter)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("robot-rl: config error: env.adapter") and named in err
    assert len(err.splitlines()) == 1


def test_collect_records_the_robot_type(tmp_path):
    args = [
        f"--run_dir={tmp_path}",
        "--collect.num_episodes=1",
        "--env.num_envs=1",
        "--env.max_episode_steps=5",
        "--env.robot_type=panda_sim_v2",
    ]
    assert main(["collect", *args]) == 0
    info = json.loads((tmp_path / "dataset" / "meta" / "info.json").read_text())
    assert info["robot_type"] == "panda_sim_v2"
    from robot_rl.config import EnvConfig, RobotConfig
    from robot_rl.sim import robot_type

    assert robot_type(EnvConfig()) == "panda"
    assert robot_type(EnvConfig(robot=RobotConfig(driver="so101"))) == "so101"
    assert robot_type(EnvConfig(id=ENV_ID)) == ENV_ID


def test_progress_is_plain_periodic_lines_off_a_terminal(dataset, tmp_path):
    args = _args(tmp_path, STATE, f"--data.path={dataset}", "--bc.steps=100")
    proc = _subprocess("train", *args, env_extra={"ROBOT_RL_PROGRESS_EVERY_S": "600"})
    assert proc.returncode == 0, proc.stderr
    assert "\r" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("train bc seed 0:")]
    assert len(lines) == 2, lines  # the start and the end (and one per 600 s, here none)
    assert lines[0].startswith("train bc seed 0: 0/100 step (0%)")
    assert lines[1].startswith("train bc seed 0: 100/100 step (100%)")


def test_plain_progress_prints_periodically():
    import io

    from robot_rl.progress import PlainProgress

    out = io.StringIO()
    with PlainProgress(desc="eval", total=3, unit="ep", file=out, every_s=0.0) as bar:
        for _ in range(3):
            bar.update(1)
    assert [line.split(",")[0] for line in out.getvalue().splitlines()] == [
        "eval: 0/3 ep (0%)",
        "eval: 1/3 ep (33%)",
        "eval: 2/3 ep (67%)",
        "eval: 3/3 ep (100%)",
    ]


def test_known_third_party_warnings_are_filtered(trained, tmp_path):
    _copy_checkpoints(trained, tmp_path)
    proc = _subprocess("eval", *_args(tmp_path, STATE))
    assert proc.returncode == 0, proc.stderr
    assert "not within the observation space" not in proc.stderr  # the env's 'gain' is outside its box
    assert "results:" in proc.stdout


def test_egl_teardown_tracebacks_at_exit_are_filtered():
    """A MuJoCo env rendering through EGL, left for interpreter exit to clean up (as a user's script or
    a crashed stage does): its viewer's ``__del__`` fails after EGL was terminated."""
    script = (
        "from robot_rl.config import EnvConfig\n"
        "from robot_rl.sim import make_env\n"
        "env = make_env(EnvConfig(id='Reacher-v5'), render_mode='rgb_array')\n"
        "env.reset(seed=0)\n"
        "print(env.render().shape)\n"
    )
    env = {**os.environ, "MUJOCO_GL": "egl"}
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    if proc.returncode != 0:
        pytest.skip(f"no EGL rendering here: {proc.stderr.strip().splitlines()[-1:]}")
    assert "(480, 480, 3)" in proc.stdout
    assert "Exception ignored" not in proc.stderr and "EGLError" not in proc.stderr


def test_render_mode_in_env_kwargs_with_render_camera(tmp_path, capsys):
    """Issue 39: LeRobot's env recipes put ``render_mode: rgb_array`` in the env's kwargs; with
    ``env.adapter.render_camera`` eval ended in gym.make's "got multiple values for keyword argument
    'render_mode'" traceback. The same value is accepted; another one is a config error naming both."""
    from robot_rl.sim import make_env

    equal = _args(tmp_path, CAMERA, "--env.kwargs={render_mode: rgb_array}")
    env = make_env(load_config(None, equal).env)
    try:
        obs, _ = env.reset(seed=3)
        assert env.unwrapped.render_mode == "rgb_array"
        assert obs[keys.image_key("top")].shape == (IMAGE_HW[1], IMAGE_HW[0], 3)
    finally:
        env.close()
    assert main(["eval", *equal]) == 1  # past the env: no checkpoint trained here
    assert "checkpoint folder not found" in capsys.readouterr().err
    assert main(["eval", *_args(tmp_path, CAMERA, "--env.kwargs={render_mode: human}")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        "robot-rl: config error: env.kwargs.render_mode='human', but env.adapter.render_camera="
        "'observation.images.top' needs render_mode='rgb_array': set env.kwargs.render_mode to 'rgb_array' "
        "or leave it out"
    ]
    videos = load_config(None, _args(tmp_path, STATE, "--env.kwargs={render_mode: human}")).env
    with pytest.raises(
        ConfigError, match=r"this command \(it renders frames\) needs render_mode='rgb_array'"
    ):
        make_env(videos, render_mode="rgb_array")  # as `robot-rl videos` makes it
