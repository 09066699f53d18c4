"""``maniskill`` backend of :class:`~robot_rl.sim.batched.BatchedEnv`: ManiSkill3's own tasks
(``PickCube-v1``, ``PushCube-v1``, ``StackCube-v1``, ...) on SAPIEN's PhysX, behind the batched API.

Source: Tao et al. 2025, "ManiSkill3: GPU Parallelized Robotics Simulation and Rendering for Generalizable
Embodied AI" (the tasks, their rewards, success checks and controllers are ManiSkill's own code).

- **Simulation:** ``physx_cpu``, one ManiSkill env per batched env (ManiSkill's CPU backend holds one env
  per scene), stepped in the calling thread. ``physx_cuda`` (all N envs in one GPU scene) is refused: no GPU
  was available to test it.
- **Observations** (ManiSkill's ``state_dict``, flattened in ManiSkill's own key order):
  ``observation.state`` float32 (N, S) is the robot: every ``agent`` entry (Panda: ``qpos`` (9) rad/m,
  ``qvel`` (9)) and ``extra.tcp_pose`` (7: position m, quaternion wxyz), S = 25 for the Panda;
  ``observation.environment_state`` float32 (N, E) is every other ``extra`` entry (``PickCube-v1``:
  ``is_grasped`` (1), ``goal_pos`` (3), ``obj_pose`` (7), ``tcp_to_obj_pos`` (3), ``obj_to_goal_pos`` (3);
  E = 17).
- **Cameras:** ``env.cameras`` names ManiSkill sensors of the task (``PickCube-v1``: ``base_camera``); each
  gives ``observation.images.<name>`` uint8 (N, S, S, 3), S = ``env.image_size``, rendered by SAPIEN
  (ManiSkill's ``obs_mode="state_dict+rgb"``, so the state keys above stay whole: the images are added, the
  privileged object state is not withheld, as for the built-in tasks). Rendering does not change the
  physics: the same seeds and actions give the same states with and without cameras (tested).
- **Actions:** ManiSkill's controller (default ``pd_ee_delta_pos``: (N, 4) in [-1, 1], end-effector delta
  position and gripper, normalised by ManiSkill), float32.
- **Rate:** ManiSkill's control frequency (``PickCube-v1``: 20 Hz) as ``metadata["render_fps"]``, the
  rate ``collect`` writes and cycle times divide by (``env.control_hz`` is not used).
- **Reward and ends:** ManiSkill's ``reward_mode`` (default ``sparse``: 1.0 on success), its success check as
  ``info["is_success"]`` (the episode terminates on success, as ManiSkill's tasks do) and its own horizon
  (``PickCube-v1``: 50 steps) as truncation. ``sim_unstable`` marks a non-finite observation.
- **Seeds:** ``reset(seed=[s_0, ...])`` resets env ``i`` with ManiSkill's ``reset(seed=s_i)``, so its first
  episode is exactly a single ManiSkill env's for that seed; each later episode of env ``i`` is reset with a
  seed drawn from ``numpy.random.default_rng(s_i)``, reproducible from ``s_i`` alone.

``env.kwargs`` go to ``gym.make`` (e.g. ``control_mode``, ``reward_mode``, ``robot_uids``,
``sensor_configs``); ``obs_mode`` is fixed (``state_dict``, with cameras ``state_dict+rgb``). ManiSkill
needs a Vulkan driver even without cameras: a GPU's, or on a CPU Mesa's lavapipe from Mesa >= 23 (older
ones are refused by SAPIEN). When neither ``VK_DRIVER_FILES`` nor ``VK_ICD_FILENAMES`` is set, the
lavapipe that ``./setup.sh test`` puts into the venv (:data:`VENV_ICD`) is used.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from robot_rl import keys
from robot_rl.config import EnvConfig
from robot_rl.extras import require
from robot_rl.sim.batched import BatchedEnv, check_actions, seed_list

VENV_ICD = Path(sys.prefix) / "share" / "robot_rl" / "vulkan" / "lvp_icd.json"
"""Mesa lavapipe (CPU Vulkan) ICD file that ``setup.sh test`` installs into the venv."""

INSTRUCTIONS = {
    "PickCube-v1": "Pick up the red cube and move it to the green goal.",
    "PushCube-v1": "Push the cube to the red and white target.",
    "StackCube-v1": "Stack the red cube on the green cube.",
    "PullCube-v1": "Pull the cube to the red and white target.",
    "PokeCube-v1": "Use the peg to push the cube to the goal.",
    "LiftPegUpright-v1": "Lift the peg upright.",
}
"""The ``task`` string of ManiSkill tasks (from their documented descriptions); other ids use the id."""

DEFAULTS = {
    "control_mode": "pd_ee_delta_pos",
    "reward_mode": "sparse",
    "sim_backend": "physx_cpu",
    "render_backend": "sapien_cpu",
}
RENDER_SIZE = 128
"""Side (pixels) of ``render()`` frames, as the built-in tasks' (the report's videos)."""
_NO_VULKAN = ("failed to find a rendering device", "Failed to find a supported physical device")


def use_venv_vulkan() -> None:
    """Point the Vulkan loader at :data:`VENV_ICD` unless the user chose a driver (``VK_DRIVER_FILES`` or
    ``VK_ICD_FILENAMES``) or it is absent. Call before SAPIEN creates its Vulkan instance."""
    if os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES") or not VENV_ICD.is_file():
        return
    os.environ["VK_DRIVER_FILES"] = str(VENV_ICD)


class ManiSkillBatchedEnv(BatchedEnv):
    """N ManiSkill3 envs of one task (``cfg.id``, e.g. ``PickCube-v1``) behind the batched API (module
    docstring for keys, units, seeds and ends).

    Args:
        cfg: env config: ``id`` a ManiSkill task id; ``kwargs`` for ``gym.make``; ``cameras`` (ManiSkill
            sensor names) and ``image_size`` (pixels); no robot or ``spawn_region``.
        num_envs: N.
        render_mode: ``None`` or ``"rgb_array"``: ManiSkill's own render camera, :data:`RENDER_SIZE` px
            (``envs[i].render()``; :meth:`ManiSkillEnv.render` for one env).

    Raises:
        MissingExtraError: ManiSkill is not installed (names ``pip install 'robot-rl[maniskill]'``).
        ValueError: a built-in or unknown id, a camera the task does not have, a robot, ``spawn_region``,
            an ``obs_mode`` given in ``kwargs`` other than ``state_dict``, or a ``sim_backend`` other than
            ``physx_cpu``.
        RuntimeError: SAPIEN found no Vulkan driver (the message says how to get one).
    """

    def __init__(self, cfg: EnvConfig, num_envs: int, render_mode: str | None = None) -> None:
        require("mani_skill", "env.backend=maniskill", "pip install 'robot-rl[maniskill]'")
        if cfg.id.startswith("robot_rl/"):
            raise ValueError(
                f"env.backend=maniskill runs ManiSkill3's own tasks (e.g. PickCube-v1), not {cfg.id!r}: "
                "the built-in tasks run on env.backend=mujoco_cpu or gym_vector"
            )
        if cfg.robot is not None or cfg.spawn_region:
            raise ValueError(
                "env.backend=maniskill runs ManiSkill's simulated tasks as they are: env.robot and "
                "env.spawn_region must be unset"
            )
        kwargs = {**DEFAULTS, **cfg.kwargs}
        if kwargs.get("obs_mode", "state_dict") != "state_dict":
            raise ValueError(
                f"env.kwargs.obs_mode={kwargs['obs_mode']!r}: the maniskill backend reads state_dict "
                "(cameras come from env.cameras)"
            )
        self.cameras = list(cfg.cameras)
        kwargs["obs_mode"] = "state_dict+rgb" if self.cameras else "state_dict"
        if self.cameras:  # env.image_size, unless env.kwargs.sensor_configs says otherwise
            size = {"width": cfg.image_size, "height": cfg.image_size}
            kwargs["sensor_configs"] = size | dict(kwargs.get("sensor_configs") or {})
        if render_mode is not None:
            if render_mode != "rgb_array":
                raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
            size = {"width": RENDER_SIZE, "height": RENDER_SIZE}
            kwargs.update(render_mode=render_mode, human_render_camera_configs=size)
        if kwargs["sim_backend"] not in ("physx_cpu", "cpu"):
            raise ValueError(
                f"env.kwargs.sim_backend={kwargs['sim_backend']!r}: only physx_cpu is supported "
                "(the GPU scene, physx_cuda, is not implemented yet)"
            )
        use_venv_vulkan()
        import mani_skill.envs  # noqa: F401  (registers ManiSkill's ids)

        if cfg.id not in gym.registry:
            raise ValueError(f"env.id={cfg.id!r} is not a registered ManiSkill3 task (e.g. PickCube-v1)")
        self.envs = []
        try:
            for i in range(num_envs):
                self.envs.append(gym.make(cfg.id, num_envs=1, **kwargs))
                if i == 0:  # a wrong camera name fails before the other N - 1 envs are built
                    first, _ = self.envs[0].reset(seed=0)
                    sensors = sorted(first.get("sensor_data", {}))
                    unknown = [c for c in self.cameras if c not in sensors]
                    if unknown:
                        raise ValueError(f"env.cameras {unknown}: {cfg.id} has the cameras {sensors}")
        except (RuntimeError, ValueError) as err:
            self.close()
            if any(s in str(err) for s in _NO_VULKAN):
                raise RuntimeError(
                    f"ManiSkill found no Vulkan driver ({err}); it needs one even without cameras: a GPU's, "
                    "or Mesa >= 23 lavapipe on a CPU (Debian: bookworm-backports' mesa-vulkan-drivers; "
                    f"`./setup.sh test` installs one as {VENV_ICD}; or set VK_DRIVER_FILES)"
                ) from err
            raise
        self.num_envs = num_envs
        self.task = INSTRUCTIONS.get(cfg.id, cfg.id)
        self.metadata = {"render_fps": float(self.envs[0].unwrapped.control_freq)}
        self.single_action_space = self.envs[0].action_space
        self._rngs: list[np.random.Generator | None] = [None] * num_envs
        self._obs: list[dict[str, np.ndarray]] = [{} for _ in range(num_envs)]
        self.single_observation_space = spaces.Dict(
            {
                k: spaces.Box(0, 255, v.shape, np.uint8)
                if v.dtype == np.uint8
                else spaces.Box(-np.inf, np.inf, v.shape, np.float32)
                for k, v in self._as_obs(first).items()
            }
        )

    # ----------------------------------------------------------------- BatchedEnv
    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        seeds = seed_list(seed, self.num_envs)
        mask = (options or {}).get("reset_mask")
        mask = np.ones(self.num_envs, bool) if mask is None else np.asarray(mask, dtype=bool)
        for i in np.flatnonzero(mask):
            if seeds[i] is not None:
                self._rngs[i] = np.random.default_rng(seeds[i])
                episode_seed = seeds[i]
            else:
                if self._rngs[i] is None:
                    self._rngs[i] = np.random.default_rng()
                episode_seed = int(self._rngs[i].integers(2**31 - 1))
            raw, _ = self.envs[i].reset(seed=episode_seed)
            self._obs[i] = self._as_obs(raw)
        return self._stack(), {"is_success": np.zeros(self.num_envs, dtype=bool)}

    def tasks(self) -> list[str]:
        """Each env's instruction (N strings; one task, so all the same)."""
        return [self.task] * self.num_envs

    def _step_active(self, actions: np.ndarray, active: np.ndarray):
        n = self.num_envs
        reward = np.zeros(n, dtype=np.float64)
        terminated, truncated, success, unstable = (np.zeros(n, dtype=bool) for _ in range(4))
        dtype = self.single_action_space.dtype
        for i in np.flatnonzero(active):
            raw, r, te, tr, info = self.envs[i].step(actions[i].astype(dtype))
            self._obs[i] = self._as_obs(raw)
            reward[i] = float(np.asarray(r).reshape(-1)[0])
            unstable[i] = not all(np.isfinite(self._obs[i][k]).all() for k in (keys.STATE, keys.ENV_STATE))
            terminated[i] = _item(te) or unstable[i]
            truncated[i] = _item(tr)
            success[i] = _item(info.get("success", False))
        raw_info = {"is_success": success, "sim_unstable": unstable}
        return self._stack(), reward, terminated, truncated, raw_info

    def _reset_envs(self, mask: np.ndarray):
        obs, _ = self.reset(options={"reset_mask": mask})
        return obs

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []

    # ----------------------------------------------------------------- helpers
    def _stack(self) -> dict[str, np.ndarray]:
        if not all(self._obs):
            raise RuntimeError("maniskill batched env: call reset() (all envs) before step()")
        return {k: np.stack([o[k] for o in self._obs]) for k in self._obs[0]}

    def _as_obs(self, raw: dict[str, Any]) -> dict[str, np.ndarray]:
        """ManiSkill observation (batch of 1) -> this backend's keys for one env."""
        state, env_state = _split(raw)
        obs = {keys.STATE: state, keys.ENV_STATE: env_state}
        for cam in self.cameras:
            obs[keys.image_key(cam)] = _numpy(raw["sensor_data"][cam]["rgb"]).astype(np.uint8)[0]
        return obs


