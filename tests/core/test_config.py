"""Typed configs: YAML + overrides, precedence, and unknown keys named in the error."""

import os

import pytest
from repo_paths import ROOT

from robot_rl.config import ConfigError, PipelineConfig, load_config, parse_overrides, save_config


def test_defaults_yaml_quick_and_overrides_precedence(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("bc:\n  steps: 11\n  batch_size: 8\nenv:\n  cameras: [front]\n")
    cfg = load_config(path, ["--bc.batch_size=16", "--offline.method", "qc_fql"], quick=True)
    assert cfg.bc.steps == 1500  # quick preset beats the file
    assert cfg.bc.batch_size == 16  # override beats the file
    assert cfg.offline.method == "qc_fql"
    assert cfg.env.cameras == ["front"]
    assert cfg.policy.horizon == PipelineConfig().policy.horizon


def test_unknown_key_in_file_names_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("offline:\n  best_of_m: 4\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml.*best_of_m"):
        load_config(path)


def test_unknown_key_on_command_line_is_named():
    with pytest.raises(ConfigError, match="stepz"):
        load_config(None, ["--bc.stepz=3"])


def test_wrong_type_and_malformed_override():
    with pytest.raises(ConfigError, match="bc.steps"):
        load_config(None, ["--bc.steps=many"])
    with pytest.raises(ConfigError, match="override"):
        parse_overrides(["bc.steps=3"])
    with pytest.raises(ConfigError, match="no value"):
        parse_overrides(["--bc.steps"])


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "broken.yaml"
    bad.write_text("bc: [unclosed\n")
    with pytest.raises(ConfigError, match="broken.yaml"):
        load_config(bad)


def test_save_load_round_trip(tmp_path):
    cfg = load_config(None, ["--seeds=[4, 5]", "--env.num_envs=3"])
    save_config(cfg, tmp_path / "out.yaml")
    assert load_config(tmp_path / "out.yaml") == cfg


def test_shipped_configs_load():

    for path in sorted((ROOT / "configs").glob("*.yaml")):
        load_config(path)


def test_env_kwargs_keep_their_yaml_types(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env:\n  kwargs: {max_episode_steps: 50, reward_scale: 0.5, name: x, flag: true}\n")
    kwargs = load_config(path).env.kwargs
    assert kwargs == {"max_episode_steps": 50, "reward_scale": 0.5, "name": "x", "flag": True}
    assert type(kwargs["max_episode_steps"]) is int


def test_main_config_documents_the_dataclass_defaults():
    """One source of defaults: every value the main YAML sets is the dataclass default, so `robot-rl train`
    without --config trains what the README measured (it once used best-of-32 against the YAML's 8)."""
    import draccus
    import yaml

    from robot_rl.config import PipelineConfig

    defaults = draccus.encode(PipelineConfig())
    main_yaml = yaml.safe_load((ROOT / "configs" / "panda_pick_cube.yaml").read_text())

    def differences(tree: dict, default: dict, prefix: str = "") -> list[str]:
        out = []
        for key, value in tree.items():
            if isinstance(value, dict) and isinstance(default.get(key), dict):
                out += differences(value, default[key], f"{prefix}{key}.")
            elif default.get(key) != value:
                out.append(f"{prefix}{key}: yaml {value!r}, default {default.get(key)!r}")
        return out

    assert differences(main_yaml, defaults) == []


def test_threads_share_the_cores_among_processes(monkeypatch):
    from robot_rl.threads import thread_count

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = thread_count(0)
    assert cores >= 1 and thread_count(0, processes=cores * 4) == 1
    assert thread_count(3, processes=8) == 3
    with pytest.raises(ValueError, match="threads must be >= 0"):
        thread_count(-1)


def test_a_user_set_omp_num_threads_wins_over_the_automatic_share(monkeypatch):
    from robot_rl import threads

    monkeypatch.delenv(threads._WRITTEN, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.thread_count(0, processes=64) == 3
    assert threads.thread_count(2, processes=64) == 2  # an explicit `threads` still wins
    import torch

    before = torch.get_num_threads()
    for var in ("MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", threads._WRITTEN):  # restored after the test
        monkeypatch.setenv(var, os.environ.get(var, "1"))
    try:
        assert threads.set_threads(0, processes=64) == 3 and torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    # what set_threads wrote (here, or in a parent process) is not mistaken for the user's choice
    assert os.environ[threads._WRITTEN] == "3"
    assert threads.thread_count(0, processes=10_000) == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    with pytest.raises(ValueError, match="OMP_NUM_THREADS='many'"):
        threads.thread_count(0)


def test_the_old_critic_section_is_one_error_naming_reward_model(tmp_path):
    """The progress critic's section is ``reward_model`` (``critic`` also named the Q-critic of
    ``offline.critic_*``); the old key, in a file or on the command line, names its new spelling."""
    path = tmp_path / "old.yaml"
    path.write_text("critic:\n  steps: 10\n")
    with pytest.raises(
        ConfigError, match=r"old\.yaml: critic\.steps: the critic section is now reward_model"
    ):
        load_config(path)
    with pytest.raises(ConfigError, match=r"critic\.checkpoint: .* write reward_model\.checkpoint"):
        load_config(None, ["--critic.checkpoint=/tmp/c"])
    assert load_config(None, ["--reward_model.steps=10"]).reward_model.steps == 10
