"""Bring your own environment: wrap any registered gymnasium env so it speaks robot_rl's keys.

:class:`AdapterWrapper` is driven by :class:`robot_rl.config.AdapterConfig`. Each of our observation keys
(``observation.state``, ``observation.environment_state``, ``observation.images.<cam>``) is built from one
or more foreign observation keys; ``""`` names the whole observation when the env returns a plain array.
Non-image entries are flattened and concatenated, in order, to float32; an image key takes exactly one
foreign key holding a uint8 (H, W, 3) array. ``render_camera`` fills one image key from ``env.render()``
instead (rotated and flipped as configured), like LeRobot's gym wrappers do for envs whose camera is not in
the observation. The action space is the foreign one, unchanged. ``info["is_success"]`` is
``bool(info[success_key])`` (False when absent; a :class:`SuccessKeyWarning` when an episode ends and the
key has never appeared in ``info``) and ``task`` is the instruction. :func:`env_rate_hz` is the env's own
control rate (``adapter.fps``, else ``metadata["render_fps"]``). A mapping that does not fit the env
raises :class:`AdapterError`, a config error (the CLI prints one line and exits 2).
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from robot_rl import keys
from robot_rl.config import AdapterConfig, ConfigError


class AdapterError(ConfigError):
    """``env.adapter`` does not fit the env: an unknown foreign key, a wrong shape or type, no rate."""


class SuccessKeyWarning(UserWarning):
    """An episode ended without ``env.adapter.success_key`` ever appearing in ``info``."""


def _foreign_space(space: gym.Space, key: str) -> spaces.Box:
    if key == "":
        if not isinstance(space, spaces.Box):
            raise AdapterError(
                f"env.adapter.observation: foreign key '' means a plain array, but the env's space is {space}"
            )
        return space
    if not isinstance(space, spaces.Dict) or key not in space.spaces:
        have = sorted(space.spaces) if isinstance(space, spaces.Dict) else "a plain array (use key '')"
        raise AdapterError(
            f"env.adapter.observation: unknown foreign observation key {key!r}; the env provides {have}"
        )
    sub = space.spaces[key]
    if not isinstance(sub, spaces.Box):
        raise AdapterError(
            f"env.adapter.observation: foreign key {key!r} is a {type(sub).__name__}, only Box is supported"
        )
    return sub


def _take(obs: Any, key: str) -> np.ndarray:
    if key == "":
        return np.asarray(obs)
    try:
        return np.asarray(obs[key])
    except (KeyError, TypeError, IndexError) as err:
        raise AdapterError(
            f"env.adapter.observation: foreign key {key!r} is missing from the env's observation"
        ) from err


def _image_space(ours: str, shape: tuple[int, ...], where: str) -> spaces.Box:
    if len(shape) != 3 or shape[2] != 3:
        raise AdapterError(
            f"env.adapter: image key {ours!r} gets {where} of shape {shape}; an image must be (H, W, 3)"
        )
    return spaces.Box(0, 255, shape, np.uint8)


def transform_frame(frame: np.ndarray, flip: str = "none", rotate: int = 0) -> np.ndarray:
    """A rendered frame as the dataset's camera saw it: ``frame`` (H, W, 3) uint8 rotated by ``rotate``
    degrees counter-clockwise (0, 90, 180, 270), then flipped (``none``, ``horizontal``: left-right,
    ``vertical``: up-down, ``both``). Returns a contiguous (H', W', 3) uint8 array.

    Raises AdapterError for any other ``flip`` or ``rotate``."""
    if rotate not in (0, 90, 180, 270) or flip not in ("none", "horizontal", "vertical", "both"):
        raise AdapterError(f"env.adapter: render_rotate={rotate!r} / render_flip={flip!r} are not supported")
    out = np.rot90(frame, k=rotate // 90)
    if flip in ("horizontal", "both"):
        out = out[:, ::-1]
    if flip in ("vertical", "both"):
        out = out[::-1]
    return np.ascontiguousarray(out, dtype=np.uint8)


def env_rate_hz(
    env: gym.Env | gym.vector.VectorEnv, adapter: AdapterConfig, dataset_fps: float | None = None
) -> float:
    """The foreign env's control rate (Hz): ``adapter.fps`` when set, else ``env.metadata["render_fps"]``,
    else ``dataset_fps`` (the training dataset's fps, when known).

    Raises AdapterError when none is known (names ``env.adapter.fps``)."""
    if adapter.fps:
        return float(adapter.fps)
    fps = (getattr(env, "metadata", None) or {}).get("render_fps") or dataset_fps
    if not fps:
        spec = getattr(env, "spec", None)
        name = spec.id if spec is not None else type(env.unwrapped).__name__
        raise AdapterError(
            f"env {name} declares no metadata['render_fps']: set env.adapter.fps to its control rate (Hz), "
            "e.g. the dataset's fps"
        )
    return float(fps)


class AdapterWrapper(gym.Wrapper):
    """Maps a foreign env's observations and success flag onto robot_rl's conventions.

    Args:
        env: the foreign env (made with ``render_mode="rgb_array"`` when ``adapter.render_camera`` is set).
        adapter: the mapping; an empty ``observation`` mapping means ``{"observation.state": [""]}``
            (or nothing but the render camera when that is set).

    Raises:
        AdapterError: a mapped foreign key does not exist in the env's observation space, an image has
            not the shape (H, W, 3), one of our keys is not a known LeRobot key, an image key maps to
            several keys, or the render camera is asked of an env not rendering ``rgb_array``.
    """

    def __init__(self, env: gym.Env, adapter: AdapterConfig) -> None:
        super().__init__(env)
        self.adapter = adapter
        default = {} if adapter.render_camera else {keys.STATE: [""]}
        self.mapping = {k: list(v) for k, v in (adapter.observation or default).items()}
        self.task = adapter.task
        obs_spaces: dict[str, spaces.Box] = {}
        for ours, foreign in self.mapping.items():
            if isinstance(foreign, str):
                foreign = self.mapping[ours] = [foreign]
            if not foreign:
                raise AdapterError(f"env.adapter.observation: key {ours!r} maps to no foreign keys")
            subs = [_foreign_space(env.observation_space, f) for f in foreign]
            if keys.is_image_key(ours):
                if len(subs) != 1:
                    raise AdapterError(
                        f"env.adapter.observation: image key {ours!r} must map to exactly one foreign key, "
                        f"got {foreign}"
                    )
                obs_spaces[ours] = _image_space(ours, subs[0].shape, f"foreign key {foreign[0]!r}")
            elif ours in (keys.STATE, keys.ENV_STATE):
                low = np.concatenate([np.ravel(np.broadcast_to(s.low, s.shape)) for s in subs])
                high = np.concatenate([np.ravel(np.broadcast_to(s.high, s.shape)) for s in subs])
                obs_spaces[ours] = spaces.Box(
                    low.astype(np.float32), high.astype(np.float32), dtype=np.float32
                )
            else:
                raise AdapterError(
                    f"env.adapter.observation: target key {ours!r} must be {keys.STATE!r}, "
                    f"{keys.ENV_STATE!r} or start with {keys.IMAGE_PREFIX!r}"
                )
        if adapter.render_camera:
            obs_spaces[adapter.render_camera] = self._render_space()
        self.observation_space = spaces.Dict(obs_spaces)
        self._key_seen = False
        self._warned = False

    def _render_space(self) -> spaces.Box:
        cam = self.adapter.render_camera
        if self.env.render_mode != "rgb_array":
            raise AdapterError(
                f"env.adapter.render_camera={cam!r} needs the env made with render_mode='rgb_array', "
                f"got {self.env.render_mode!r}"
            )
        self.env.reset()  # many envs render only after a reset; the rollout resets with its seed anyway
        frame = self._render_frame()
        return _image_space(cam, frame.shape, "env.render()")

    def _render_frame(self) -> np.ndarray:
        frame = self.env.render()
        if not isinstance(frame, np.ndarray) or frame.ndim != 3:
            raise AdapterError(
                f"env.adapter.render_camera={self.adapter.render_camera!r}: env.render() returned "
                f"{type(frame).__name__} {getattr(frame, 'shape', '')}, not an (H, W, 3) image"
            )
        return transform_frame(frame, self.adapter.render_flip, self.adapter.render_rotate)

    def observation(self, obs: Any) -> dict[str, np.ndarray]:
        """The foreign observation mapped to our keys (shapes as in ``observation_space``).

        Raises AdapterError when a value's size differs from the declared space's."""
        out = {}
        for ours, foreign in self.mapping.items():
            if keys.is_image_key(ours):
                out[ours] = _take(obs, foreign[0]).astype(np.uint8)
            else:
                out[ours] = np.concatenate([np.ravel(_take(obs, f)) for f in foreign]).astype(np.float32)
        if self.adapter.render_camera:
            out[self.adapter.render_camera] = self._render_frame()
        for ours, value in out.items():
            want = self.observation_space.spaces[ours].shape
            if value.shape != want:
                raise AdapterError(
                    f"env.adapter: {ours!r} has shape {value.shape} in this observation but {want} in the "
                    f"env's observation space; map foreign keys whose values match their declared spaces"
                )
        return out

    def _info(self, info: dict) -> dict:
        info = dict(info)
        key = self.adapter.success_key
        if key:
            self._key_seen = self._key_seen or key in info
        info["is_success"] = bool(info.get(key, False)) if key else False
        return info

    def _check_success_key(self, info: dict) -> None:
        if self._key_seen or self._warned or not self.adapter.success_key:
            return
        self._warned = True
        name = self.spec.id if self.spec is not None else type(self.unwrapped).__name__
        warnings.warn(
            f"env.adapter.success_key={self.adapter.success_key!r} has not appeared in info during any "
            f"episode of {name} so far (info keys: {sorted(k for k in info if k != 'is_success')}); every "
            "episode counts as a failure. Set env.adapter.success_key to the key the env reports, or '' if "
            "it reports none",
            SuccessKeyWarning,
            stacklevel=2,
        )

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self.observation(obs), self._info(info)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = self._info(info)
        if terminated or truncated:
            self._check_success_key(info)
        return self.observation(obs), float(reward), bool(terminated), bool(truncated), info


def make_foreign_env(
    env_id: str,
    module: str = "",
    adapter: AdapterConfig | None = None,
    kwargs: dict | None = None,
    render_mode: str | None = None,
) -> AdapterWrapper:
    """Import ``module`` (if set), ``gym.make(env_id, **kwargs)`` and wrap it in :class:`AdapterWrapper`.
    With ``adapter.render_camera`` the env is made with ``render_mode="rgb_array"``. A ``render_mode`` in
    ``kwargs`` (LeRobot's env recipes set ``rgb_array``) is used when nothing else asks for one and accepted
    when it equals what is asked (by ``render_camera`` or the ``render_mode`` argument).

    Raises:
        ModuleNotFoundError: ``module`` cannot be imported.
        gymnasium.error.Error: ``env_id`` is not registered (after importing ``module``).
        AdapterError: the adapter does not fit the env (unknown foreign key, wrong shape; names it),
            ``render_mode`` is not ``rgb_array`` while ``adapter.render_camera`` is set, or
            ``kwargs["render_mode"]`` differs from the one asked (names both).
    """
    adapter = adapter or AdapterConfig()
    if module:
        importlib.import_module(module)
    if adapter.render_camera:
        if render_mode not in (None, "rgb_array"):
            raise AdapterError(
                f"env.adapter.render_camera needs render_mode='rgb_array', not {render_mode!r}"
            )
        render_mode = "rgb_array"
    kwargs = dict(kwargs or {})
    if "render_mode" in kwargs:
        given = kwargs.pop("render_mode")
        if render_mode is not None and given != render_mode:
            who = (
                f"env.adapter.render_camera={adapter.render_camera!r}"
                if adapter.render_camera
                else "this command (it renders frames)"
            )
            raise AdapterError(
                f"env.kwargs.render_mode={given!r}, but {who} needs render_mode={render_mode!r}: set "
                f"env.kwargs.render_mode to {render_mode!r} or leave it out"
            )
        render_mode = given
    extra = {"render_mode": render_mode} if render_mode is not None else {}
    env = gym.make(env_id, **kwargs, **extra)
    return AdapterWrapper(env, adapter)
