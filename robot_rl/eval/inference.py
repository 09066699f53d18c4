"""Inference-time knobs of a trained agent that an evaluation may change: RECAP's guidance weight
``recap.cfg_beta`` (docs/algorithms.md §7), QC's best-of-N sample count ``offline.best_of_n`` (§3) and the VLA
policy's ``policy.vla.compile`` (torch.compile of its flow steps).

Precedence: a checkpoint acts with the values it was trained with (its saved config), unless the command
that evaluates it gives the key on its command line (``robot-rl eval --recap.cfg_beta=2``): that value is
set on the loaded agent. A YAML value alone does not override (the checkpoint already holds what the run's
YAML said when it trained). The eval JSON records the values in effect (``policy.inference``).

Every other ``policy.*`` key is fixed by training (the architecture, the chunk horizon, the normalisation):
given on the command line with a value other than the checkpoint's, it is a ConfigError
(:func:`check_trained_values`), not silently ignored. The execution keys ``policy.execution`` and
``policy.ensemble_decay`` are read by the evaluation itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, is_dataclass, replace
from functools import reduce
from pathlib import Path

from robot_rl.checkpoint import CONFIG_FILE, read_header
from robot_rl.config import ConfigError

INFERENCE_KEYS = ("offline.best_of_n", "offline.extraction", "recap.cfg_beta", "policy.vla.compile")
"""Every inference-time knob; an agent lists those its ``act`` reads in ``inference_knobs``; a policy sets
those it reads in its ``apply_inference(given) -> {key: value in effect}``."""


EXECUTION_KEYS = ("policy.execution", "policy.ensemble_decay")
"""``policy.*`` keys that the evaluation reads from its own config (how chunks execute)."""


def given_inference(cfg, overrides: dict[str, object]) -> dict[str, object]:
    """The inference knobs among the command line's ``overrides`` (dotted key -> raw value), with their
    validated values read from ``cfg`` (a PipelineConfig)."""
    return {key: reduce(getattr, key.split("."), cfg) for key in INFERENCE_KEYS if key in overrides}


def apply_inference(agent, given: dict[str, object]) -> dict[str, object]:
    """Set the knobs of ``given`` (dotted key -> value) that ``agent`` reads (``agent.inference_knobs``) on
    its config and those its policy reads (``policy.apply_inference``) on the policy, and return each knob
    they read with the value now in effect (``{}`` for an agent without any, e.g. flow BC on the state
    policy)."""
    knobs = agent.inference_knobs
    updates = {k.split(".")[1]: v for k, v in given.items() if k in knobs}
    if updates:
        agent.cfg = replace(agent.cfg, **updates)
    used = {k: getattr(agent.cfg, k.split(".")[1]) for k in knobs}
    if hasattr(agent.policy, "apply_inference"):  # a policy network with knobs of its own (the VLA)
        used.update(agent.policy.apply_inference(given))
    return used


def check_trained_values(cfg, overrides: dict[str, object], checkpoint: Path) -> None:
    """Refuse command-line keys that the checkpoint fixed: each key of ``overrides`` (dotted key -> raw
    value) under ``policy.``, other than :data:`INFERENCE_KEYS` and :data:`EXECUTION_KEYS`,
    whose validated value in ``cfg`` differs from the one in ``checkpoint``'s ``config.json``. The same
    value is accepted (training's flags are often passed along). The file is read only when such a key is
    given; nothing is checked when the checkpoint has no ``config.json`` (loading it then fails, naming the
    path).

    Raises:
        ConfigError: naming the key, both values, the checkpoint and the keys an evaluation can set.
        CheckpointError: the checkpoint's ``config.json`` is not valid JSON or not a format this code reads
            (naming the file).
    """
    fixed = [k for k in overrides if k.startswith("policy.") and k not in INFERENCE_KEYS + EXECUTION_KEYS]
    if not fixed or not (Path(checkpoint) / CONFIG_FILE).is_file():
        return
    saved = read_header(checkpoint).config
    for key in fixed:
        given = reduce(getattr, key.split("."), cfg)
        given = asdict(given) if is_dataclass(given) else given
        trained = reduce(lambda d, k: d.get(k) if isinstance(d, dict) else None, key.split("."), saved)
        if not _same(given, trained):
            raise ConfigError(
                f"--{key}={json.dumps(given)}: the checkpoint {checkpoint} was trained with "
                f"{key}={json.dumps(trained)}, which an evaluation cannot change; drop the flag or train "
                f"a new checkpoint (an evaluation can set {', '.join(INFERENCE_KEYS + EXECUTION_KEYS)})"
            )


def _same(given: object, trained: object) -> bool:
    """Equal, numbers up to float32 rounding (a checkpoint saves its action box as float32)."""
    if isinstance(given, list | tuple) and isinstance(trained, list | tuple):
        return len(given) == len(trained) and all(_same(a, b) for a, b in zip(given, trained, strict=True))
    if isinstance(given, dict) and isinstance(trained, dict):
        return given.keys() == trained.keys() and all(_same(v, trained[k]) for k, v in given.items())
    numbers = (int, float)
    if isinstance(given, numbers) and isinstance(trained, numbers) and not isinstance(given, bool):
        return math.isclose(given, trained, rel_tol=1e-6, abs_tol=1e-9)
    return given == trained
