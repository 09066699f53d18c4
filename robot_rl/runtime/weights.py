"""Agent weights as safetensors bytes: what the learner publishes and actors swap in (no pickle)."""

from __future__ import annotations

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from robot_rl.transport import ProtocolError


class NonFiniteWeightsError(ValueError):
    """The learner's weights hold NaN or inf; they are never published to actors."""


def agent_weights(agent) -> bytes:
    """Every module's state dict as safetensors bytes, keys ``<module>.<param>`` (the layout of a
    checkpoint's ``model.safetensors``).

    Raises:
        NonFiniteWeightsError: a floating-point tensor holds NaN or inf (names the first one), so a diverged
            learner never sends actors a policy that would only produce NaN actions.
    """
    flat = {
        f"{name}.{key}": value.detach().cpu().clone()
        for name, module in agent.modules().items()
        for key, value in module.state_dict().items()
    }
    for key, value in flat.items():
        if value.is_floating_point() and not torch.isfinite(value).all():
            raise NonFiniteWeightsError(
                f"learner weights {key!r} hold NaN or inf: training diverged; not publishing them (the last "
                "finite weights stay with the actors and in the last checkpoint)"
            )
    return st_save(flat)


def load_weights(agent, blob: bytes) -> None:
    """Load :func:`agent_weights` bytes into ``agent`` (every module, strict).

    Raises:
        ProtocolError: the bytes are not safetensors, or do not fit the agent (names the module).
    """
    try:
        flat = st_load(bytes(blob))
    except Exception as err:  # safetensors raises its own error type on garbage
        raise ProtocolError(f"weights are not a safetensors blob: {err}") from err
    per_module: dict[str, dict] = {}
    for key, value in flat.items():
        name, _, rest = key.partition(".")
        per_module.setdefault(name, {})[rest] = value
    for name, module in agent.modules().items():
        try:
            module.load_state_dict(per_module[name], strict=True)
        except (KeyError, RuntimeError) as err:
            raise ProtocolError(f"published weights do not fit this actor's module {name!r}: {err}") from err