def _numpy(value: Any) -> np.ndarray:
    """A ManiSkill value (a torch tensor, on the CPU or a GPU, or an array or number) as a numpy array."""
    return value.detach().cpu().numpy() if hasattr(value, "detach") else np.asarray(value)


def _item(value: Any) -> bool:
    return bool(_numpy(value).reshape(-1)[0])


def _split(raw: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """ManiSkill ``state_dict`` (batch of 1) -> (robot state (S,), environment state (E,)) float32."""

    def flat(value: Any) -> np.ndarray:
        return _numpy(value).astype(np.float32).reshape(-1)

    extra = dict(raw.get("extra", {}))
    robot = [flat(v) for v in raw["agent"].values()]
    if "tcp_pose" in extra:
        robot.append(flat(extra.pop("tcp_pose")))
    env = [flat(v) for v in extra.values()]
    empty = np.zeros(0, np.float32)
    return np.concatenate(robot), (np.concatenate(env) if env else empty)


class ManiSkillEnv(gym.Env):
    """One ManiSkill3 env with the ``maniskill`` backend's keys, spaces, rate and seeds, as a gymnasium env
    (what :func:`robot_rl.sim.make_env` builds for ``env.backend=maniskill``): observations are the batched
    env's row 0 (``observation.state`` (S,), ``observation.environment_state`` (E,) float32), ``step`` takes
    (d,) and does not reset by itself; ``info`` has ``is_success`` and ``sim_unstable``; ``task`` is the
    instruction. With ``render_mode="rgb_array"``, ``render()`` gives ManiSkill's render camera as uint8
    (:data:`RENDER_SIZE`, :data:`RENDER_SIZE`, 3) (the pipeline's videos).

    Args and raises: as :class:`ManiSkillBatchedEnv` with N = 1.
    """

    def __init__(self, cfg: EnvConfig, render_mode: str | None = None) -> None:
        self.batched = ManiSkillBatchedEnv(cfg, 1, render_mode)
        self.observation_space = self.batched.single_observation_space
        self.action_space = self.batched.single_action_space
        self.render_mode = render_mode
        self.metadata = {"render_modes": ["rgb_array"], **self.batched.metadata}
        self.task = self.batched.task

    def render(self) -> np.ndarray | None:
        if self.render_mode is None:
            return None
        return _numpy(self.batched.envs[0].render()).astype(np.uint8)[0]

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, _ = self.batched.reset(seed=[seed])
        return {k: v[0] for k, v in obs.items()}, {"task": self.task}

    def step(self, action):
        a = check_actions(np.asarray(action)[None], self.action_space, (1,))
        obs, reward, terminated, truncated, raw = self.batched._step_active(a, np.ones(1, dtype=bool))
        info = {k: bool(v[0]) for k, v in raw.items()}
        obs = {k: v[0] for k, v in obs.items()}
        return obs, float(reward[0]), bool(terminated[0]), bool(truncated[0]), info

    def close(self) -> None:
        self.batched.close()
