"""The edge's builder of the chunk source that evaluates a policy (:func:`policy_source`): a checkpoint loaded
in this process (:func:`robot_rl.policies.load_agent` behind :class:`~robot_rl.sources.AgentSource`), or the
policy server at ``deploy.server`` (:class:`robot_rl.deploy.remote_policy.RemotePolicy`).

An edge module (tests/test_layering.py ``EDGE``): it imports the policies and the policy client at module
level; the evaluation stage and the ROS 2 ``policy_node`` call it and hand the source to the rollout.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from robot_rl import keys
from robot_rl.checkpoint import read_header
from robot_rl.config import ConfigError
from robot_rl.data.prev_action import prev_action_start, prev_action_steps
from robot_rl.deploy.remote_policy import RemotePolicy
from robot_rl.eval.inference import apply_inference
from robot_rl.executor import AsyncChunkExecutor, ChunkExecutor
from robot_rl.policies.factory import load_agent
from robot_rl.sources import AgentSource, PrevActionSource, StepwiseSource


def _with_prev_action(space, steps: int = 1):
    """``(observation space, action space)`` with ``observation.prev_action`` (the last ``steps`` actions,
    (steps·d,)) added: :class:`PrevActionSource` supplies it, so a policy that reads it fits the env."""
    obs_space, action_space = space
    low, high = np.tile(action_space.low, steps), np.tile(action_space.high, steps)
    box = gym.spaces.Box(low, high, dtype=np.float32)
    return gym.spaces.Dict({**obs_space.spaces, keys.PREV_ACTION: box}), action_space


def policy_source(cfg, checkpoint, seed: int, space, num_envs: int, inference: dict | None = None) -> tuple:
    """The chunk source that evaluates a policy, and a dict naming it for the eval report.

    Without ``cfg.deploy.server``: ``checkpoint`` loaded in this process (:class:`AgentSource`, execution
    ``cfg.policy.execution``, sampling seeded per episode from ``seed`` and its env seed); names
    ``{"checkpoint": path, "inference": {knob: value in effect}}``, after ``inference`` (dotted key -> value
    given on the command line, :func:`robot_rl.eval.inference.apply_inference`) is set on the agent.
    With it (``inference`` is then ignored, with a printed note): the policy server at that address
    (``robot-rl serve``, :class:`robot_rl.deploy.remote_policy.RemotePolicy`; ``checkpoint`` is not read),
    whose chunks are
    clipped to the action box and seeded from ``seed`` and each episode's env seed; executed open loop, by
    temporal ensembling, or asynchronously when ``deploy.async_lead`` > 0 (:class:`StepwiseSource`);
    names ``{"server": address, "model_id": ...}``.

    Args:
        space: ``(observation space, action space)`` of the env (gymnasium Dict and Box).
        num_envs: sub-envs of the vector env.
    Returns:
        ``(source, policy)``: a ``robot_rl.rollout.ChunkSource`` with a ``close()``, and the dict.
    Raises:
        PolicyServerUnavailable: no answer from ``deploy.server`` within ``deploy.timeout_s``.
        ConfigError: the served model does not fit the env (action dim, observation keys).
        FileNotFoundError / CheckpointError: as :func:`robot_rl.policies.load_agent` (in process).
    """
    low, high = space[1].low.astype(np.float32), space[1].high.astype(np.float32)
    action_dim = int(space[1].shape[0])
    if not cfg.deploy.server:
        steps = prev_action_steps(read_header(checkpoint).config)
        space = _with_prev_action(space, steps)
        obs_shapes = {k: tuple(s.shape) for k, s in space[0].spaces.items()}
        agent, header = load_agent(
            checkpoint, cfg.device, evaluate=True, seed=seed, obs_shapes=obs_shapes, action_dim=action_dim
        )
        obs_keys = header.obs_keys
        used = apply_inference(agent, inference or {})
        unread = [k for k in inference or {} if k not in used]
        if unread:
            print(
                f"note: a {agent.method} checkpoint does not read --{', --'.join(unread)}; ignored",
                flush=True,
            )
        p = cfg.policy
        source = AgentSource(
            agent, obs_keys, low, high, cfg.device, p.execution, p.ensemble_decay, num_envs, seed=seed
        )
        if keys.PREV_ACTION in obs_keys:
            start = prev_action_start(header.config)
            source = PrevActionSource(source, start, action_dim, num_envs, steps)
        return source, {"checkpoint": str(checkpoint), "inference": used}
    if inference:  # the same flags as training's are often passed along: a note, not an error
        print(
            f"note: the policy server at deploy.server={cfg.deploy.server!r} acts with its checkpoint's "
            f"values; --{', --'.join(inference)} ignored (evaluate the checkpoint in process to change them)",
            flush=True,
        )
    remote = RemotePolicy.from_config(cfg, low, high, seed=seed)
    try:
        spec = remote.spec
        space = _with_prev_action(space, spec.prev_action_steps)
        _check_served(cfg.deploy.server, spec, space)
    except BaseException:
        remote.close()
        raise
    named = {"server": cfg.deploy.server, "model_id": spec.model_id}
    d = cfg.deploy
    if d.async_lead:
        executors = [
            AsyncChunkExecutor(spec.horizon, d.async_lead, d.async_blend, d.timeout_s, low, high)
            for _ in range(num_envs)
        ]
    elif cfg.policy.execution == "temporal_ensemble":
        executors = [
            ChunkExecutor(spec.horizon, "temporal_ensemble", cfg.policy.ensemble_decay, low, high)
            for _ in range(num_envs)
        ]
    else:
        executors = None
    source = remote if executors is None else StepwiseSource(remote, executors)
    if keys.PREV_ACTION in spec.obs_shapes:
        start, steps = spec.prev_action_start, spec.prev_action_steps
        source = PrevActionSource(source, start, action_dim, num_envs, steps)
    return source, named


def _check_served(address: str, spec, space) -> None:
    action_dim = int(space[1].shape[0])
    env_shapes = {k: tuple(s.shape) for k, s in space[0].spaces.items()}
    missing = sorted(k for k, shape in spec.obs_shapes.items() if env_shapes.get(k) != tuple(shape))
    if spec.action_dim != action_dim or missing:
        raise ConfigError(
            f"deploy.server={address!r} serves {spec.model_id} (action_dim {spec.action_dim}, observation "
            f"keys {sorted(spec.obs_shapes)}), which does not fit this env (action_dim {action_dim}"
            f"{'; differs or missing: ' + ', '.join(missing) if missing else ''})"
        )
