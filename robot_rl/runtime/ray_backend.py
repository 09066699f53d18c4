"""The Ray runtime (``--runtime ray``): the learner and each actor are Ray actors, on one machine or more.

Ray places and supervises the processes and carries the calls; robot_rl adds no cluster code. The calls
are the link operations of :mod:`robot_rl.runtime.link`; their payloads are bytes (safetensors frames and
weights) and JSON-able dicts, so no transition or weight is pickled. ``online.ray_address`` joins an
existing cluster (``ray start --head`` on the learner machine, ``ray start --address=...`` on each robot
or simulator machine); empty starts a local Ray. Each actor writes its episode log under ``run_dir`` on
the machine it runs on.

No run token (:mod:`robot_rl.runtime.link`) guards these calls: they are not a socket any local process
can reach, but Ray actor calls, and only a job connected to this Ray cluster holds the learner's handle.
Any such job can already run arbitrary code on every node of the cluster (reading the run dir, token
included), so a token would add nothing: Ray has no authentication of its own, keep its ports on a
trusted network (Ray's own security guidance).
"""

from __future__ import annotations

import os
from typing import Any

import draccus

from robot_rl.algos.registry import AgentFactory
from robot_rl.config import ConfigError, PipelineConfig, config_to_dict
from robot_rl.runtime.actor_parts import ActorBuilder
from robot_rl.runtime.batched_actor import actor_class
from robot_rl.runtime.env_info import EnvDescriber
from robot_rl.runtime.learner import Learner
from robot_rl.transport import PeerUnavailableError, decode_arrays, encode_arrays


def _ray():
    try:
        import ray
    except ImportError as err:
        raise ConfigError("online.runtime=ray needs Ray: pip install 'robot-rl[ray]'") from err
    return ray


class RayLearnerLink:
    """:class:`~robot_rl.runtime.link.LearnerLink` over a Ray handle of the learner actor; each call waits
    at most ``timeout_s`` (``push_timeout_s`` for pushes) and raises PeerUnavailableError when the learner
    actor is unreachable or dead."""

    def __init__(self, handle, timeout_s: float = 5.0, push_timeout_s: float = 30.0) -> None:
        self.handle, self.timeout_s, self.push_timeout_s = handle, timeout_s, push_timeout_s

    def _get(self, ref, timeout_s: float, op: str):
        ray = _ray()
        try:
            return ray.get(ref, timeout=timeout_s)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError) as err:
            raise PeerUnavailableError(
                f"Ray learner did not answer {op!r} within {timeout_s:g} s: {err}"
            ) from err

    def bind_client(self, client: str) -> None:
        """Nothing to bind: a Ray run starts its actors itself, each with its own id."""

    def hello(self, actor: int) -> dict[str, Any]:
        return self._get(self.handle.hello.remote(actor), self.timeout_s, "hello")

    def push(self, actor: int, episode: int, frames: dict, meta: dict) -> dict[str, Any]:
        ref = self.handle.push_blob.remote(actor, episode, encode_arrays(frames), meta)
        return self._get(ref, self.push_timeout_s, "push")

    def weights(self, have: int) -> tuple[dict[str, Any], bytes | None]:
        return self._get(self.handle.weights.remote(have), self.timeout_s, "weights")

    def bye(self, actor: int, fault: str = "") -> dict[str, Any]:
        return self._get(self.handle.bye.remote(actor, fault), self.timeout_s, "bye")


def _decode_config(tree: dict) -> PipelineConfig:
    return draccus.decode(PipelineConfig, tree)


class _LearnerActor:
    """Ray actor body: a :class:`~robot_rl.runtime.learner.Learner` answering link calls while it trains
    (Ray runs them on concurrent threads; the learner is thread-safe)."""

    def __init__(self, cfg_tree: dict, seed: int, describe: EnvDescriber, agents: AgentFactory) -> None:
        cfg = _decode_config(cfg_tree)
        self.learner = Learner(cfg, seed, progress=False, env=describe(cfg), agents=agents)

    def train(self) -> dict:
        return self.learner.train()

    def hello(self, actor: int) -> dict:
        return self.learner.hello(actor)

    def push_blob(self, actor: int, episode: int, blob: bytes, meta: dict) -> dict:
        return self.learner.push(actor, episode, decode_arrays(blob), meta)

    def weights(self, have: int) -> tuple[dict, bytes | None]:
        return self.learner.weights(have)

    def bye(self, actor: int, fault: str = "") -> dict:
        return self.learner.bye(actor, fault)


class _ActorWorker:
    """Ray actor body: one :class:`~robot_rl.runtime.actor.Actor` (batched for ``online.envs_per_actor`` > 1)
    talking to the learner actor."""

    def __init__(self, cfg_tree: dict, seed: int, actor_id: int, learner, build) -> None:
        self.args = (_decode_config(cfg_tree), seed, actor_id, RayLearnerLink(learner), build)

    def run(self) -> dict:
        cfg, seed, actor_id, link, build = self.args
        return actor_class(cfg)(cfg, seed, actor_id, link, build(cfg, actor_id)).run()


def run_ray(
    cfg: PipelineConfig, seed: int, build: ActorBuilder, describe: EnvDescriber, agents: AgentFactory
) -> dict:
    """Train with one learner actor and ``cfg.online.num_actors`` actor actors; returns the learner's
    summary plus each actor's counters. ``build``: the actors' env-and-device builder (picklable: each
    worker builds its own with it); ``describe``: the learner's describer of their env (picklable too,
    :func:`robot_rl.actor_build.describe_env`); ``agents``: the learner's agent factory (the module
    :mod:`robot_rl.policies.factory`, which Ray's cloudpickle ships by name).

    Raises:
        ConfigError: Ray is not installed.
    """
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        if cfg.online.ray_address:
            ray.init(address=cfg.online.ray_address, include_dashboard=False, log_to_driver=False)
        else:
            cpus = max(os.cpu_count() or 1, cfg.online.num_actors + 1)
            ray.init(
                num_cpus=cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1"
            )
    try:
        tree = config_to_dict(cfg)
        learner = (
            ray.remote(max_concurrency=16)(_LearnerActor)
            .options(num_cpus=1)
            .remote(tree, seed, describe, agents)
        )
        worker = ray.remote(_ActorWorker).options(num_cpus=1)
        actors = [worker.remote(tree, seed, k, learner, build) for k in range(cfg.online.num_actors)]
        runs = [a.run.remote() for a in actors]
        summary = ray.get(learner.train.remote())
        counters = ray.get(runs)
        return {**summary, "actors": counters}
    finally:
        if started:
            ray.shutdown()
