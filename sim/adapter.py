"""Bring your own environment: wrap any registered gymnasium env so it speaks robot_rl's keys.

:class:`AdapterWrapper` is driven by :class:`robot_rl.config.AdapterConfig`. Each of our observation keys
(``observation.state``, ``observation.environment_state``, ``observation.images.<cam>``) is built from one
or more foreign observation keys; ``""`` names the whole observation when the env returns a plain array.
Non-image entries are flattened and concatenated, in order, to float32; an image key takes exactly one
foreign key holding a uint8 (H, W, 3) array. The action space is the foreign one, unchanged.
``info["is_success"]`` is ``bool(info[success_key])`` (False when absent) and ``task`` is the instruction.
"""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from robot_rl import keys
from robot_rl.config import AdapterConfig


def _foreign_space(space: gym.Space, key: str) -> spaces.Box:
    if key == "":
        if not isinstance(space, spaces.Box):
            raise KeyError(f"foreign observation key '' means a plain array, but the env's space is {space}")
        return space
    if not isinstance(space, spaces.Dict) or key not in space.spaces:
        have = sorted(space.spaces) if isinstance(space, spaces.Dict) else "a plain array (use key '')"
        raise KeyError(f"unknown foreign observation key {key!r}; the env provides {have}")
    sub = space.spaces[key]
    if not isinstance(sub, spaces.Box):
        raise KeyError(f"foreign observation key {key!r} is a {type(sub).__name__}, only Box is supported")
    return sub


def _take(obs: Any, key: str) -> np.ndarray:
    if key == "":
        return np.asarray(obs)
    try:
        return np.asarray(obs[key])
    except (KeyError, TypeError, IndexError) as err:
        raise KeyError(f"unknown foreign observation key {key!r} in the env's observation") from err


class AdapterWrapper(gym.Wrapper):
    """Maps a foreign env's observations and success flag onto robot_rl's conventions.

    Args:
        env: the foreign env.
        adapter: the mapping; an empty ``observation`` mapping means ``{"observation.state": [""]}``.

    Raises:
        KeyError: a mapped foreign key does not exist in the env's observation space.
        ValueError: one of our keys is not a known LeRobot key, or an image key maps to several keys.
    """

    def __init__(self, env: gym.Env, adapter: AdapterConfig) -> None:
        super().__init__(env)
        self.adapter = adapter
        self.mapping = {k: list(v) for k, v in (adapter.observation or {keys.STATE: [""]}).items()}
        self.task = adapter.task
        obs_spaces: dict[str, spaces.Box] = {}
        for ours, foreign in self.mapping.items():
            if isinstance(foreign, str):
                foreign = self.mapping[ours] = [foreign]
            if not foreign:
                raise ValueError(f"adapter key {ours!r} maps to no foreign keys")
            subs = [_foreign_space(env.observation_space, f) for f in foreign]
            if keys.is_image_key(ours):
                if len(subs) != 1:
                    raise ValueError(f"image key {ours!r} must map to exactly one foreign key, got {foreign}")
                obs_spaces[ours] = spaces.Box(0, 255, subs[0].shape, np.uint8)
            elif ours in (keys.STATE, keys.ENV_STATE):
                low = np.concatenate([np.ravel(np.broadcast_to(s.low, s.shape)) for s in subs])
                high = np.concatenate([np.ravel(np.broadcast_to(s.high, s.shape)) for s in subs])
                obs_spaces[ours] = spaces.Box(
                    low.astype(np.float32), high.astype(np.float32), dtype=np.float32
                )
            else:
                raise ValueError(
                    f"adapter target key {ours!r} must be {keys.STATE!r}, {keys.ENV_STATE!r} "
                    f"or start with {keys.IMAGE_PREFIX!r}"
                )
        self.observation_space = spaces.Dict(obs_spaces)

    def observation(self, obs: Any) -> dict[str, np.ndarray]:
        """The foreign observation mapped to our keys."""
        out = {}
        for ours, foreign in self.mapping.items():
            if keys.is_image_key(ours):
                out[ours] = _take(obs, foreign[0]).astype(np.uint8)
            else:
                out[ours] = np.concatenate([np.ravel(_take(obs, f)) for f in foreign]).astype(np.float32)
        return out

    def _info(self, info: dict) -> dict:
        info = dict(info)
        info["is_success"] = bool(info.get(self.adapter.success_key, False))
        return info

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.observation(obs), self._info(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self.observation(obs), float(reward), bool(terminated), bool(truncated), self._info(info)


def make_foreign_env(
    env_id: str,
    module: str = "",
    adapter: AdapterConfig | None = None,
    kwargs: dict | None = None,
    render_mode: str | None = None,
) -> AdapterWrapper:
    """Import ``module`` (if set), ``gym.make(env_id, **kwargs)`` and wrap it in :class:`AdapterWrapper`.

    Raises:
        ModuleNotFoundError: ``module`` cannot be imported.
        gymnasium.error.Error: ``env_id`` is not registered (after importing ``module``).
        KeyError: the adapter names an unknown foreign observation key.
    """
    if module:
        importlib.import_module(module)
    extra = {"render_mode": render_mode} if render_mode is not None else {}
    env = gym.make(env_id, **(kwargs or {}), **extra)
    return AdapterWrapper(env, adapter or AdapterConfig())
