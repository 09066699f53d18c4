"""Chunk execution: open loop and ACT-style temporal ensembling."""

import re

import numpy as np
import pytest
import torch

from robot_rl.policies import ChunkExecutor


def test_open_loop_requests_a_chunk_every_h_steps():
    ex = ChunkExecutor(horizon=3)
    calls = []

    def get_chunk():
        calls.append(len(calls))
        k = len(calls)
        return torch.arange(6, dtype=torch.float32).reshape(3, 2) + 100 * k

    actions = [ex.step(get_chunk) for _ in range(7)]
    assert len(calls) == 3  # steps 0, 3, 6
    np.testing.assert_allclose(actions[0], [100, 101])
    np.testing.assert_allclose(actions[2], [104, 105])
    np.testing.assert_allclose(actions[3], [200, 201])
    np.testing.assert_allclose(actions[6], [300, 301])
    ex.reset()
    assert ex.needs_chunk()


def test_open_loop_batched():
    ex = ChunkExecutor(horizon=2)
    ex.push(np.arange(8, dtype=np.float32).reshape(2, 2, 2))  # (B=2, h=2, d=2)
    np.testing.assert_allclose(ex.pop(), [[0, 1], [4, 5]])
    np.testing.assert_allclose(ex.pop(), [[2, 3], [6, 7]])
    with pytest.raises(RuntimeError):
        ex.pop()


def test_temporal_ensemble_weights():
    m = 0.5
    ex = ChunkExecutor(horizon=3, mode="temporal_ensemble", decay=m)
    c0 = np.array([[0.0], [1.0], [2.0]])
    c1 = np.array([[10.0], [11.0], [12.0]])
    c2 = np.array([[20.0], [21.0], [22.0]])
    c3 = np.array([[30.0], [31.0], [32.0]])
    assert ex.step(lambda: c0) == pytest.approx([0.0])
    w = np.exp(-m * np.arange(2))
    assert ex.step(lambda: c1) == pytest.approx([(w[0] * 1.0 + w[1] * 10.0) / w.sum()])
    w = np.exp(-m * np.arange(3))
    assert ex.step(lambda: c2) == pytest.approx([(w @ np.array([2.0, 11.0, 20.0])) / w.sum()])
    # c0 has expired (covers steps 0..2 only)
    assert ex.step(lambda: c3) == pytest.approx([(w @ np.array([12.0, 21.0, 30.0])) / w.sum()])


def test_executor_rejects_bad_input():
    with pytest.raises(ValueError, match="execution mode"):
        ChunkExecutor(3, mode="bogus")
    ex = ChunkExecutor(3)
    with pytest.raises(ValueError, match="chunk must be"):
        ex.push(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="NaN"):
        ex.push(np.full((3, 2), np.nan))


def test_from_config():
    from robot_rl.config import PolicyConfig

    ex = ChunkExecutor.from_config(PolicyConfig(horizon=4, execution="temporal_ensemble", ensemble_decay=0.2))
    assert (ex.horizon, ex.mode, ex.decay) == (4, "temporal_ensemble", 0.2)


def test_a_chunk_of_another_action_dim_or_outside_the_box_is_never_executed(tiny_offline_run):
    """Issue 39: a chunk of another action dimension reached the env (or numpy's broadcast error in the
    safety filter's clip), and no executor range-checked actions. With the env's action box, each executor
    refuses such a chunk whole, naming the expected and given shapes or the action and its bounds."""
    from robot_rl.algos.base import NonFiniteChunkError
    from robot_rl.checkpoint import read_config
    from robot_rl.cli.errors import explain
    from robot_rl.config import EnvConfig
    from robot_rl.executor import AsyncChunkExecutor, ChunkError
    from robot_rl.policies import load_agent
    from robot_rl.sim import make_env
    from robot_rl.sources import AgentSource

    env = make_env(EnvConfig())  # the Panda task: [dx, dy, dz] within +-0.03 m, gripper in [0, 1]
    low, high = env.action_space.low, env.action_space.high
    good = np.tile(np.array([0.01, 0.0, -0.01, 1.0], np.float32), (5, 1))
    far = good.copy()
    far[2, 0] = 1000.0
    nan = good.copy()
    nan[4, 3] = np.nan
    executors = [
        ChunkExecutor(5, low=low, high=high),
        ChunkExecutor(5, "temporal_ensemble", low=low, high=high),
        AsyncChunkExecutor(5, lead=2, low=low, high=high),
    ]
    env.reset(seed=0)
    for ex in executors:
        with pytest.raises(ChunkError, match=re.escape("chunk must be (h=5, d=4)") + r".*got \(5, 3\)"):
            ex.step(lambda: good[:, :3])
        with pytest.raises(ChunkError, match=r"chunk step 2: action\[0\] = 1000 is outside the action box "):
            ex.step(lambda: far)
        with pytest.raises(NonFiniteChunkError, match="NaN or inf"):
            ex.step(lambda: nan)
        action = ex.step(lambda: good)  # nothing of a refused chunk was kept: this one runs
        np.testing.assert_allclose(action, good[0])
        env.step(action)
        getattr(ex, "close", lambda: None)()
    env.close()
    # the safety filter in front of the executors: a checkpoint for another action space
    checkpoint = tiny_offline_run / "checkpoints" / "bc_seed0"
    agent, header = load_agent(checkpoint, evaluate=True, seed=0)
    obs_keys = header.obs_keys
    source = AgentSource(agent, obs_keys, low[:3], high[:3])
    shapes = read_config(checkpoint / "config.json")["obs_shapes"]
    obs = {k: np.zeros((1, *shapes[k]), np.float32) for k in obs_keys}
    with pytest.raises(ChunkError) as refused:
        source(obs, np.array([0]))
    line, code = explain(refused.value)
    assert code == 1 and line.startswith("robot-rl: policy error: the policy's chunks have shape (1, 5, 4)")
    assert "(B, h, d=3)" in line
