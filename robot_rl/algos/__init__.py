"""Algorithms (core): flow BC, QC best-of-N, QC-FQL, CO-RFT, SAC (HIL-SERL), π_RL flow PPO, chunked critic and
targets.

This package never imports ``robot_rl.policies``; agents receive their networks as constructor arguments
(see :mod:`robot_rl.algos.protocols`). Each method registers its config sections and builder in
:mod:`robot_rl.algos.registry` (the built-in builders are in :mod:`robot_rl.algos.builtin`);
``robot_rl.policies.factory.build_agent`` wires them together. Names are imported lazily so that the
registry, which the config check of ``offline.method`` reads, loads no torch.
"""

from __future__ import annotations

from robot_rl.lazy import lazy_getattr

_EXPORTS = {
    "CORFTAgent": "robot_rl.algos.corft",
    "ChunkCritic": "robot_rl.algos.critic",
    "FlowBC": "robot_rl.algos.flow_bc",
    "FlowPPOAgent": "robot_rl.algos.flow_ppo",
    "QCAgent": "robot_rl.algos.qc",
    "PrefixChunkCritic": "robot_rl.algos.corft",
    "QCFQLAgent": "robot_rl.algos.fql",
    "SACAgent": "robot_rl.algos.sac",
    "aggregate_q": "robot_rl.algos.critic",
    "batch_to_torch": "robot_rl.algos.batch",
    "best_of_n": "robot_rl.algos.qc",
    "chunk_gae": "robot_rl.algos.flow_ppo",
    "masked_critic_loss": "robot_rl.algos.targets",
    "polyak_update": "robot_rl.algos.critic",
    "prefix_targets": "robot_rl.algos.targets",
    "qc_target": "robot_rl.algos.targets",
}
__all__ = list(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
