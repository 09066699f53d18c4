"""The data chunk sampler -> batch_to_torch -> each agent's update, act, checkpoint round trip."""

import numpy as np
import pytest
import torch

from robot_rl import keys
from robot_rl.algos import batch_to_torch
from robot_rl.config import BCConfig, OfflineRLConfig, PipelineConfig, PolicyConfig, config_to_dict
from robot_rl.data.normalize import compute_stats
from robot_rl.policies import build_agent_from_config, load_agent, save_agent, warm_start_from_bc
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES

sampler_mod = pytest.importorskip("robot_rl.data.training.sampler")


def _dataset(n_eps=6, length=12, seed=0):
    rng = np.random.default_rng(seed)
    n = n_eps * length
    arrays = {k: rng.normal(size=(n, *s)).astype(np.float32) for k, s in SIM_OBS_SHAPES.items()}
    arrays[keys.ACTION] = rng.uniform(-1, 1, size=(n, SIM_ACTION_DIM)).astype(np.float32)
    arrays[keys.REWARD] = rng.uniform(size=n).astype(np.float32)
    done = np.zeros(n, bool)
    done[length - 1 :: length] = True
    arrays[keys.DONE] = done
    arrays[keys.EPISODE_INDEX] = np.repeat(np.arange(n_eps), length)
    return arrays


@pytest.mark.parametrize("method", ["qc", "qc_fql"])
def test_sampler_to_agents(tmp_path, method):
    torch.manual_seed(0)
    arrays = _dataset()
    obs_keys = sorted(SIM_OBS_SHAPES)
    stats = compute_stats({k: arrays[k] for k in [*obs_keys, keys.ACTION]})
    cfg = PipelineConfig(
        policy=PolicyConfig(horizon=5, hidden_dims=[32, 32]),
        bc=BCConfig(lr=1e-3),
        offline=OfflineRLConfig(
            method=method, critic_hidden_dims=[32, 32], best_of_n=4, reward_range=[0.0, 1.0]
        ),
    )
    sampler = sampler_mod.ChunkSampler(arrays, arrays[keys.EPISODE_INDEX], obs_keys, 5, cfg.offline.gamma)
    rng = np.random.default_rng(0)
    bc = build_agent_from_config("bc", cfg, SIM_OBS_SHAPES, SIM_ACTION_DIM, stats)
    for _ in range(3):
        bc.update(batch_to_torch(sampler.sample(16, rng)))
    save_agent(tmp_path / "bc", bc, config_to_dict(cfg), stats, SIM_OBS_SHAPES, SIM_ACTION_DIM)
    agent = build_agent_from_config(method, cfg, SIM_OBS_SHAPES, SIM_ACTION_DIM, stats)
    warm_start_from_bc(agent, tmp_path / "bc")
    for _ in range(3):
        m = agent.update(batch_to_torch(sampler.sample(16, rng)))
        assert all(np.isfinite(list(m.values())))
    save_agent(tmp_path / method, agent, config_to_dict(cfg), stats, SIM_OBS_SHAPES, SIM_ACTION_DIM)
    loaded, _ = load_agent(tmp_path / method)
    obs = batch_to_torch(sampler.sample(3, rng))["observations"]
    a = loaded.act(obs)
    assert a.shape == (3, 5, SIM_ACTION_DIM) and torch.isfinite(a).all()
