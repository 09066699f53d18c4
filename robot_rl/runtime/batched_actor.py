"""The batched online actor: ``online.envs_per_actor`` = N > 1 simulated envs stepped as one batch.

Same contract as :class:`~robot_rl.runtime.actor.Actor` (docs/design.md §4, docs/algorithms.md §5): each
finished
episode is appended to the actor's zarr log with its own final observation (the state after its last
executed step) and pushed to the learner as one episode, so the learner's env-step count, its UTD limit
(``updates <= utd_ratio * (env steps - warmup_steps)``) and the ``online.env_steps`` budget count the
steps of all N envs. What changes:

- the N envs are the in-process ``mujoco_cpu`` batched env (:mod:`robot_rl.sim.batched_mujoco`, through
  :class:`~robot_rl.sim.batched_rollout.RolloutView`: no same-step auto-reset, each env is reset with an
  exact seed), built at the edge (:func:`robot_rl.actor_build.build_actor_parts`) and stepped by the rollout
  engine of every stage (:meth:`robot_rl.rollout.Rollout.run_schedule`);
- one policy forward serves every env whose chunk is used up, (B, h, d) at once. An env whose episode ends
  inside a chunk waits (is not stepped) until the next query of the others, then starts its next episode
  and joins that forward, so the envs stay in phase and each chunk boundary costs one forward, not N;
- seeds: episode ``j`` of env ``i`` of actor ``k`` (training seed ``s``) resets with
  ``2,000,000 + s * 1,000,000 + k * 100,000 + j * N + i`` (for N = 1 the single actor's seeds); the log
  keeps each episode's env (:data:`ENV_INDEX_KEY`) and seed (:data:`ENV_SEED_KEY`), and a restarted actor
  continues each env's seed sequence from its log;
- the intervention device (``sim_human``, ``keyboard``, ``gamepad``, ``spacemouse``) watches and drives
  env 0 only, with the single actor's arbiter: its action wins at once and truncates env 0's chunk, steps
  it drove are recorded with ``complementary_info.is_intervention``, a label ends env 0's episode, an
  e-stop ends env 0's episode and holds every env until it is released (the other envs finish the control
  step in progress first); the other envs run the policy
  (:class:`~robot_rl.runtime.takeover.BatchInterventionWrapper`). The web GUI is refused (config check):
  its live view and relabels address one env's episodes;
- with ``env.tasks`` (T suite tasks, N >= T) the batch is multi-task: env i of actor k runs
  ``env.tasks[(k + i) % T]`` with its own instruction (one the policy was not trained on stops the actor),
  so the device of actor k drives task ``k % T`` (``sim_human`` plays that task's scripted human) and
  T actors put a human on every task; the episode horizon is one for all (``env.max_episode_steps``);
- the ``online.max_env_steps_ahead`` throttle (:meth:`Actor._throttle`) counts the steps of every
  episode in flight;
- a policy forward that returns NaN/inf ends every queried env's episode (logged as truncated, nothing
  unsafe executed) and counts one ``policy_nan_stops``; ``online.max_nan_stops`` such forwards in a row
  without an episode ending normally stop the actor;
- the actor's lease (:mod:`robot_rl.runtime.leases`) holds for all N envs: an idle env starts its next
  episode only while the lease has room for it with every episode in flight counted at its longest, and
  when the steps in flight would pass the lease, episodes are cut there (the highest env first; logged as
  truncated with their final observation), so the actor never logs a step past its lease and the run never
  passes ``online.env_steps``, however many actors and envs;
- the stop (the learner reports the budget spent, or :meth:`Actor._should_stop`'s other reasons) is checked
  whenever an env needs a chunk, so it cuts every episode in flight at its next query moment: each is
  logged as truncated with its final observation, like an episode at ``max_steps``, and offered to the
  learner. (Waiting for an episode to end instead kept an actor whose N envs were all busy acting for up
  to ``max_steps`` steps past the budget, longer than the learner waits for its bye.)
"""

from __future__ import annotations

import logging
import math

import numpy as np

from robot_rl.algos.base import NonFiniteChunkError
from robot_rl.config import PipelineConfig
from robot_rl.rollout import NOT_EXECUTED, RecordedEpisode, Rollout, StepReport
from robot_rl.runtime.actor import Actor, ActorPolicy
from robot_rl.runtime.replay import final_spec
from robot_rl.runtime.takeover import DEVICE_ERROR, ESTOP, BatchInterventionWrapper

