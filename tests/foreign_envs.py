"""A third-party env as a new user brings it: registered on import (``--env.module=foreign_envs`` with
``tests/`` on the path), running at 25 Hz (``metadata["render_fps"]``, not robot_rl's 10 Hz default),
reporting ``info["success"]`` (not ``is_success``), returning an observation outside its declared space
(as many third-party envs do) and showing its camera only through ``env.render()``."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

ENV_ID = "foreign_envs/ToyReach-v0"
RENDER_FPS = 25
IMAGE_HW = (12, 20)


class ToyReach(gym.Env):
    """Move a point towards a goal in 2-D. Observation ``{"pos": (2,), "goal": (2,), "gain": (1,)}``
    (``gain`` is 5.0, outside its declared box [-1, 1]); action (2,) in [-1, 1], the point moves by
    0.1 * action. The episode succeeds (terminates, ``info["success"]``) at step ``3 + env_seed % 4``;
    the reward is minus the distance, so returns depend on every action. ``render()`` is an (12, 20, 3)
    image with a white marker at the top-left pixel and the point's position in the other pixels.
    ``render_fps=None`` leaves the rate out of ``metadata``."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": RENDER_FPS}

    def __init__(self, render_mode: str | None = None, render_fps: int | None = RENDER_FPS) -> None:
        self.render_mode = render_mode
        if render_fps is None:  # an env that does not declare its rate
            self.metadata = {"render_modes": ["rgb_array"]}
        box = spaces.Box(-1.0, 1.0, (2,), np.float64)
        self.observation_space = spaces.Dict({"pos": box, "goal": box, "gain": spaces.Box(-1.0, 1.0, (1,))})
        self.action_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.pos = np.zeros(2)
        self.goal = np.zeros(2)
        self.t, self.success_at = 0, 3

    def _obs(self) -> dict:
        return {"pos": self.pos.copy(), "goal": self.goal.copy(), "gain": np.array([5.0], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-0.5, 0.5, 2)
        self.goal = self.np_random.uniform(-0.5, 0.5, 2)
        self.t = 0
        self.success_at = 3 + (seed if seed is not None else 0) % 4
        return self._obs(), {}

    def step(self, action):
        self.pos = self.pos + 0.1 * np.clip(np.asarray(action, np.float64), -1, 1)
        self.t += 1
        success = self.t >= self.success_at
        reward = -float(np.linalg.norm(self.pos - self.goal))
        return self._obs(), reward, success, False, {"success": success}

    def render(self) -> np.ndarray:
        frame = np.zeros((*IMAGE_HW, 3), np.uint8)
        frame[..., 0] = np.uint8(127 + 100 * np.clip(self.pos[0], -1, 1))
        frame[..., 1] = np.uint8(127 + 100 * np.clip(self.pos[1], -1, 1))
        frame[0, 0] = 255
        return frame


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=ToyReach, max_episode_steps=20)
