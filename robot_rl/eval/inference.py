"""Inference-time knobs of a trained agent that an evaluation may change: RECAP's guidance weight
``recap.cfg_beta`` (ALGORITHMS.md §7), QC's best-of-N sample count ``offline.best_of_n`` (§3) and the VLA
policy's ``policy.vla.compile`` (torch.compile of its flow steps).

Precedence: a checkpoint acts with the values it was trained with (its saved config), unless the command
that evaluates it gives the key on its command line (``robot-rl eval --recap.cfg_beta=2``): that value is
set on the loaded agent. A YAML value alone does not override (the checkpoint already holds what the run's
YAML said when it trained). The eval JSON records the values in effect (``policy.inference``).
"""

from __future__ import annotations

from dataclasses import replace
from functools import reduce

INFERENCE_KEYS = ("offline.best_of_n", "recap.cfg_beta", "policy.vla.compile")
"""Every inference-time knob; an agent lists those its ``act`` reads in ``inference_knobs``; a policy sets
those it reads in its ``apply_inference(given) -> {key: value in effect}``."""


def given_inference(cfg, overrides: dict[str, object]) -> dict[str, object]:
    """The inference knobs among the command line's ``overrides`` (dotted key -> raw value), with their
    validated values read from ``cfg`` (a PipelineConfig)."""
    return {key: reduce(getattr, key.split("."), cfg) for key in INFERENCE_KEYS if key in overrides}


def apply_inference(agent, given: dict[str, object]) -> dict[str, object]:
    """Set the knobs of ``given`` (dotted key -> value) that ``agent`` reads (``agent.inference_knobs``) on
    its config and those its policy reads (``policy.apply_inference``) on the policy, and return each knob
    they read with the value now in effect (``{}`` for an agent without any, e.g. flow BC on the state
    policy)."""
    knobs = tuple(getattr(agent, "inference_knobs", ()))
    updates = {k.split(".")[1]: v for k, v in given.items() if k in knobs}
    if updates:
        agent.cfg = replace(agent.cfg, **updates)
    used = {k: getattr(agent.cfg, k.split(".")[1]) for k in knobs}
    policy = getattr(agent, "policy", None)
    if hasattr(policy, "apply_inference"):
        used.update(policy.apply_inference(given))
    return used
