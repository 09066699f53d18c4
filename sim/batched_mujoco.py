"""``mujoco_cpu`` backend of :class:`~robot_rl.sim.batched.BatchedEnv`: N simulations of a built-in Panda
task (any of :data:`robot_rl.sim.tasks.TASKS`) in this process, stepped in a thread pool (no worker
processes, no IPC).

Each env is the task's :class:`~robot_rl.sim.panda_base.PandaTaskEnv` (own ``MjModel`` copy, ``MjData``
and controller), so rewards, success, truncation and the controller are the single env's code and a
trajectory is bit-identical to the single env's for the same seed and actions. A control step of one env
is 50 substeps of ``[PD torque in numpy, mj_step]``: ``mj_step`` releases the GIL, so the physics of
different envs runs in parallel threads, while the controller's numpy lines (about a fifth of a step) and
the once-per-step IK hold it. Envs are split into one contiguous shard per thread.

Cameras are rendered on the calling thread after the physics, all envs of a task with one offscreen
renderer (one GL context per task; the models are copies of the task's scene, each env's own model gives
its visuals, e.g. its ``env.randomize`` draws), so GL never runs in the pool.

With ``env.tasks`` the batch is multi-task: env i runs ``tasks[i % T]``; ``tasks()`` gives each env's
instruction, and the observations hold ``observation.state`` (the Panda's, the same for every task), the
cameras, and ``observation.environment_state`` only when it has one size in every task (4 to 21 numbers
by task, unless ``env.environment_state_size`` pads them to one).
"""

from __future__ import annotations

import importlib.util
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np
from gymnasium import spaces

from robot_rl import keys
from robot_rl.config import EnvConfig
from robot_rl.sim.batched import BatchedEnv, seed_list
from robot_rl.sim.gl_env import check_mujoco_gl
from robot_rl.sim.tasks import TASKS, build_task_env


