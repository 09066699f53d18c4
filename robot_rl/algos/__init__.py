"""Algorithms (core): flow BC, QC best-of-N, QC-FQL, CO-RFT, SAC (HIL-SERL), π_RL flow PPO, chunked critic and
targets.

This package never imports ``robot_rl.policies`` at module level; agents receive their networks as
constructor arguments (see :mod:`robot_rl.algos.protocols`). Each method registers its config sections and
builder in :mod:`robot_rl.algos.registry` (the built-in ones in :mod:`robot_rl.algos.builtin`);
``robot_rl.policies.factory.build_agent`` wires them together.
"""

from robot_rl.algos.batch import batch_to_torch
from robot_rl.algos.corft import CORFTAgent, PrefixChunkCritic
from robot_rl.algos.critic import ChunkCritic, aggregate_q, polyak_update
from robot_rl.algos.flow_bc import FlowBC
from robot_rl.algos.flow_ppo import FlowPPOAgent, chunk_gae
from robot_rl.algos.fql import QCFQLAgent
from robot_rl.algos.qc import QCAgent, best_of_n
from robot_rl.algos.sac import SACAgent
from robot_rl.algos.targets import masked_critic_loss, prefix_targets, qc_target

# registers the built-in methods; importing any robot_rl.algos module runs this first
from robot_rl.algos import builtin  # noqa: E402, F401  isort: skip

__all__ = [
    "CORFTAgent",
    "ChunkCritic",
    "FlowBC",
    "FlowPPOAgent",
    "QCAgent",
    "PrefixChunkCritic",
    "QCFQLAgent",
    "SACAgent",
    "aggregate_q",
    "batch_to_torch",
    "best_of_n",
    "chunk_gae",
    "masked_critic_loss",
    "polyak_update",
    "prefix_targets",
    "qc_target",
]
