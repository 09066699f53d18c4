"""Which agent the online learner trains, where it starts from, and the demonstrations it keeps using.

- ``qc`` / ``qc_fql``: the chunked agent of docs/algorithms.md §3-4, every module the init checkpoint holds
  loaded (an offline checkpoint gives policy and critic; a BC checkpoint gives the policy, the critic
  starts fresh). Architecture comes from the checkpoint; ``lr``, ``gamma``, ``tau``, ``best_of_n``,
  ``critic_agg``, ``fql_alpha``, ``normalize_q_loss``, ``terminal_chunks`` and ``target_reuse`` from the
  run's ``offline`` section. The reward map (``reward_norm``, ``reward_range``) is the checkpoint's, so
  online updates see rewards as offline training did (a BC checkpoint's empty range is taken from the
  demos; a checkpoint from before reward normalisation keeps raw rewards).
- ``hg_dagger``: flow BC (§2) on demos plus the human-driven steps of interventions (the learner masks the
  policy's own steps, ``rlpd_batch(human_only=True)``), starting from the init checkpoint's policy.
- ``sac``: the HIL-SERL recipe (§5) from scratch, single-step actions, normalised with the demos' stats.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import draccus

from robot_rl import keys
from robot_rl.algos.registry import AgentFactory
from robot_rl.checkpoint import CONFIG_FILE, MODEL_FILE, check_compatible, load_checkpoint, load_module_state
from robot_rl.config import ConfigError, OfflineRLConfig, PipelineConfig, PolicyConfig, config_to_dict
from robot_rl.data.training.training_set import TrainingSet
from robot_rl.run_dir import RunDir
from robot_rl.runtime.env_info import EnvInfo

_ONLINE_OVERRIDES = (
    "lr",
    "gamma",
    "tau",
    "best_of_n",
    "critic_agg",
    "fql_alpha",
    "normalize_q_loss",
    "terminal_chunks",
    "target_reuse",
)


@dataclass
class OnlineAgent:
    """The learner's starting point.

    ``agent``; ``config`` (its checkpoint ``config.json``); ``stats``; ``obs_shapes``: the env
    observations the policy reads (the init checkpoint's keys, so a camera the env renders only for a
    progress critic stays out of the replay); ``action_dim``; chunk ``horizon`` and discount ``gamma``
    of its replay samples; ``demos`` (a TrainingSet of the demonstrations, or None).
    """

    agent: object
    config: dict
    stats: dict
    obs_shapes: dict[str, tuple[int, ...]]
    action_dim: int
    horizon: int
    gamma: float
    demos: object | None

    @property
    def tasks(self) -> list[str]:
        """The policy's instruction vocabulary (``policy.tasks``; empty: conditioned on no instruction)."""
        return list((self.config.get("policy") or {}).get("tasks") or [])


def env_shapes(cfg: PipelineConfig, env: EnvInfo) -> tuple[dict[str, tuple[int, ...]], int, PolicyConfig]:
    """The env's observation shapes, action dimension, and ``cfg.policy`` with the env's action box filled
    in where ``policy.action_low/high`` are empty; ``env``: the edge's description of the env the actors
    step (:func:`robot_rl.actor_build.describe_env`)."""
    policy = cfg.policy
    if not (policy.action_low or policy.action_high) and env.action_low:
        policy = replace(policy, action_low=list(env.action_low), action_high=list(env.action_high))
    return dict(env.obs_shapes), env.action_dim, policy


def _demos(cfg: PipelineConfig, run: RunDir, obs_keys: list[str], horizon: int, gamma: float, gamma_key: str):
    root = Path(cfg.data.path) if cfg.data.path else run.dataset
    if not (root / "meta" / "info.json").is_file():
        if cfg.online.demo_fraction > 0 or cfg.online.method in ("sac", "hg_dagger"):
            raise ConfigError(
                f"no demonstration dataset at {root} (online.demo_fraction > 0 and {cfg.online.method} need "
                "one): run robot-rl collect, or set data.path"
            )
        return None
    data = cfg.data if any(keys.is_image_key(k) for k in obs_keys) else replace(cfg.data, images=False)
    return TrainingSet(root, data, horizon, gamma, run.root / "frame_cache", for_rl=True, gamma_key=gamma_key)


