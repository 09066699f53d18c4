"""Issue 38 item 2: on a dense-reward reach task where hovering just outside the success radius pays every
step, the critic learned with an absorbing success (``offline.success_value=r_max``) ranks the chunk that
ends in the success above the hovering chunk from the same state, and with ``zero`` (the old target) it
ranks hovering first. A tiny LeRobot dataset written by the project's writer, real QC training steps."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from robot_rl import keys
from robot_rl.algos.batch import batch_to_torch
from robot_rl.config import DataConfig, OfflineRLConfig, PolicyConfig
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.data.training.training_set import TrainingSet
from robot_rl.policies import build_agent
from robot_rl.training.loop import resolve_reward_range

RADIUS, HOVER = 0.1, 0.12  # success when the distance falls below RADIUS; hovering stays at HOVER
STEP, H, GAMMA = 0.1, 2, 0.9


def _episode(start: float, hover_steps: int) -> dict[str, np.ndarray]:
    """From distance ``start``, steps of -0.1 toward the goal: to success (hover_steps 0; the last frame
    has next.done and next.success), or to HOVER and then ``hover_steps`` still steps, ending by the time
    limit (no done). Dense reward 1 - distance after the step: 0.88 per hovering step."""
    d, dists, actions = start, [], []
    while True:
        a = -STEP if hover_steps == 0 or d - STEP > HOVER + 1e-6 else HOVER - d
        dists.append(d)
        actions.append(a)
        d = round(d + a, 6)
        if d < RADIUS or abs(d - HOVER) < 1e-6:
            break
    if hover_steps:
        dists += [HOVER] * hover_steps
        actions += [0.0] * hover_steps
    n = len(dists)
    after = np.array(dists[1:] + [round(dists[-1] + actions[-1], 6)], np.float32)
    done = np.zeros(n, bool)
    done[-1] = hover_steps == 0
    return {
        keys.STATE: np.stack([dists, np.square(dists)], 1).astype(np.float32),  # (n, 2)
        keys.ACTION: np.stack([actions, np.negative(actions)], 1).astype(np.float32),  # (n, 2)
        keys.REWARD: 1.0 - after,
        keys.DONE: done,
        keys.SUCCESS: done.copy(),
    }


@pytest.fixture(scope="module")
def reach(tmp_path_factory):
    root = tmp_path_factory.mktemp("reach") / "dataset"
    feats = {
        keys.STATE: {"dtype": "float32", "shape": [2]},  # distance, distance^2
        keys.ACTION: {"dtype": "float32", "shape": [2]},  # the step and its negative
        keys.REWARD: {"dtype": "float32", "shape": [1]},
        keys.DONE: {"dtype": "bool", "shape": [1]},
        keys.SUCCESS: {"dtype": "bool", "shape": [1]},
    }
    with LeRobotWriter(root, fps=10, features=feats) as writer:
        for start in (0.5, 0.6, 0.7) * 4:
            writer.add_episode(_episode(start, 0), task="reach")
            writer.add_episode(_episode(start, 30), task="reach")
    return TrainingSet(root, DataConfig(images=False), H, GAMMA, root.parent / "cache", for_rl=True)


def _q_success_and_hover(data: TrainingSet, mode: str) -> tuple[float, float]:
    torch.manual_seed(0)
    cfg = OfflineRLConfig(
        critic_hidden_dims=[64, 64], best_of_n=4, lr=3e-3, tau=0.05, gamma=GAMMA, reward_norm="scale"
    )
    cfg = resolve_reward_range(replace(cfg, success_value=mode), data.train.sampler.rewards)
    agent = build_agent(
        "qc", PolicyConfig(horizon=H, hidden_dims=[32, 32]), cfg, data.obs_shapes, 2, data.stats
    )
    for step in range(300):
        agent.update(batch_to_torch(data.sample(64, seed=0, step=step)))
    obs = {keys.STATE: torch.tensor([[0.2, 0.04]])}  # 0.2 from the goal: both chunks start here in the data
    to_success, to_hover = [[-STEP, STEP], [-STEP, STEP]], [[HOVER - 0.2, 0.2 - HOVER], [0.0, 0.0]]
    chunks = torch.tensor([to_success, to_hover])
    with torch.no_grad():
        q = agent.critic.q_agg(agent.critic(obs, agent.policy.normalize_actions(chunks[:1], obs)))
        q_hover = agent.critic.q_agg(agent.critic(obs, agent.policy.normalize_actions(chunks[1:], obs)))
    return float(q), float(q_hover)


@pytest.mark.e2e
def test_absorbing_success_ranks_the_success_above_hovering_and_zero_does_not(reach):
    # r' = r / 0.6 (rewards 0.4..1.0). Hovering: 0.88/0.6/(1 - 0.9) = 14.7 either way. The success chunk:
    # (0.9 + 0.9 * 1.0)/0.6 = 3.0 with zero, + 0.81 * (1.0/0.6)/0.1 = 16.5 with r_max
    q_success, q_hover = _q_success_and_hover(reach, "r_max")
    assert q_success > q_hover, (q_success, q_hover)
    q_success, q_hover = _q_success_and_hover(reach, "zero")
    assert q_success < q_hover, (q_success, q_hover)
