"""Every numeric and choice config key is range-checked at load: a bad value is a ConfigError naming the
dotted key, the value and the allowed range (exit 2 from the CLI), never a silent hang or a no-op run."""

import dataclasses
import re
import subprocess
import sys
import typing

import pytest
import yaml
from repo_paths import ROOT

from robot_rl.config import CameraConfig, ConfigError, EnvConfig, PipelineConfig, RobotConfig, load_config
from robot_rl.config_checks import RANGE, bounded, problems, section_problems

CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

BAD = [
    ("online.num_actors", "0", ">= 1"),
    ("online.utd_ratio", "-1", "> 0"),
    ("online.utd_ratio", "0", "> 0"),
    ("online.env_steps", "0", ">= 1"),
    ("online.demo_fraction", "1.5", "[0, 1]"),
    ("online.warmup_steps", "-1", ">= 0"),
    ("online.connect_timeout_s", "0", "> 0"),
    ("online.method", "ppo", "qc, qc_fql, sac, hg_dagger"),
    ("online.runtime", "slurm", "local, ray"),
    ("offline.gamma", "0", "(0, 1]"),
    ("offline.gamma", "1.01", "(0, 1]"),
    ("offline.gamma", ".nan", "(0, 1]"),
    ("offline.lr", "0", "> 0"),
    ("offline.tau", "2", "(0, 1]"),
    ("offline.best_of_n", "0", ">= 1"),
    ("offline.method", "iql", "qc, qc_fql"),
    ("offline.critic_agg", "max", "mean, min, min_random2"),
    ("offline.critic_hidden_dims", "[64, 0]", ">= 1"),
    ("bc.steps", "0", ">= 1"),
    ("bc.batch_size", "-4", ">= 1"),
    ("bc.lr", "-0.001", "> 0"),
    ("policy.horizon", "0", ">= 1"),
    ("policy.flow_steps", "0", ">= 1"),
    ("policy.normalization", "minmax", "mean_std, quantile"),
    ("policy.execution", "closed", "open_loop, temporal_ensemble"),
    ("env.num_envs", "0", ">= 1"),
    ("env.control_hz", "0", "> 0"),
    ("env.max_episode_steps", "0", ">= 1"),
    ("collect.num_episodes", "0", ">= 1"),
    ("collect.expert_noise", "-0.1", ">= 0"),
    ("eval.episodes_per_seed", "0", ">= 1"),
    ("eval.num_videos", "-1", ">= 0"),
    ("data.frame_cache", "disk", "auto, memory, zarr, none"),
    ("data.reward", "sparse", "dataset, episode_end"),
    ("data.num_workers", "-1", ">= 0"),
    ("data.val_every", "0", ">= 1"),
    ("data.image_size", "[4, 4]", ">= 8"),
    ("data.horizon_s", "-0.5", ">= 0"),
    ("data.prev_action_steps", "0", ">= 1"),
    ("reward_model.mismatch_frac", "1.2", "[0, 1]"),
    ("reward_model.failed_from", "1", "[0, 1)"),
    ("reward_model.kind", "gpt", "compact, vlm"),
    ("reward_model.rule", "clip", "scale, mix"),
    ("reward.done_threshold", "2", "[0, 1]"),
    ("reward.mode", "dense", "success, shaped, critic"),
    ("sac.gamma", "0", "(0, 1]"),
    ("sac.init_temperature", "0", "> 0"),
    ("sac.target_entropy", ".inf", "finite"),
    ("intervention.device", "joystick", "none, sim_human, keyboard, gamepad, spacemouse, gui"),
    ("intervention.scale", "0", "(0, 1]"),
    ("intervention.max_takeovers", "-1", ">= 0"),
    ("seeds", "[0, -1]", ">= 0"),
    ("checkpoint_every", "0", ">= 1"),
]


