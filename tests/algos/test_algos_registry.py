"""The algorithm registry: methods, their config sections and builders; a new method needs one agent file
and one registration, and then builds, saves, reloads and trains like a built-in one."""

import subprocess
import sys

import pytest
import torch

from robot_rl.algos import registry
from robot_rl.algos.base import Agent
from robot_rl.algos.flow_bc import FlowBC
from robot_rl.config import (
    BCConfig,
    ConfigError,
    CORFTConfig,
    OfflineRLConfig,
    PipelineConfig,
    PolicyConfig,
    config_to_dict,
    load_config,
    section_class,
)
from robot_rl.policies import METHODS, build_agent, build_agent_from_config, load_agent, save_agent
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch, fake_obs, fake_stats

H, D = 4, SIM_ACTION_DIM
PCFG = PolicyConfig(horizon=H, hidden_dims=[32, 32])


def test_methods_come_from_the_registry():
    assert METHODS == registry.names() == ("bc", "qc", "qc_fql", "corft", "sac", "ppo", "recap")
    assert registry.algorithm("corft").sections == ("offline", "corft")
    assert [section_class(name) for name in registry.algorithm("corft").sections] == [
        OfflineRLConfig,
        CORFTConfig,
    ]
    assert registry.algorithm("corft").prefix_targets and not registry.algorithm("qc").prefix_targets
    assert registry.algorithm("recap").labels == ("next.success",)
    with pytest.raises(ValueError, match=r"unknown method 'dreamer'; expected one of \('bc', 'qc'"):
        registry.algorithm("dreamer")
    with pytest.raises(ValueError, match="'qc' is already registered"):
        registry.register(registry.algorithm("qc"))


def test_the_registry_imports_no_config_so_the_config_check_is_no_cycle():
    """``robot_rl.config`` imports the registry to check ``offline.method``; the registry names its sections
    by field and so imports no config (it did, and config reached it through importlib: a hidden cycle)."""
    code = "import sys, robot_rl.algos.registry; print(*sorted(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "robot_rl.algos.registry" in loaded
    assert "robot_rl.config" not in loaded and "torch" not in loaded


def test_agent_base_declares_the_optional_hooks():
    """Training and evaluation call these on any agent; the defaults mean 'nothing to do'."""
    agent = build_agent("bc", PCFG, BCConfig(), SIM_OBS_SHAPES, D, fake_stats())
    assert agent.prepare(None, 0) is None and agent.critic is None and not agent.deterministic
    qc = build_agent(
        "qc",
        PCFG,
        OfflineRLConfig(critic_hidden_dims=[32], reward_range=[0.0, 1.0]),
        SIM_OBS_SHAPES,
        D,
        fake_stats(),
    )
    assert qc.critic is not None


def test_unknown_section_keyword_is_refused():
    with pytest.raises(TypeError, match=r"unknown config sections \['recap'\]; qc has \[\]"):
        build_agent("qc", PCFG, OfflineRLConfig(), SIM_OBS_SHAPES, D, fake_stats(), recap_cfg=None)


class MeanBC(FlowBC):
    """A new method in one file: flow BC whose ``prepare`` reports the mean action of the data."""

    method = "mean_bc"

    def prepare(self, data, seed: int = 0) -> dict[str, float]:
        return {"mean_action": float(data["actions"].mean())}


def build_mean_bc(nets: registry.Networks, cfg: BCConfig) -> Agent:
    return MeanBC(nets.policy(), cfg)


@pytest.fixture
def mean_bc(monkeypatch):
    """``MeanBC`` registered for one test (the registry is restored afterwards)."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register(registry.Algorithm("mean_bc", ("bc",), build_mean_bc))


def test_offline_method_choices_come_from_the_registry(monkeypatch):
    """Registering an offline method (``offline=True``) makes it a valid ``offline.method`` at load, with no
    edit to robot_rl/config.py; unregistered, it is one error naming the key and the registered choices."""
    refused = r"offline\.method='mean_rl': must be one of qc, qc_fql, corft, recap$"
    with pytest.raises(ConfigError, match=refused):
        load_config(None, ["--offline.method=mean_rl"])
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    registry.register(registry.Algorithm("mean_rl", ("offline",), build_mean_bc, offline=True))
    assert registry.offline_methods() == ("qc", "qc_fql", "corft", "recap", "mean_rl")
    assert load_config(None, ["--offline.method=mean_rl"]).offline.method == "mean_rl"
    with pytest.raises(ConfigError, match=r"offline\.method='bc': must be one of .*, mean_rl$"):
        load_config(None, ["--offline.method=bc"])  # registered, but not an offline method
    monkeypatch.undo()
    with pytest.raises(ConfigError, match=refused):
        load_config(None, ["--offline.method=mean_rl"])


def test_a_registered_method_builds_saves_and_reloads(tmp_path, mean_bc):
    torch.manual_seed(0)
    cfg = PipelineConfig(policy=PCFG, bc=BCConfig(lr=3e-3))
    agent = build_agent_from_config("mean_bc", cfg, SIM_OBS_SHAPES, D, fake_stats())
    assert isinstance(agent, MeanBC) and agent.cfg.lr == 3e-3
    batch = fake_batch(8, H, seed=0)
    assert agent.prepare(batch)["mean_action"] == pytest.approx(float(batch["actions"].mean()))
    agent.update(batch)
    save_agent(tmp_path / "m", agent, config_to_dict(cfg), fake_stats(), SIM_OBS_SHAPES, D)
    loaded, header = load_agent(tmp_path / "m", evaluate=True)
    assert isinstance(loaded, MeanBC) and header.method == "mean_bc" and header.algo_config == cfg.bc
    obs, noise = fake_obs(2, seed=1), torch.randn(2, 1, H, D)
    torch.testing.assert_close(loaded.act(obs, noise), agent.act(obs, noise), rtol=0, atol=0)
