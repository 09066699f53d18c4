"""Range checks of every numeric and choice key of a :class:`~robot_rl.config.PipelineConfig`, run at load.

A value out of range (``--online.num_actors=0``, ``--online.utd_ratio=-1``, ``--offline.gamma=1.5``, a
NaN) would otherwise be accepted and hang a run or make it do nothing; :func:`validate` names each bad
dotted key, its value and the allowed range. ``RULES`` holds one rule per key; a list value (hidden sizes,
seeds) has every element checked. The choice tuples mirror the modules that consume them
(``robot_rl.algos.critic.AGGREGATIONS``, ``policies.executor.EXECUTIONS``, ...), which are not imported
here so a bad config fails before torch and MuJoCo load.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Range:
    """A closed or open interval; ``None`` bounds are unbounded. ``integer`` also requires whole numbers."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False

    def ok(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.integer and not isinstance(value, int):
            return False
        if not math.isfinite(value):
            return False
        if self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo):
            return False
        return self.hi is None or (value < self.hi if self.hi_open else value <= self.hi)

    def __str__(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        if self.lo is not None and self.hi is not None:
            lo, hi = "(" if self.lo_open else "[", ")" if self.hi_open else "]"
            return f"{kind} in {lo}{_num(self.lo)}, {_num(self.hi)}{hi}"
        if self.lo is not None:
            return f"{kind} {'>' if self.lo_open else '>='} {_num(self.lo)}"
        if self.hi is not None:
            return f"{kind} {'<' if self.hi_open else '<='} {_num(self.hi)}"
        return kind


@dataclass(frozen=True)
class Choice:
    """One of a fixed set of strings (or numbers)."""

    options: tuple[str | int, ...]

    def ok(self, value: Any) -> bool:
        return not isinstance(value, bool) and value in self.options

    def __str__(self) -> str:
        return f"one of {', '.join(str(o) for o in self.options)}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


COUNT = Range(1, integer=True)  # >= 1
NONNEG_INT = Range(0, integer=True)  # >= 0
POSITIVE = Range(0, lo_open=True)  # > 0
NONNEG = Range(0)  # >= 0
FRACTION = Range(0, 1)  # [0, 1]
DISCOUNT = Range(0, 1, lo_open=True)  # (0, 1]
ANY = Range()  # any finite number
CRITIC_AGG = Choice(("mean", "min", "min_random2"))

RANDOMIZE_RULES: dict[str, Range | Choice] = {
    "object_mass_scale": POSITIVE,
    "object_friction_scale": POSITIVE,
    "object_size_scale": POSITIVE,
    "object_pos_jitter_m": ANY,
    "object_yaw_jitter_rad": ANY,
    "joint_damping_scale": POSITIVE,
    "armature_scale": POSITIVE,
    "actuator_kp_scale": POSITIVE,
    "actuator_kd_scale": POSITIVE,
    "action_delay_steps": NONNEG_INT,
    "action_noise_std": NONNEG,
    "obs_noise_std": NONNEG,
    "camera_pos_jitter_m": ANY,
    "camera_rot_jitter_rad": ANY,
    "camera_fovy_jitter_deg": ANY,
    "light_pos_jitter_m": ANY,
    "light_diffuse_scale": NONNEG,
    "rgba_jitter": ANY,
}
"""``env.randomize.<key>`` rules (:class:`~robot_rl.config.RandomizeConfig`), per element of the range."""


def randomize_problems(randomize: Any) -> list[str]:
    """Problems of ``env.randomize`` (a :class:`~robot_rl.config.RandomizeConfig`) beyond the per-element
    rules: each range must be ``[]`` or ``[low, high]`` with ``low <= high``; each names its key."""
    out = []
    for k in RANDOMIZE_RULES:
        value = getattr(randomize, k)
        if len(value) not in (0, 2):
            out.append(f"env.randomize.{k}={value!r}: must be [] (off) or a range [low, high]")
        elif value and not value[0] <= value[1]:
            out.append(f"env.randomize.{k}={value!r}: low must be <= high")
    return out


RULES: dict[str, Range | Choice] = {
    "seeds": NONNEG_INT,
    "checkpoint_every": COUNT,
    "threads": NONNEG_INT,
    "env.image_size": COUNT,
    "env.control_hz": POSITIVE,
    "env.physics_hz": POSITIVE,
    "env.max_episode_steps": COUNT,
    "env.success_hold_steps": COUNT,
    "env.lift_height_m": POSITIVE,
    "env.num_envs": COUNT,
    "env.backend": Choice(("gym_vector", "mujoco_cpu", "maniskill")),  # robot_rl.sim.batched_factory.BACKENDS
    "env.spawn_region": ANY,
    "env.environment_state_size": NONNEG_INT,
    **{f"env.randomize.{k}": r for k, r in RANDOMIZE_RULES.items()},
    "collect.num_episodes": COUNT,
    "collect.expert_noise": NONNEG,
    "collect.seed": NONNEG_INT,
    "policy.horizon": COUNT,
    "policy.flow_steps": COUNT,
    "policy.hidden_dims": COUNT,
    "policy.image_features": COUNT,
    "policy.normalization": Choice(("mean_std", "quantile")),
    "policy.execution": Choice(("open_loop", "temporal_ensemble")),
    "policy.ensemble_decay": NONNEG,
    "policy.action_low": ANY,
    "policy.action_high": ANY,
    "policy.kind": Choice(("flow", "vla")),
    "policy.vla.backbone": Choice(("vlm", "small")),
    "policy.vla.lora_rank": NONNEG_INT,
    "policy.vla.dtype": Choice(("float32", "bfloat16")),
    "policy.vla.expert_layers": COUNT,
    "policy.vla.expert_width": COUNT,
    "policy.vla.max_text_tokens": COUNT,
    "policy.vla.image_size": NONNEG_INT,
    "deploy.timeout_s": POSITIVE,
    "deploy.async_lead": NONNEG_INT,
    "deploy.async_blend": NONNEG_INT,
    "bc.steps": COUNT,
    "bc.batch_size": COUNT,
    "bc.lr": POSITIVE,
    "bc.act_noise": NONNEG,
    "offline.method": Choice(("qc", "qc_fql", "corft", "recap")),
    "offline.steps": COUNT,
    "offline.batch_size": COUNT,
    "offline.lr": POSITIVE,
    "offline.gamma": DISCOUNT,
    "offline.tau": DISCOUNT,
    "offline.num_critics": COUNT,
    "offline.critic_agg": CRITIC_AGG,
    "offline.critic_hidden_dims": COUNT,
    "offline.best_of_n": COUNT,
    "offline.fql_alpha": NONNEG,
    "offline.terminal_chunks": Choice(("drop", "keep")),
    "offline.reward_norm": Choice(("max", "scale", "none")),
    "offline.reward_range": ANY,
    "recap.c_fail": NONNEG,
    "recap.value_bins": Range(2, integer=True),
    "recap.value_steps": COUNT,
    "recap.value_lr": POSITIVE,
    "recap.value_batch_size": COUNT,
    "recap.value_hidden_dims": COUNT,
    "recap.lookahead": COUNT,
    "recap.positive_fraction": Range(0, 1, lo_open=True, hi_open=True),
    "recap.drop_prob": Range(0, 1, hi_open=True),
    "recap.cfg_beta": Range(1),  # ALGORITHMS.md §7: guidance toward positive, β >= 1
    "recap.lr": POSITIVE,
    "corft.lambda_bc": NONNEG,
    "corft.cal_ql_alpha": NONNEG,
    "eval.episodes_per_seed": COUNT,
    "eval.num_videos": NONNEG_INT,
    "eval.split": Choice(("validation", "test")),  # robot_rl.eval.splits.EVAL_SPLITS
    "data.image_size": Range(8, integer=True),
    "data.horizon_s": NONNEG,
    "data.val_episodes": NONNEG_INT,
    "data.val_every": COUNT,
    "data.val_max_frames": COUNT,
    "data.reward": Choice(("dataset", "episode_end")),
    "data.frame_cache": Choice(("auto", "memory", "zarr", "none")),
    "data.memory_limit_gb": NONNEG,
    "data.num_workers": NONNEG_INT,
    "data.decode_threads": NONNEG_INT,
    "critic.kind": Choice(("compact", "vlm")),
    "critic.image_size": COUNT,
    "critic.steps": COUNT,
    "critic.batch_size": COUNT,
    "critic.lr": POSITIVE,
    "critic.mismatch_frac": FRACTION,
    "critic.stagnation_frac": FRACTION,
    "critic.failed_frac": FRACTION,
    "critic.failed_from": Range(0, 1, hi_open=True),
    "critic.success_max_steps": NONNEG_INT,
    "critic.rule": Choice(("scale", "mix")),
    "critic.lora_rank": NONNEG_INT,
    "critic.seed": NONNEG_INT,
    "critic.serve_max_pairs": COUNT,
    "critic.serve_max_message_mb": POSITIVE,
    "reward.mode": Choice(("success", "shaped", "critic")),
    "reward.scale": POSITIVE,
    "reward.done_threshold": FRACTION,
    "sac.lr": POSITIVE,
    "sac.gamma": DISCOUNT,
    "sac.tau": DISCOUNT,
    "sac.num_critics": COUNT,
    "sac.critic_agg": CRITIC_AGG,
    "sac.critic_hidden_dims": COUNT,
    "sac.actor_hidden_dims": COUNT,
    "sac.init_temperature": POSITIVE,
    "sac.target_entropy": ANY,
    "sac.critic_only_updates": NONNEG_INT,
    "intervention.device": Choice(("none", "sim_human", "keyboard", "gamepad", "spacemouse", "gui")),
    "intervention.gui_port": Range(0, 65535, integer=True),
    "intervention.gui_camera_hz": POSITIVE,
    "intervention.stall_steps": COUNT,
    "intervention.stall_distance_m": NONNEG,
    "intervention.drift_distance_m": POSITIVE,
    "intervention.takeover_steps": COUNT,
    "intervention.max_takeovers": NONNEG_INT,
    "intervention.scale": Range(0, 1, lo_open=True),
    "online.method": Choice(("qc", "qc_fql", "sac", "hg_dagger")),
    "online.env_steps": COUNT,
    "online.utd_ratio": POSITIVE,
    "online.batch_size": COUNT,
    "online.warmup_steps": NONNEG_INT,
    "online.demo_fraction": FRACTION,
    "online.publish_every": COUNT,
    "online.checkpoint_every": COUNT,
    "online.max_env_steps_ahead": NONNEG_INT,
    "online.runtime": Choice(("local", "ray")),
    "online.num_actors": COUNT,
    "online.envs_per_actor": COUNT,
    "online.connect_timeout_s": POSITIVE,
    "online.log_every_s": POSITIVE,
    "online.max_nan_stops": COUNT,
    "online.max_rejected_episodes": COUNT,
    "online.actor_restarts": NONNEG_INT,
    "online.max_weight_age_s": NONNEG,
    "online.max_episode_steps": NONNEG_INT,
    "online.obs_range_factor": NONNEG,
    "online.max_rollbacks": NONNEG_INT,
    "online.replay_capacity": NONNEG_INT,
    "ppo.method": Choice(("flow_noise", "flow_sde")),  # robot_rl.algos.flow_chain.METHODS
    "ppo.num_envs": COUNT,
    "ppo.rollout_chunks": COUNT,
    "ppo.epochs": COUNT,
    "ppo.minibatch": COUNT,
    "ppo.lr": POSITIVE,
    "ppo.value_lr": POSITIVE,
    "ppo.clip": Range(0, 1, lo_open=True, hi_open=True),
    "ppo.gamma": DISCOUNT,
    "ppo.gae_lambda": FRACTION,
    "ppo.entropy_coef": NONNEG,
    "ppo.max_grad_norm": POSITIVE,
    "ppo.noise_std_min": POSITIVE,
    "ppo.noise_std_max": POSITIVE,
    "ppo.sde_noise_level": POSITIVE,
    "ppo.chain_logprob": Choice(("mean", "sum")),  # robot_rl.algos.flow_chain.REDUCTIONS
    "ppo.value_hidden_dims": COUNT,
    "ppo.env_steps": COUNT,
    "ppo.log_every": COUNT,
}

_DEVICE = re.compile(r"^(cpu|mps|cuda(:\d+)?)$")
_TCP = re.compile(r"^tcp://(?P<host>[^:/\s]+|\[[0-9a-fA-F:.]+\]):(?P<port>\d+|\*)$")


def _get(cfg: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        cfg = getattr(cfg, name)
    return cfg


def address_problem(address: str) -> str | None:
    """Why ``address`` is not a ZeroMQ endpoint this project can bind or connect, or None when it is.

    Accepted: ``tcp://HOST:PORT`` (HOST a name, an IPv4 address, ``[IPv6]`` or ``*``; PORT 0-65535 or
    ``*``), ``ipc://PATH`` and ``inproc://NAME``.
    """
    if address.startswith(("ipc://", "inproc://")):
        return None if address.split("://", 1)[1] else "the path after :// is empty"
    match = _TCP.match(address)
    if match is None:
        return "expected tcp://HOST:PORT (e.g. tcp://127.0.0.1:5560), ipc://PATH or inproc://NAME"
    port = match["port"]
    if port != "*" and int(port) > 65535:
        return f"port {port} is out of range 0-65535"
    return None


def controller_host_problem(address: str) -> str | None:
    """Why ``address`` is not a vendor arm controller's host (``192.168.1.10``, ``tcp://`` optional), or
    None when it is: the vendor SDKs (UR, xArm, Franka) use fixed ports, so a port is a mistake."""
    host = address.removeprefix("tcp://").strip()
    if not host or ":" in host or "/" in host:
        return "needs the controller's IP or hostname without a port (e.g. 192.168.1.10)"
    return None


def _rule_problem(key: str, value: Any, rule: Range | Choice) -> str | None:
    """``"<key>=<value>: must be <rule>"`` when ``value`` breaks ``rule`` (a list: any element), else None."""
    values = value if isinstance(value, list) else [value]
    if all(rule.ok(v) for v in values):
        return None
    each = "each element " if isinstance(value, list) else ""
    return f"{key}={value!r}: {each}must be {rule}"


def _rule_problems(checks: list[tuple[str, Any, Range | Choice]]) -> list[str]:
    return [p for p in (_rule_problem(*check) for check in checks) if p is not None]


def problems(cfg: Any) -> list[str]:
    """Every problem of ``cfg`` (a PipelineConfig), each naming the dotted key, its value and the fix."""
    out = _rule_problems([(key, _get(cfg, key), rule) for key, rule in RULES.items()])
    if not _DEVICE.match(cfg.device):
        out.append(f"device={cfg.device!r}: must be cpu, cuda, cuda:N or mps")
    if not cfg.seeds:
        out.append("seeds=[]: give at least one training seed")
    if cfg.policy.vla.expert_width % 32:
        out.append(f"policy.vla.expert_width={cfg.policy.vla.expert_width}: must be a multiple of 32")
    if cfg.policy.kind == "vla" and cfg.policy.vla.backbone == "vlm" and not cfg.policy.vla.vlm:
        out.append("policy.vla.vlm is empty: policy.kind=vla needs a VLM hub id or local folder")
    if cfg.offline.critic_on_trunk and (cfg.policy.kind != "vla" or cfg.offline.method == "recap"):
        out.append(
            f"offline.critic_on_trunk=true with policy.kind={cfg.policy.kind}, offline.method="
            f"{cfg.offline.method}: the critic reads a VLA's trunk only for qc / qc_fql / corft on "
            "policy.kind=vla; set it false"
        )
    if cfg.data.image_size and len(cfg.data.image_size) != 2:
        out.append(f"data.image_size={cfg.data.image_size!r}: must be [] or [H, W]")
    fracs = ("mismatch_frac", "stagnation_frac", "failed_frac")
    total = sum(getattr(cfg.critic, f) for f in fracs)
    if all(FRACTION.ok(getattr(cfg.critic, f)) for f in fracs) and total > 1:
        out.append(f"critic.mismatch_frac + stagnation_frac + failed_frac = {total:g}: must be <= 1")
    for section in ("offline", "sac"):
        sub = getattr(cfg, section)
        if sub.critic_agg == "min_random2" and sub.num_critics < 2:
            out.append(f"{section}.num_critics={sub.num_critics}: critic_agg=min_random2 needs >= 2 critics")
    if POSITIVE.ok(cfg.ppo.noise_std_min) and cfg.ppo.noise_std_min > cfg.ppo.noise_std_max:
        out.append(
            f"ppo.noise_std_min={cfg.ppo.noise_std_min}: must be <= ppo.noise_std_max={cfg.ppo.noise_std_max}"
        )
    reason = address_problem(cfg.online.address)
    if reason is not None:
        out.append(f"online.address={cfg.online.address!r}: {reason}")
    if cfg.env.robot is not None:
        out += robot_problems(cfg.env.robot) + _one_robot_problems(cfg)
    if cfg.env.adapter is not None:
        out += adapter_problems(cfg.env.adapter)
    out += randomize_problems(cfg.env.randomize) + eval_problems(cfg) + batched_actor_problems(cfg)
    out += multitask_problems(cfg.env)
    if cfg.env.robot is not None and any(getattr(cfg.env.randomize, k) for k in RANDOMIZE_RULES):
        out.append("env.randomize: randomises the simulator only; unset it with env.robot")
    return out + deploy_problems(cfg)


def batched_actor_problems(cfg: Any) -> list[str]:
    """``online.envs_per_actor`` > 1 steps the in-process batched simulator (``env.backend=mujoco_cpu``)
    with the env's own success reward (the progress-critic reward wraps one env), no robot and no web GUI
    (robot_rl.runtime.batched_actor)."""
    n = cfg.online.envs_per_actor
    if not isinstance(n, int) or n <= 1:
        return []
    out = []
    if cfg.env.backend != "mujoco_cpu":
        out.append(
            f"online.envs_per_actor={n} needs env.backend=mujoco_cpu (the in-process batched simulator), "
            f"not env.backend={cfg.env.backend!r}"
        )
    if cfg.reward.mode != "success":
        out.append(
            f"online.envs_per_actor={n} with reward.mode={cfg.reward.mode!r}: the critic reward runs on one "
            "env; set reward.mode=success or online.envs_per_actor=1"
        )
    if cfg.env.robot is not None:
        out.append(f"online.envs_per_actor={n}: a robot (env.robot) is one env; set online.envs_per_actor=1")
    if cfg.intervention.device == "gui":
        out.append(
            f"online.envs_per_actor={n} with intervention.device=gui: the GUI's live view and relabels "
            "address one env's episodes; use another device (it drives env 0) or online.envs_per_actor=1"
        )
    return out


def multitask_problems(env: Any) -> list[str]:
    """``env.tasks`` (a multi-task batch) runs on ``env.backend=mujoco_cpu`` in the simulator only; which ids
    are suite tasks is checked when the envs are built
    (:class:`robot_rl.sim.batched_mujoco.MujocoCpuBatchedEnv`)."""
    if not env.tasks:
        return []
    out = []
    if env.backend != "mujoco_cpu":
        out.append(
            f"env.tasks={list(env.tasks)}: a multi-task batch needs env.backend=mujoco_cpu, "
            f"not env.backend={env.backend!r}"
        )
    if env.robot is not None:
        out.append("env.tasks: a multi-task batch runs in the simulator; unset it with env.robot")
    return out


_EVAL_NAME = re.compile(r"[A-Za-z0-9_-]*")


def eval_problems(cfg: Any) -> list[str]:
    """Problems of ``env.spawn_region`` (4 numbers, low <= high, simulator only) and of ``eval.name`` and
    ``eval.paraphrases`` (each instruction maps to a non-empty list of non-empty strings)."""
    out = []
    region = cfg.env.spawn_region
    if region and (len(region) != 4 or region[0] > region[1] or region[2] > region[3]):
        out.append(f"env.spawn_region={region!r}: must be [] or [x_lo, x_hi, y_lo, y_hi] (m) with lo <= hi")
    if region and cfg.env.robot is not None:
        out.append("env.spawn_region: places the simulator's objects only; unset it with env.robot")
    if cfg.env.environment_state_size and cfg.env.robot is not None:
        out.append(
            "env.environment_state_size: pads the simulator's object state only; unset it with env.robot"
        )
    if not _EVAL_NAME.fullmatch(cfg.eval.name):
        out.append(f"eval.name={cfg.eval.name!r}: only letters, digits, _ and - (it names a file)")
    for task, wordings in cfg.eval.paraphrases.items():
        if not wordings or not all(isinstance(w, str) and w.strip() for w in wordings):
            out.append(f"eval.paraphrases[{task!r}]={wordings!r}: must be a list of non-empty texts")
    return out


ADAPTER_RULES: dict[str, Range | Choice] = {
    "fps": NONNEG,
    "render_flip": Choice(("none", "horizontal", "vertical", "both")),
    "render_rotate": Choice((0, 90, 180, 270)),
}
"""``env.adapter.<key>`` rules (:class:`~robot_rl.config.AdapterConfig`)."""


def adapter_problems(adapter: Any) -> list[str]:
    """Problems of ``env.adapter`` (an :class:`~robot_rl.config.AdapterConfig`), each naming its key."""
    out = _rule_problems([(f"env.adapter.{k}", getattr(adapter, k), r) for k, r in ADAPTER_RULES.items()])
    cam = adapter.render_camera
    if cam and not cam.startswith("observation.images."):
        out.append(f"env.adapter.render_camera={cam!r}: must be an image key observation.images.<camera>")
    if cam and cam in (adapter.observation or {}):
        out.append(f"env.adapter.render_camera={cam!r}: also mapped in env.adapter.observation; map it once")
    return out


def deploy_problems(cfg: Any) -> list[str]:
    """Problems of ``deploy`` against the policy's horizon (range checks are in RULES)."""
    out = []
    d, h = cfg.deploy, cfg.policy.horizon
    if d.async_lead and NONNEG_INT.ok(d.async_lead) and not d.async_lead < h:
        out.append(f"deploy.async_lead={d.async_lead}: must be < policy.horizon={h} (or 0: synchronous)")
    if NONNEG_INT.ok(d.async_blend) and d.async_blend > max(d.async_lead, 0):
        out.append(f"deploy.async_blend={d.async_blend}: must be <= deploy.async_lead={d.async_lead}")
    if d.server:
        reason = address_problem(d.server)
        if reason is not None:
            out.append(f"deploy.server={d.server!r}: {reason}")
    return out


ACTION_MODES = ("ee_delta", "joint_position")
"""``env.robot.action``: the simulated task's end-effector delta, or joint targets (a leader arm's)."""
ROBOT_DRIVERS = ("sim", "sim_server", "so101", "ur", "xarm", "franka", "ros2")
CAMERA_DRIVERS = ("opencv", "realsense", "video", "sim", "ros2")
REAL_ROBOT_MAX_SCALE = 0.25
"""The largest joint speed and acceleration scale a vendor arm runs at, and the default on any real robot."""
VENDOR_ARMS = ("ur", "xarm", "franka")
"""Drivers whose ``env.robot.address`` is the controller's host (:func:`controller_host_problem`)."""
ROBOT_RULES: dict[str, Range | Choice] = {
    "driver": Choice(ROBOT_DRIVERS),
    "timeout_s": POSITIVE,
    "success": Choice(("lifted", "operator", "critic")),
    "success_threshold": FRACTION,
    "reset": Choice(("auto", "scene", "human", "none")),
    "home_joints": ANY,
    "home_speed": POSITIVE,
    "home_tolerance": POSITIVE,
    "home_timeout_s": POSITIVE,
    "realtime": Choice(("auto", "always", "never")),  # not on/off: YAML reads those as booleans
    "action": Choice(ACTION_MODES),
    "bus_timeout_s": NONNEG,
    "gripper": Choice(("auto", "none")),
    "franka_realtime": Choice(("enforce", "ignore")),
    "grasp_force_n": Range(0.0, 70.0, lo_open=True),
    "ur_model": Choice(("ur3e", "ur5e", "ur10e", "ur16e", "ur20", "ur3", "ur5", "ur10")),
}
CAMERA_RULES: dict[str, Range | Choice] = {
    "driver": Choice(CAMERA_DRIVERS),
    "width": COUNT,
    "height": COUNT,
    "fps": POSITIVE,
}

ROS2_KINEMATICS = ("none", "panda")
"""``env.robot.ros2.kinematics``: no model, or the project's MuJoCo Panda
(:mod:`robot_rl.hardware.ros2.kinematics`)."""
ROS2_KINEMATIC_JOINTS = {"panda": 7}
"""Arm joints of each kinematic model (``joint_names`` must list as many)."""
ROS2_RULES: dict[str, Range | Choice] = {
    "transport": Choice(("auto", "rclpy", "cyclonedds")),
    "domain_id": Range(-1, 232, integer=True),
    "ee_step_max": POSITIVE,
    "joint_command": Choice(("position", "trajectory", "none")),
    "stale_s": POSITIVE,
    "connect_wait_s": POSITIVE,
    "reset_wait_s": POSITIVE,
    "kinematics": Choice(ROS2_KINEMATICS),
    "ee_command": Choice(("twist", "ik")),
    "gripper_command": Choice(("closure", "trajectory")),
    "gripper_open": ANY,
    "gripper_closed": ANY,
    "clock_skew_s": POSITIVE,
}
"""Rules of ``env.robot.ros2`` (checked when ``env.robot.driver`` is ``ros2``)."""
ROS2_JOINT_LISTS = ("joint_low", "joint_high", "joint_vel_max", "joint_acc_max")


def ros2_problems(ros2: Any) -> list[str]:
    """Problems of ``env.robot.ros2`` (a :class:`~robot_rl.config.Ros2Config`), each naming its key."""
    out = _rule_problems([(f"env.robot.ros2.{k}", getattr(ros2, k), r) for k, r in ROS2_RULES.items()])
    n = len(ros2.joint_names)
    if n == 0 or len(set(ros2.joint_names)) != n:
        out.append(f"env.robot.ros2.joint_names={ros2.joint_names}: must be non-empty and unique")
    for key in ROS2_JOINT_LISTS:
        if len(getattr(ros2, key)) != n:
            out.append(
                f"env.robot.ros2.{key}: needs {n} values (one per joint_names), got {getattr(ros2, key)}"
            )
    for key in ("ee_low", "ee_high"):
        if len(getattr(ros2, key)) != 3:
            out.append(f"env.robot.ros2.{key}: needs 3 values (m), got {getattr(ros2, key)}")
    topics = ["joint_states_topic", "ee_pose_topic", "position_topic", "trajectory_topic", "twist_topic"]
    for key in [*topics, "gripper_topic", "sim_prefix", "servo_start_service"]:
        value = getattr(ros2, key)
        if value and (not value.startswith("/") or value.endswith("/")):
            out.append(f"env.robot.ros2.{key}={value!r}: must be an absolute ROS name such as /joint_states")
    return out + _ros2_stock_problems(ros2)


def _ros2_stock_problems(ros2: Any) -> list[str]:
    """The cross-key rules of a stock arm's keys (pose source, IK, gripper joint, clocks)."""
    out = []
    if not ros2.ee_pose_topic and ros2.kinematics == "none":
        out.append(
            "env.robot.ros2: no end-effector pose (ee_pose_topic empty and kinematics none): set "
            "ee_pose_topic to a PoseStamped topic or kinematics to panda (the pose from the joints)"
        )
    wanted = ROS2_KINEMATIC_JOINTS.get(ros2.kinematics)
    if wanted is not None and len(ros2.joint_names) != wanted:
        out.append(
            f"env.robot.ros2.kinematics={ros2.kinematics}: needs {wanted} joint_names, got {ros2.joint_names}"
        )
    if ros2.ee_command == "ik" and (ros2.kinematics == "none" or ros2.joint_command == "none"):
        out.append(
            "env.robot.ros2.ee_command=ik: needs kinematics (e.g. panda) and a joint_command (trajectory)"
        )
    if ros2.servo_start_service and ros2.transport == "cyclonedds":
        out.append(
            "env.robot.ros2.servo_start_service: calling a ROS 2 service needs transport rclpy (or auto with "
            "rclpy installed); the cyclonedds transport has no services"
        )
    if ros2.gripper_open == ros2.gripper_closed:
        out.append(f"env.robot.ros2.gripper_open, gripper_closed: both {ros2.gripper_open}; they must differ")
    if not ros2.gripper_joint:
        out.append("env.robot.ros2.gripper_joint: must name the gripper's joint (e.g. panda_finger_joint1)")
    if ros2.clock_skew_s > ros2.stale_s:
        out.append(
            f"env.robot.ros2.clock_skew_s={ros2.clock_skew_s} must be at most stale_s={ros2.stale_s} (s): "
            "stamps further off are judged by receive time"
        )
    return out


ESTOP_SIGNALS = ("", "SIGUSR1", "SIGINT")
SAFETY_RULES: dict[str, Range | Choice] = {
    "joint_margin_rad": NONNEG,
    "workspace_low": ANY,
    "workspace_high": ANY,
    "ee_step_scale": Range(0, 1, lo_open=True),
    "velocity_scale": Range(0, 1),  # 0: SafetyConfig.motion_scales' default
    "acceleration_scale": Range(0, 1),
    "max_tracking_error_rad": NONNEG,
    "watchdog_ms": NONNEG,
    "estop_signal": Choice(ESTOP_SIGNALS),
}
"""``env.robot.safety.<key>`` rules (:class:`~robot_rl.config.SafetyConfig`); list values per element."""


def safety_problems(safety: Any) -> list[str]:
    """Problems of ``env.robot.safety`` (a :class:`~robot_rl.config.SafetyConfig`), each naming its key."""
    out = _rule_problems([(f"env.robot.safety.{k}", getattr(safety, k), r) for k, r in SAFETY_RULES.items()])
    low, high = safety.workspace_low, safety.workspace_high
    for k, box in (("workspace_low", low), ("workspace_high", high)):
        if len(box) not in (0, 3):
            out.append(f"env.robot.safety.{k}={box!r}: must be empty (the robot's box) or 3 values (m)")
    if len(low) == 3 and len(high) == 3 and not all(lo < hi for lo, hi in zip(low, high, strict=True)):
        out.append(f"env.robot.safety.workspace_low={low!r}: must be below workspace_high={high!r} per axis")
    return out


def real_robot_problems(robot: Any, moving: bool = True) -> list[str]:
    """Problems of a vendor arm's ``env.robot.safety`` (driver ``so101`` or one of :data:`VENDOR_ARMS`):
    the joint speed and acceleration scales may not exceed :data:`REAL_ROBOT_MAX_SCALE`, and when the arm
    is to be ``moving`` (not only read, as ``hardware check`` without ``--move`` does) the workspace box
    must be given, since a driver's own box is its reach cube."""
    if robot.driver not in ("so101", *VENDOR_ARMS):
        return []
    safety, out = robot.safety, []
    if moving and not (safety.workspace_low and safety.workspace_high):
        out.append(
            f"env.robot.safety.workspace_low/workspace_high: required for env.robot.driver={robot.driver} "
            "(the end-effector box the arm may move in, m in its base frame, e.g. [0.3, -0.3, 0.02] and "
            "[0.7, 0.3, 0.4]); the driver's own box is its reach cube, table included"
        )
    for key in ("velocity_scale", "acceleration_scale"):
        value = getattr(safety, key)
        if value > REAL_ROBOT_MAX_SCALE:
            out.append(
                f"env.robot.safety.{key}={value:g}: at most {REAL_ROBOT_MAX_SCALE:g} on a real "
                f"{robot.driver} arm (0, the default, is {REAL_ROBOT_MAX_SCALE:g})"
            )
    return out


def robot_problems(robot: Any) -> list[str]:
    """Problems of ``env.robot`` (a :class:`~robot_rl.config.RobotConfig`), each naming its dotted key."""
    out = []
    checks = [(f"env.robot.{k}", getattr(robot, k), rule) for k, rule in ROBOT_RULES.items()]
    for name, cam in robot.cameras.items():
        checks += [
            (f"env.robot.cameras.{name}.{k}", getattr(cam, k), rule) for k, rule in CAMERA_RULES.items()
        ]
    out += _rule_problems(checks)
    if robot.driver == "ros2":
        out += ros2_problems(robot.ros2)
    if robot.success == "critic" and not robot.success_critic:
        out.append("env.robot.success=critic: set env.robot.success_critic to a progress critic checkpoint")
    out += safety_problems(robot.safety) + real_robot_problems(robot, moving=False)
    if robot.driver == "so101":
        out += [
            f"env.robot.{k}: required for env.robot.driver=so101 ({what})"
            for k, what in (("port", "the arm's serial port"), ("calibration", "its calibration JSON file"))
            if not getattr(robot, k)
        ]
    if robot.driver == "sim_server":
        reason = address_problem(robot.address)
        if reason is not None:
            out.append(f"env.robot.address={robot.address!r}: {reason}")
    if robot.driver in VENDOR_ARMS:
        reason = controller_host_problem(robot.address)
        if reason is not None:
            out.append(f"env.robot.address={robot.address!r}: driver {robot.driver} {reason}")
    return out


def _one_robot_problems(cfg: Any) -> list[str]:
    """A robot is one env: one sub-env and one actor drive it; its cameras must cover ``env.cameras``."""
    out = []
    if cfg.env.num_envs != 1:
        out.append(f"env.num_envs={cfg.env.num_envs}: a robot (env.robot) is one env; set env.num_envs=1")
    if cfg.online.num_actors != 1:
        out.append(
            f"online.num_actors={cfg.online.num_actors}: a robot (env.robot) is driven by one actor; "
            "set online.num_actors=1"
        )
    if cfg.env.robot.action == "joint_position" and cfg.intervention.device != "none":
        out.append(
            f"intervention.device={cfg.intervention.device}: it drives end-effector deltas, but "
            "env.robot.action=joint_position takes joint targets; set intervention.device=none"
        )
    missing = [c for c in cfg.env.cameras if c not in cfg.env.robot.cameras]
    if missing:
        out.append(
            f"env.cameras={cfg.env.cameras!r}: env.robot.cameras has no device for {missing} "
            "(add env.robot.cameras.<name>.driver/source)"
        )
    return out