@pytest.mark.parametrize(("key", "value", "allowed"), BAD, ids=[f"{k}={v}" for k, v, _ in BAD])
def test_out_of_range_value_names_key_value_and_range(key, value, allowed):
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"--{key}={value}"])
    msg = str(err.value)
    assert f"{key}=" in msg and allowed in msg, msg


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["--online.address=tcp://localhost"], "online.address='tcp://localhost'"),
        (["--online.address=127.0.0.1:5560"], "online.address='127.0.0.1:5560'"),
        (["--online.address=tcp://127.0.0.1:99999"], "port 99999 is out of range"),
        (["--device=gpu"], "device='gpu'"),
        (["--seeds=[]"], "seeds=[]"),
        (["--data.image_size=[64]"], "data.image_size=[64]"),
        (["--data.prev_action_steps=1.5"], "data.prev_action_steps"),
        (
            ["--reward_model.mismatch_frac=0.5", "--reward_model.failed_frac=0.6"],
            "reward_model.mismatch_frac + ",
        ),
        (["--offline.critic_agg=min_random2", "--offline.num_critics=1"], "offline.num_critics=1"),
    ],
)
def test_cross_key_and_format_checks(overrides, needle):
    with pytest.raises(ConfigError, match=None) as err:
        load_config(None, overrides)
    assert needle in str(err.value)


@pytest.mark.parametrize(
    "override, key",
    [
        ("--data.prev_action_steps=true", "data.prev_action_steps=True"),
        ("--bc.steps=false", "bc.steps=False"),
        (
            "--env.robot.safety.workspace_low=[0.1,true,0.2]",
            "env.robot.safety.workspace_low=[0.1, True, 0.2]",
        ),
    ],
)
def test_a_boolean_for_a_number_is_refused_not_read_as_one(override, key, tmp_path):
    """YAML reads ``true`` as a boolean, which decoding would turn into 1: from an override and from a file,
    the key is named instead."""
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}: must be .*not a boolean"):
        load_config(overrides=[override])
    name, _, value = override[2:].partition("=")
    head, _, leaf = name.rpartition(".")
    tree: dict = {}
    node = tree
    for part in head.split("."):
        node = node.setdefault(part, {})
    node[leaf] = yaml.safe_load(value)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tree))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: {re.escape(key)}"):
        load_config(path)


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as err:
        load_config(None, ["--online.num_actors=0", "--online.utd_ratio=-1"])
    assert "online.num_actors=0" in str(err.value) and "online.utd_ratio=-1" in str(err.value)


@pytest.mark.parametrize(
    "address",
    ["tcp://127.0.0.1:5560", "tcp://*:5560", "tcp://learner.lan:0", "tcp://[::1]:5560", "ipc:///tmp/x"],
)
def test_valid_addresses_load(address):
    assert load_config(None, [f"--online.address={address}"]).online.address == address


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configs_and_presets_load(path):
    load_config(path)
    load_config(path, quick=True)


def _numeric_fields(cls: type, prefix: str = "") -> dict[str, dataclasses.Field]:
    out = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        sections = [hint, *typing.get_args(hint)]  # X, X | None, dict[str, X]
        section = next((h for h in sections if dataclasses.is_dataclass(h)), None)
        if section is not None:
            out.update(_numeric_fields(section, f"{prefix}{f.name}."))
        elif hint in (int, float, list[int], list[float]):
            out[f"{prefix}{f.name}"] = f
    return out


def test_every_numeric_key_declares_its_range():
    """A new int/float key (or list of them) states its range where it is declared (config_checks.bounded;
    ``bounded(x)`` for any finite number), so nobody has to remember a second list."""
    missing = [k for k, f in _numeric_fields(PipelineConfig).items() if RANGE not in f.metadata]
    assert not missing, f"declare a range with robot_rl.config_checks.bounded for {missing}"


@dataclasses.dataclass
class _Inner:
    count: int = bounded(1, ge=1)
    mode: typing.Literal["a", "b"] = "a"

    def validate(self, at: str) -> list[str]:
        return [f"{at}count={self.count}: odd"] if self.count % 2 else []


@dataclasses.dataclass
class _Outer:
    """A section declared here, not in robot_rl.config: the walker reads any section's declarations."""

    rate: float = bounded(2.0, gt=0, le=10)
    plain: float = 1.0
    sizes: list[int] = bounded(factory=lambda: [8], ge=8)
    inner: _Inner = dataclasses.field(default_factory=_Inner)
    maybe: _Inner | None = None
    named: dict[str, _Inner] = dataclasses.field(default_factory=dict)


