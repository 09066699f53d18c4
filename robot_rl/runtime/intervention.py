"""Human interventions: what an input device reports each control step, and the arbiter that lets it win.

docs/design.md §4: a human intervention always wins over the policy; the arbiter switches to the human's
action
within one control step and truncates the current chunk. docs/algorithms.md §5: executed human actions are
recorded with ``complementary_info.is_intervention`` and intervened steps feed both replay buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

LABELS = ("success", "failure")


class DeviceError(RuntimeError):
    """An input device is missing, unsupported or was disconnected; the message names the device."""


@dataclass
class HumanInput:
    """One control step of human input.

    ``action``: float32 (d,) in the env's action units when the human drives this step, else None.
    ``label``: ``"success"`` or ``"failure"`` when the human ends the episode with that outcome, else None.
    ``stop``: an e-stop is latched: the actor executes nothing (no policy or human action), ends the
    episode and waits until the device stops reporting it (devices without an e-stop leave it False).
    """

    action: np.ndarray | None = None
    label: str | None = None
    stop: bool = False


class InterventionDevice(Protocol):
    """An input source polled once per control step by the actor (keyboard, gamepad, SpaceMouse, the
    simulated human). ``poll`` gets the current, unbatched observation (LeRobot keys) and must return
    within a fraction of a control period. ``reset(env_seed)`` starts an episode. A device that goes away
    mid-run raises :class:`DeviceError` from ``poll``; the actor then stops the episode safely.

    Optional: a device with ``observe(step_info: dict) -> None`` is handed the actor's live numbers after
    every executed step (:class:`robot_rl.runtime.live.LiveStats`), e.g. to display them; a device with
    ``instruct(task: str) -> None`` is told each episode's instruction right after ``reset``
    (:func:`start_episode`), e.g. which cube pick-colour asks for."""

    def reset(self, env_seed: int) -> None: ...

    def poll(self, obs: dict[str, np.ndarray]) -> HumanInput: ...

    def close(self) -> None: ...


def start_episode(device: InterventionDevice, env_seed: int, task: str) -> None:
    """Start ``device``'s episode: ``reset(env_seed)``, then ``instruct(task)`` when the device has it.

    Args:
        env_seed: the seed the env was reset with; task: the episode's instruction (the env's reset
            ``info["task"]``, or its fixed ``task``).
    """
    device.reset(env_seed)
    instruct = getattr(device, "instruct", None)
    if instruct is not None:
        instruct(task)