def build_online_agent(
    cfg: PipelineConfig, seed: int, run: RunDir, env: EnvInfo, agents: AgentFactory
) -> OnlineAgent:
    """Build the online agent for ``cfg.online.method`` (module docstring) for the env ``env`` describes,
    with the edge's agent factory ``agents`` (:class:`~robot_rl.algos.registry.AgentFactory`).

    Raises:
        ConfigError: the init checkpoint is missing, was trained on other observations or actions than
            the env's (names the file and the key), has no ``policy`` weights, or its policy is conditioned
            on several instructions and the reward is not the success signal.
        CheckpointError: a checkpoint file is corrupt, or its weights do not fit its config.
    """
    env_obs, action_dim, env_policy = env_shapes(cfg, env)
    method = cfg.online.method

    def extra(obs_shapes: dict[str, tuple[int, ...]]) -> dict:
        return {
            "online_method": method,
            "obs_shapes": {k: list(v) for k, v in obs_shapes.items()},
            "action_dim": action_dim,
            "seed": seed,
            "obs_keys": sorted(obs_shapes),
            "fps": round(cfg.env.control_hz),
        }

    if method == "sac":
        obs_shapes = {k: s for k, s in env_obs.items() if cfg.data.images or not keys.is_image_key(k)}
        policy_cfg = replace(env_policy, horizon=1)
        demos = _demos(cfg, run, sorted(obs_shapes), 1, cfg.sac.gamma, "sac.gamma")
        agent = agents.build_agent(
            "sac", policy_cfg, cfg.sac, obs_shapes, action_dim, demos.stats, device=cfg.device
        )
        config = {**config_to_dict(replace(cfg, policy=policy_cfg)), "method": "sac", **extra(obs_shapes)}
        return OnlineAgent(agent, config, demos.stats, obs_shapes, action_dim, 1, cfg.sac.gamma, demos)

    init = Path(cfg.online.init) if cfg.online.init else run.checkpoint("offline", seed)
    if not (init / CONFIG_FILE).is_file():
        raise ConfigError(
            f"online.init: no checkpoint at {init}; train one (robot-rl train --algo offline) or set "
            "--online.init=<checkpoint folder>"
        )
    ckpt = load_checkpoint(init)
    saved, stats = ckpt.header, ckpt.stats
    try:
        check_compatible(saved.config, env_obs, action_dim)
    except ValueError as err:
        where = f"env.tasks={list(cfg.env.tasks)}" if cfg.env.tasks else f"env {cfg.env.id!r}"
        raise ConfigError(f"online.init={init}: the checkpoint does not fit {where}: {err}") from err
    if "policy" not in ckpt.weights:
        raise ConfigError(f"online.init={init}: {init / MODEL_FILE} has no 'policy' weights")
    obs_shapes = {k: env_obs[k] for k in saved.obs_shapes}
    policy_cfg = saved.policy
    if policy_cfg.tasks and cfg.reward.mode != "success":
        raise ConfigError(
            f"online.init={init}: the policy is conditioned on {len(policy_cfg.tasks)} instructions "
            f"(policy.tasks) but reward.mode={cfg.reward.mode!r} scores every episode against the run's "
            "first instruction; use reward.mode=success for multi-instruction tasks"
        )
    algo = "bc" if method == "hg_dagger" else method
    # a checkpoint from before reward normalisation was trained on raw rewards
    offline = draccus.decode(OfflineRLConfig, {"reward_norm": "none", **(saved.config.get("offline") or {})})
    offline = replace(offline, method=method, **{k: getattr(cfg.offline, k) for k in _ONLINE_OVERRIDES})
    demos = _demos(
        cfg, run, sorted(obs_shapes), policy_cfg.horizon, offline.gamma, f"offline.gamma of {init}"
    )
    if algo != "bc" and offline.reward_norm != "none" and not offline.reward_range:
        # a BC init checkpoint has no reward range yet: take it from the demos, as offline training does
        if demos is None:
            raise ConfigError(
                f"online.init={init} has no offline.reward_range and there are no demos to take it from: "
                "set --offline.reward_range=[r_min,r_max]"
            )
        rewards = demos.train.sampler.rewards
        offline = replace(offline, reward_range=[float(rewards.min()), float(rewards.max())])
    algo_cfg = cfg.bc if algo == "bc" else offline
    agent = agents.build_agent(algo, policy_cfg, algo_cfg, obs_shapes, action_dim, stats, device=cfg.device)
    modules = agent.modules()
    ckpt.load_modules(modules, init, skip_missing=True)
    if algo != "bc" and "critic" in ckpt.weights and "target_critic" not in ckpt.weights:
        load_module_state(modules["target_critic"], ckpt.weights["critic"], f"{init / MODEL_FILE} (critic)")
    config = {
        **config_to_dict(replace(cfg, policy=policy_cfg, offline=offline)),
        "method": algo,
        "init": str(init),
        **extra(obs_shapes),
    }
    return OnlineAgent(agent, config, stats, obs_shapes, action_dim, policy_cfg.horizon, offline.gamma, demos)
