"""Policies: observation encoders, flow-matching chunk policy, FQL one-step policy and the agent registry
(``build_agent``); chunk execution (:mod:`robot_rl.executor`) and checkpoints (:mod:`robot_rl.checkpoint`)
are core modules, re-exported here."""

from robot_rl.checkpoint import check_compatible, load_checkpoint, load_extra_state, save_checkpoint
from robot_rl.executor import ChunkExecutor

from .encoders import ObservationEncoder
from .factory import (
    METHODS,
    build_agent,
    build_agent_from_config,
    build_policy,
    load_agent,
    load_policy,
    save_agent,
    warm_start_from_bc,
)
from .flow import FlowChunkPolicy
from .one_step import OneStepChunkPolicy

__all__ = [
    "METHODS",
    "ChunkExecutor",
    "FlowChunkPolicy",
    "ObservationEncoder",
    "OneStepChunkPolicy",
    "build_agent",
    "build_agent_from_config",
    "build_policy",
    "check_compatible",
    "load_agent",
    "load_checkpoint",
    "load_extra_state",
    "load_policy",
    "save_agent",
    "save_checkpoint",
    "warm_start_from_bc",
]
