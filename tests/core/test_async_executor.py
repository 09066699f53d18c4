"""AsyncChunkExecutor: the next chunk is inferred in a worker thread while the current one runs; its
elapsed prefix is dropped and it is cross-faded into what is left (robot_rl/executor.py)."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from robot_rl.config import DeployConfig, PipelineConfig
from robot_rl.config_checks import problems
from robot_rl.executor import AsyncChunkExecutor, align_chunk


class Counter:
    """get_chunk whose call k returns the (h, 1) chunk [100 k, 100 k + 1, ...], after ``delay_s``."""

    def __init__(self, horizon: int, delay_s: float = 0.0) -> None:
        self.horizon, self.delay_s, self.calls = horizon, delay_s, 0

    def __call__(self) -> np.ndarray:
        k, self.calls = self.calls, self.calls + 1
        time.sleep(self.delay_s)
        return (100.0 * k + np.arange(self.horizon, dtype=np.float32))[:, None]


def test_align_chunk_drops_the_elapsed_prefix_and_cross_fades():
    old = np.array([[10.0], [20.0]], np.float32)
    new = np.arange(5, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(align_chunk(old, new, 2, 0)[:, 0], [2, 3, 4])
    # n = min(blend=2, remaining=2, 3) = 2: w = 1/3, 2/3
    out = align_chunk(old, new, 2, 2)[:, 0]
    np.testing.assert_allclose(out, [10 * 2 / 3 + 2 / 3, 20 / 3 + 3 * 2 / 3, 4], rtol=1e-6)
    np.testing.assert_array_equal(align_chunk(old[:0], new, 1, 3)[:, 0], [1, 2, 3, 4])  # nothing left
    with pytest.raises(ValueError, match="elapsed must be in"):
        align_chunk(old, new, 5, 0)


def test_schedule_with_fast_inference():
    """h = 4, lead 2, a loop that sleeps between steps (the chunk is back by the next step): inference of
    call k starts at step 2k; its chunk arrives one step later and its first action is dropped."""
    ex = AsyncChunkExecutor(4, lead=2)
    policy = Counter(4)
    actions = []
    for _ in range(9):
        actions.append(float(ex.step(policy)[0]))
        time.sleep(0.02)
    ex.close()
    assert actions == [0, 1, 2, 101, 102, 201, 202, 301, 302]
    assert ex.stalls == 0


def test_slow_inference_waits_when_the_chunk_runs_out_and_aligns():
    """Inference slower than the loop: the step that finds the queue empty waits (a stall), and the new
    chunk is aligned to the lead steps executed since its observation."""
    ex = AsyncChunkExecutor(4, lead=2)
    policy = Counter(4, delay_s=0.1)
    actions = [float(ex.step(policy)[0]) for _ in range(5)]
    ex.close()
    assert actions == [0, 1, 2, 3, 102]  # call 1 started at step 2, collected at step 4: elapsed 2
    assert ex.stalls == 1 and ex.wait_s > 0.05


def test_errors_surface_in_the_loop():
    def broken():
        raise ConnectionError("policy server tcp://127.0.0.1:1 did not answer")

    ex = AsyncChunkExecutor(3, lead=1)
    with pytest.raises(ConnectionError, match="tcp://127.0.0.1:1"):
        ex.step(broken)  # the first chunk is synchronous
    ex.step(Counter(3))  # [0, 1, 2]: executes 0
    ex.step(broken)  # executes 1
    ex.step(broken)  # one action left: starts the failing inference, executes 2
    with pytest.raises(ConnectionError, match="did not answer"):
        ex.step(broken)  # collects it
    ex.close()
    with pytest.raises(ValueError, match=r"chunk must be \(h=3, d\)"):
        AsyncChunkExecutor(3, lead=1).step(lambda: np.zeros((2, 1), np.float32))
    slow = AsyncChunkExecutor(2, lead=1, timeout_s=0.05)
    slow.step(Counter(2))
    slow.step(Counter(2, delay_s=0.5))  # started in the worker
    with pytest.raises(TimeoutError, match="no chunk within 0.05 s"):
        slow.step(Counter(2))
    slow.close()


@pytest.mark.parametrize(
    ("horizon", "lead", "blend"), [(1, 1, 0), (4, 0, 0), (4, 4, 0), (4, 2, 3), (4, 2, -1)]
)
def test_bad_parameters(horizon, lead, blend):
    with pytest.raises(ValueError):
        AsyncChunkExecutor(horizon, lead, blend)


@pytest.mark.parametrize(
    ("deploy", "message"),
    [
        (DeployConfig(async_lead=5), "deploy.async_lead=5: must be < policy.horizon=5"),
        (DeployConfig(async_lead=2, async_blend=3), "deploy.async_blend=3: must be <= deploy.async_lead=2"),
        (DeployConfig(async_lead=-1), "deploy.async_lead=-1: must be an integer >= 0"),
        (DeployConfig(timeout_s=0.0), "deploy.timeout_s=0.0: must be a finite number > 0"),
        (DeployConfig(server="localhost:5580"), "deploy.server='localhost:5580': expected tcp://"),
    ],
)
def test_deploy_config_checks(deploy, message):
    found = problems(replace(PipelineConfig(), deploy=deploy))
    assert any(message in p for p in found), found
    assert not problems(replace(PipelineConfig(), deploy=DeployConfig(async_lead=4, async_blend=2)))