log = logging.getLogger(__name__)
ENV_INDEX_KEY = "actor.env_index"  # per-episode key of a batched actor's log: the env (0..N-1) it ran on
ENV_SEED_KEY = "actor.env_seed"  # per-episode key: the seed its env was reset with


def actor_class(cfg: PipelineConfig) -> type[Actor]:
    """:class:`BatchedActor` when ``online.envs_per_actor`` > 1, else :class:`Actor`."""
    return BatchedActor if cfg.online.envs_per_actor > 1 else Actor


class BatchedActor(Actor):
    """Actor ``actor_id`` stepping ``cfg.online.envs_per_actor`` simulated envs as one batch (module
    docstring); arguments as :class:`~robot_rl.runtime.actor.Actor`, with ``parts.env`` the N envs'
    :class:`~robot_rl.sim.batched_rollout.RolloutView` (:func:`robot_rl.actor_build.build_actor_parts`)."""

    @property
    def num_envs(self) -> int:  # type: ignore[override]
        """N, the envs stepped as one batch (``online.envs_per_actor``)."""
        return self.cfg.online.envs_per_actor

    @staticmethod
    def _log_episode_spec(shapes: dict[str, tuple[int, ...]]) -> dict:
        return {**final_spec(shapes), ENV_INDEX_KEY: ((), np.int64), ENV_SEED_KEY: ((), np.int64)}

    # -- acting --------------------------------------------------------------------------------------
    def _act(self) -> None:
        """Step the N envs on the rollout engine until :meth:`Actor._should_stop` (module docstring): the
        engine keeps the envs in phase (:meth:`robot_rl.rollout.Rollout.run_schedule`), :class:`_Schedule`
        starts, cuts and stops episodes, the device takes over env 0 through
        :class:`~robot_rl.runtime.takeover.BatchInterventionWrapper`, and :meth:`_episode_end` logs each
        finished episode.

        Raises:
            DeviceError, PolicyFaultError: as :meth:`Actor.run` (every episode in flight logged first).

        On a stop the episodes still in flight end there: each is logged as truncated with its final
        observation, like an episode at ``max_steps``, and offered to the learner. While the actor may
        not start an episode (its lease is spent, its weights stale) and none is in flight, it waits
        (:meth:`Actor._idle`)."""
        self._next = self._episodes_per_env()  # each env's next episode number
        self._policy = ActorPolicy(self)
        self._nan_error: Exception | None = None  # the NaN/inf forward that stopped the last episodes
        env = self.env if self.device is None else BatchInterventionWrapper(self.env, self.device, self.task)
        engine = Rollout(
            env,
            self._policy,
            stop_on=(NonFiniteChunkError,),
            end_when=lambda env_id, steps: steps >= self.max_steps,
            on_step=self._on_step,
            keep_on_error=True,  # the episodes in flight are logged (truncated), never dropped
        )
        try:
            engine.run_schedule(_Schedule(self), self._episode_end)
        except _Halt:
            return

    def _episodes_per_env(self) -> list[int]:
        """Episodes each env has logged (a restarted actor goes on with each env's seed sequence).

        Raises:
            ValueError: the log was written with another ``online.envs_per_actor``."""
        with self._log_lock:
            logged = self.log.episode_arrays()
        envs = np.asarray(logged[ENV_INDEX_KEY], np.int64)
        seeds = np.asarray(logged[ENV_SEED_KEY], np.int64)
        counts = [0] * self.num_envs
        for env, seed in zip(envs.tolist(), seeds.tolist(), strict=True):
            if not (0 <= env < self.num_envs and seed == self.env_seed(env, counts[env])):
                raise ValueError(
                    f"{self.log.path}: its episodes were run with another online.envs_per_actor than "
                    f"{self.num_envs}; keep it when resuming a run, or use another run_dir"
                )
            counts[env] += 1
        return counts

    def _within_budget(self, idle: np.ndarray) -> np.ndarray:
        """The idle envs to start (the lowest first, env 0 included): none while the actor may not act
        (:meth:`Actor._may_act`), else as many as its lease has room for with each episode in flight or
        started counted at its longest (``max_steps``; the last one started may be cut at the lease's end
        by :meth:`_lease_cut`)."""
        start = np.zeros_like(idle)
        if not self._may_act():
            return start
        room = self._lease_room() - int((~idle).sum()) * self.max_steps
        start[np.flatnonzero(idle)[: max(0, math.ceil(room / self.max_steps))]] = True
        return start

    def _lease_cut(self, steps: np.ndarray) -> np.ndarray:
        """The episodes in flight (``steps`` (N,) of each, -1 where idle) the lease has no step left for,
        the highest env first (each running env takes one step next; a renewal that came meanwhile counts),
        so the actor never logs a step past its lease."""
        running = np.flatnonzero(steps >= 0)
        room = self._lease_room() - int(steps[running].sum())
        cut = np.zeros(len(steps), bool)
        cut[running[::-1][: max(0, len(running) - max(room, 0))]] = True
        return cut

    def _on_step(self, env_id: int, step: StepReport) -> None:
        self._policy.steps[env_id] = step.steps
        self.counters["interventions"] += int(step.intervened)

    def _episode_end(self, ep: RecordedEpisode) -> None:
        """Log a finished episode of env ``ep.env_id`` (with its final observation, the state after its
        last executed step) and offer it to the learner (an episode without a step is not logged); then
        act on how it ended: a NaN/inf forward counts one ``policy_nan_stops`` per forward (a fault at
        ``online.max_nan_stops`` in a row), a device failure stops the actor, an e-stop holds every env
        until the device releases it.

        Raises:
            PolicyFaultError, DeviceError: as :meth:`Actor.run`; _Halt: the e-stop is still latched and the
            learner or the parent process is gone."""
        self._policy.steps.pop(ep.env_id, None)
        fault = None
        if ep.stopped_by is not None and ep.stopped_by is not self._nan_error:  # one per forward
            self._nan_error = ep.stopped_by
            log.error("actor %d: %s; the queried envs' episodes stopped safely", self.actor_id, ep.stopped_by)
            self.counters["policy_nan_stops"] += 1
            fault = self._nan_fault(True)
        if ep.steps:
            frames = self._episode_frames(ep)
            frames[ENV_INDEX_KEY] = np.int64(ep.env_id)
            frames[ENV_SEED_KEY] = np.int64(ep.env_seed)
            self.live.episode_end(frames, self._record(frames))
        if not (ep.cut or ep.stopped_by is not None or ep.final_info.get(NOT_EXECUTED)):
            self._nan_fault(False)  # an episode that ended normally
        if fault is not None:
            self._flush(fault=str(fault))
            raise fault from ep.stopped_by
        error = ep.final_info.get(DEVICE_ERROR)
        if error is not None:
            log.error("actor %d: %s; stopping every episode safely", self.actor_id, error)
            raise error
        if ep.final_info.get(ESTOP):  # nothing is executed until the device releases it
            log.warning("actor %d: e-stop; env 0's episode ended, every env holds", self.actor_id)
            self._estopped = True
            error = self._hold_while_stopped()
            if error is not None:
                raise error
            if self._estopped:  # link or parent gone
                self._should_stop()  # raises the link's error
                raise _Halt


class _Halt(Exception):
    """Ends the batched actor's rollout without an error (the e-stop is still latched and the parent process
    is gone); the episodes in flight are logged first."""


class _Schedule:
    """The batched actor's :class:`robot_rl.rollout.Schedule`: its stop, its lease (which idle envs start,
    which episodes are cut) and its seeds (episode ``j`` of env ``i``: :meth:`Actor.env_seed`)."""

    def __init__(self, actor: BatchedActor) -> None:
        self.actor = actor

    def stop(self) -> bool:
        """:meth:`Actor._should_stop` (raises the link's error or the learner's fault)."""
        return self.actor._should_stop()

    def start(self, idle: np.ndarray) -> dict[int, int | None]:
        actor = self.actor
        start = actor._within_budget(idle)
        if start.any():
            actor._waiting = ""
        seeds = {}
        for i in np.flatnonzero(start):
            seeds[int(i)] = actor.env_seed(int(i), actor._next[i])
            actor._next[i] += 1
        return seeds

    def cut(self, steps: np.ndarray) -> np.ndarray:
        return self.actor._lease_cut(steps)

    def wait(self) -> bool:
        """Until the lease is renewed or the learner ends the run (:meth:`Actor._idle`)."""
        self.actor._idle()
        return True