class MujocoCpuBatchedEnv(BatchedEnv):
    """N in-process simulations of a built-in Panda task stepped by a thread pool.

    ``task`` is the instruction of the task (of env 0's current episode when it changes per episode);
    ``tasks()`` gives every env's.

    Args:
        cfg: env config with a built-in id (:data:`robot_rl.sim.tasks.TASKS`; rates, horizon, success rule,
            cameras, ``kwargs`` such as ``reward`` and ``torque_every`` as for the single env);
            ``cfg.robot`` must be unset. ``cfg.tasks`` (suite ids, optional): env i runs
            ``cfg.tasks[i % T]`` instead of ``cfg.id`` (module docstring).
        num_envs: N (at least ``len(cfg.tasks)``).
        num_threads: pool size (default ``os.cpu_count()``, at most N); 1 steps in the calling thread.

    Raises:
        ImportError: ``mujoco`` is not installed.
        ValueError: a foreign ``cfg.id`` or ``cfg.tasks`` entry, fewer envs than ``cfg.tasks``, a robot,
            ``num_threads`` < 1, or invalid env settings.
        FileNotFoundError: gym-hil (the Panda model) is not installed.
        RendererError: cameras are requested and no offscreen GL backend works.
    """

    def __init__(self, cfg: EnvConfig, num_envs: int, num_threads: int | None = None) -> None:
        if importlib.util.find_spec("mujoco") is None:
            raise ImportError("env.backend=mujoco_cpu needs MuJoCo: `pip install mujoco gym-hil`")
        task_ids = list(cfg.tasks) or [cfg.id]
        foreign = [t for t in task_ids if t not in TASKS]
        if foreign or cfg.robot is not None:
            given = f"env.tasks={foreign or task_ids}" if cfg.tasks else f"env.id={cfg.id!r}"
            raise ValueError(
                f"env.backend=mujoco_cpu runs the built-in simulated tasks ({', '.join(TASKS)}) only "
                f"({given}, env.robot={'set' if cfg.robot is not None else 'unset'}); "
                "use env.backend=gym_vector"
            )
        if num_envs < len(task_ids):
            raise ValueError(
                f"env.tasks has {len(task_ids)} tasks but the batch has {num_envs} envs: give at least one "
                "env per task (env i runs env.tasks[i % T])"
            )
        threads = (os.cpu_count() or 1) if num_threads is None else num_threads
        if threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {threads}")
        check_mujoco_gl()  # before the first import of MuJoCo
        from robot_rl.sim.panda_base import CAMERAS  # imports MuJoCo: after the MUJOCO_GL check above

        self.task_ids = [task_ids[i % len(task_ids)] for i in range(num_envs)]
        self.envs = [build_task_env(replace(cfg, id=t), cameras=[]) for t in self.task_ids]
        self.num_envs = num_envs
        sizes = {env.observation_space[keys.ENV_STATE].shape for env in self.envs}
        self._obs_keys = (keys.STATE,) if len(sizes) > 1 else (keys.STATE, keys.ENV_STATE)
        self.cameras = list(cfg.cameras)
        for cam in self.cameras:
            if cam not in CAMERAS:
                raise ValueError(f"env.cameras: unknown camera {cam!r}; available: {sorted(CAMERAS)}")
        self._camera_names = [CAMERAS[c] for c in self.cameras]
        self.image_size = cfg.image_size
        first = self.envs[0]
        self.task = first.task
        self.single_action_space = first.action_space
        obs_spaces = {k: first.observation_space[k] for k in self._obs_keys}
        for cam in self.cameras:
            obs_spaces[keys.image_key(cam)] = spaces.Box(
                0, 255, (cfg.image_size, cfg.image_size, 3), np.uint8
            )
        self.single_observation_space = spaces.Dict(obs_spaces)
        self._renderers: dict[str, Any] = {}  # task id -> renderer of that task's scene
        if self.cameras:
            from robot_rl.sim.render import OffscreenRenderer  # loads MuJoCo's GL backend: only with cameras

            for t, env in zip(self.task_ids, self.envs, strict=True):
                if t not in self._renderers:
                    self._renderers[t] = OffscreenRenderer(env.model)
        threads = min(threads, num_envs)
        self._shards = [s for s in np.array_split(np.arange(num_envs), threads) if s.size]
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="mujoco_cpu") if threads > 1 else None
        self._obs: list[dict[str, np.ndarray]] = [{} for _ in range(num_envs)]
        self._step_out: list[tuple[float, bool, bool, dict[str, Any]]] = [(0.0, False, False, {})] * num_envs

    # ----------------------------------------------------------------- BatchedEnv
    def reset(self, *, seed=None, options: dict[str, Any] | None = None):
        seeds = seed_list(seed, self.num_envs)
        mask = (options or {}).get("reset_mask")
        mask = np.ones(self.num_envs, bool) if mask is None else np.asarray(mask, dtype=bool)
        for i in np.flatnonzero(mask):
            self._obs[i], _ = self.envs[i].reset(seed=seeds[i])
        self.task = self.envs[0].task
        return self._stack(), {"is_success": np.zeros(self.num_envs, dtype=bool)}

    def tasks(self) -> list[str]:
        """Each env's instruction for its current episode (N strings)."""
        return [env.task for env in self.envs]

    def _step_active(self, actions: np.ndarray, active: np.ndarray):
        def run(shard: np.ndarray) -> None:
            for i in shard:
                if active[i]:
                    obs, reward, terminated, truncated, info = self.envs[i].step(actions[i])
                    self._obs[i] = obs
                    self._step_out[i] = (reward, terminated, truncated, info)

        if self._pool is None:
            run(np.arange(self.num_envs))
        else:
            for future in [self._pool.submit(run, s) for s in self._shards]:
                future.result()
        out = self._step_out
        reward = np.array([o[0] for o in out], dtype=np.float64)
        terminated = np.array([o[1] for o in out], dtype=bool)
        truncated = np.array([o[2] for o in out], dtype=bool)
        raw = {
            "is_success": np.array([o[3].get("is_success", False) for o in out], dtype=bool),
            "sim_unstable": np.array([o[3].get("sim_unstable", False) for o in out], dtype=bool),
        }
        return self._stack(), reward, terminated & active, truncated & active, raw

    def _reset_envs(self, mask: np.ndarray):
        obs, _ = self.reset(options={"reset_mask": mask})
        return obs

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        for renderer in self._renderers.values():
            renderer.close()
        self._renderers = {}
        for env in self.envs:
            env.close()

    # ----------------------------------------------------------------- helpers
    def _stack(self) -> dict[str, np.ndarray]:
        if not all(self._obs):
            raise RuntimeError("mujoco_cpu batched env: call reset() (all envs) before step()")
        obs = {k: np.stack([o[k] for o in self._obs]) for k in self._obs_keys}
        for cam, name in zip(self.cameras, self._camera_names, strict=True):
            obs[keys.image_key(cam)] = np.stack(
                [
                    self._renderers[t].render(env.data, name, self.image_size, env.model)
                    for t, env in zip(self.task_ids, self.envs, strict=True)
                ]
            )
        return obs