def test_walker_reads_ranges_choices_and_validate_of_any_section():
    assert section_problems(_Outer(inner=_Inner(count=2)), "x.") == []
    bad = _Outer(
        rate=10.5,
        plain=float("nan"),
        sizes=[8, 4],
        inner=_Inner(count=2, mode="c"),
        maybe=_Inner(count=0),
        named={"cam": _Inner(count=True)},
    )
    assert section_problems(bad, "x.") == [
        "x.rate=10.5: must be a finite number in (0, 10]",
        "x.plain=nan: must be a finite number",
        "x.sizes=[8, 4]: each element must be an integer >= 8",
        "x.inner.mode='c': must be one of a, b",
        "x.maybe.count=0: must be an integer >= 1",
        "x.named.cam.count=True: must be an integer >= 1",
        "x.named.cam.count=True: odd",
    ]


def test_wrong_choice_is_reported_with_every_other_problem(tmp_path):
    """A wrong choice reaches the walker (draccus decodes every Literal leniently), so it is named in the same
    format and in the same error as a range problem; the YAML's value is kept as written."""
    path = tmp_path / "c.yaml"
    path.write_text("env:\n  adapter:\n    render_rotate: 45\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, ["--online.method=ppo", "--online.utd_ratio=-1", "--policy.kind=5"])
    msg = str(err.value)
    for needle in (
        "env.adapter.render_rotate=45: must be one of 0, 90, 180, 270",
        "online.method='ppo': must be one of qc, qc_fql, sac, hg_dagger",
        "online.utd_ratio=-1.0: must be a finite number > 0",
        "policy.kind=5: must be one of flow, vla",
    ):
        assert needle in msg, msg
    assert load_config(None, ["--env.adapter.render_rotate=90"]).env.adapter.render_rotate == 90


def test_a_section_built_in_code_is_checked_like_a_loaded_one():
    """The same walker judges a config built in code (the learner's and the drivers' checks), nested
    sections and dict values included."""
    robot = RobotConfig(driver="sim", cameras={"front": CameraConfig(driver="usb", fps=0)})
    assert problems(dataclasses.replace(PipelineConfig(), env=EnvConfig(num_envs=1, robot=robot))) == [
        "env.robot.cameras.front.driver='usb': must be one of opencv, realsense, video, sim, ros2",
        "env.robot.cameras.front.fps=0: must be a finite number > 0",
    ]


def _cli(*args):
    code = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("command", "override", "key"),
    [
        ("online", "--online.num_actors=0", "online.num_actors=0"),
        ("online", "--online.utd_ratio=-1", "online.utd_ratio=-1"),
        ("train", "--offline.gamma=1.5", "offline.gamma=1.5"),
    ],
)
def test_cli_exits_2_before_any_work(tmp_path, command, override, key):
    proc = _cli(command, f"--run_dir={tmp_path}", override)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and key in lines[0], proc.stderr
    assert not any(tmp_path.iterdir())


def test_robot_section_is_checked_when_present(tmp_path):
    path = tmp_path / "robot.yaml"
    path.write_text(
        "env:\n  num_envs: 1\n  robot:\n    driver: sim\n"
        "    cameras:\n      front: {driver: sim, source: front}\n"
    )
    assert load_config(path).env.robot.cameras["front"].source == "front"
    with pytest.raises(ConfigError, match=r"env\.robot\.cameras\.front\.fps=0"):
        load_config(path, ["--env.robot.cameras.front.fps=0"])
    with pytest.raises(ConfigError, match=r"env\.robot\.driver='kuka'"):
        load_config(path, ["--env.robot.driver=kuka"])


def test_a_robot_is_one_env_with_its_cameras_and_its_own_rules(tmp_path):
    path = tmp_path / "robot.yaml"
    path.write_text("env:\n  robot:\n    driver: sim\n")
    with pytest.raises(ConfigError, match=r"env\.num_envs=2: a robot"):
        load_config(path)
    ok = ["--env.num_envs=1"]
    assert load_config(path, ok).env.robot.success == "lifted"
    with pytest.raises(ConfigError, match=r"online\.num_actors=2: a robot"):
        load_config(path, [*ok, "--online.num_actors=2"])
    with pytest.raises(ConfigError, match=r"env\.robot\.cameras has no device for \['front'\]"):
        load_config(path, [*ok, "--env.cameras=[front]"])
    with pytest.raises(ConfigError, match=r"success_critic"):
        load_config(path, [*ok, "--env.robot.success=critic"])
    for bad in ("success=button", "reset=magic", "realtime=maybe", "home_speed=0", "home_joints=[0, .nan]"):
        key = bad.split("=")[0]
        with pytest.raises(ConfigError, match=rf"env\.robot\.{key}="):
            load_config(path, [*ok, f"--env.robot.{bad}"])
