"""The batched online actor: ``online.envs_per_actor`` = N > 1 simulated envs stepped as one batch.

Same contract as :class:`~robot_rl.runtime.actor.Actor` (docs/design.md §4, docs/algorithms.md §5): each
finished
episode is appended to the actor's zarr log with its own final observation (the state after its last
executed step) and pushed to the learner as one episode, so the learner's env-step count, its UTD limit
(``updates <= utd_ratio * (env steps - warmup_steps)``) and the ``online.env_steps`` budget count the
steps of all N envs. What changes:

- the N envs are the in-process ``mujoco_cpu`` batched env (:mod:`robot_rl.sim.batched_mujoco`, through
  :class:`~robot_rl.sim.batched_rollout.RolloutView`: no same-step auto-reset, each env is reset with an
  exact seed);
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
  e-stop ends env 0's episode and holds every env until it is released; the other envs run the policy.
  The web GUI is refused (config check): its live view and relabels address one env's episodes;
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
from typing import Any

import numpy as np

from robot_rl.config import PipelineConfig
from robot_rl.runtime.actor import Actor
from robot_rl.runtime.episode_edits import label_values
from robot_rl.runtime.intervention import DeviceError, start_episode
from robot_rl.runtime.replay import final_spec

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
        """Step the N envs until :meth:`_should_stop` (module docstring): each iteration starts idle envs
        at a query moment, polls the device for env 0, queries one chunk for the envs that need one and
        executes one control step of every running env.

        Raises:
            DeviceError, PolicyFaultError: as :meth:`Actor.run` (every episode in flight logged first).

        On a stop the episodes still in flight end there: each is logged as truncated with its final
        observation, like an episode at ``max_steps``, and offered to the learner. While the actor may
        not start an episode (its lease is spent, its weights stale) and none is in flight, it waits
        (:meth:`Actor._idle`)."""
        n = self.num_envs
        self._next = self._episodes_per_env()  # each env's next episode number
        self._seeds = [0] * n
        self._steps: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        self._queues: list[list[np.ndarray]] = [[] for _ in range(n)]
        self._task_indices = [0] * n  # each env's episode's instruction (Actor._task_index)
        self._running = np.zeros(n, dtype=bool)  # an episode is in flight
        self._obs: dict[str, np.ndarray] = {}
        while True:
            idle = ~self._running
            empty = np.array([self._running[i] and not self._queues[i] for i in range(n)])
            if empty.any() or not self._running.any():  # a query moment: a stop cuts every episode here
                try:
                    stop = self._should_stop()
                except Exception:
                    self._end_all()  # the episodes in flight are logged (truncated), never dropped
                    raise
                if stop:
                    self._end_all()
                    return
                if idle.any():
                    start = self._within_budget(idle)
                    if not start.any() and not self._running.any():
                        self._idle()  # until the lease is renewed or the learner ends the run
                        continue
                    self._waiting = ""
                    self._start(start)
            self._cut_to_lease()
            if not self._running.any():
                continue
            human = self._poll()
            if human is not None and human.stop:  # e-stop: nothing is executed until the device releases it
                log.warning("actor %d: e-stop; env 0's episode ended, every env holds", self.actor_id)
                self._end(0)
                self._estopped = True
                error = self._hold_while_stopped()
                if error is not None or self._estopped:  # the device failed, or link / parent gone
                    self._end_all()
                    if error is not None:
                        raise error
                    self._should_stop()  # raises the link's error
                    return
                continue
            if human is not None and human.label is not None:
                self._end(0, label=human.label)
                continue
            intervened = human is not None and human.action is not None
            if intervened:
                action0 = np.clip(np.asarray(human.action, np.float32), self.low, self.high)
                if not np.isfinite(action0).all():
                    self._end_all()
                    raise DeviceError("the intervention device sent a NaN/inf action; it was not executed")
                self._queues[0].clear()  # the human wins within this control step; the chunk is truncated
            query = [
                i
                for i in range(n)
                if self._running[i] and not self._queues[i] and not (i == 0 and intervened)
            ]
            if query and not self._query(query):
                continue
            self._step(action0 if intervened else None)

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
        by :meth:`_cut_to_lease`)."""
        start = np.zeros_like(idle)
        if not self._may_act():
            return start
        room = self._lease_room() - int(self._running.sum()) * self.max_steps
        start[np.flatnonzero(idle)[: max(0, math.ceil(room / self.max_steps))]] = True
        return start

    def _cut_to_lease(self) -> None:
        """End the episodes in flight that the lease has no step left for, the highest env first (each
        running env takes one step next; a renewal that came meanwhile counts), so the actor never logs a
        step past its lease."""
        running = np.flatnonzero(self._running)
        room = self._lease_room() - sum(len(self._steps[i]) for i in running)
        for i in running[::-1][: max(0, len(running) - max(room, 0))]:
            self._end(int(i))

    def _start(self, mask: np.ndarray) -> None:
        """Reset the envs where ``mask`` with their next seeds and start their episodes."""
        envs = np.flatnonzero(mask)
        seeds: list[int | None] = [None] * self.num_envs
        for i in envs:
            self._seeds[i] = seeds[i] = self.env_seed(int(i), self._next[i])
            self._next[i] += 1
        obs, _ = self.env.reset(seed=seeds, options={"reset_mask": mask})
        self._obs = obs
        instructions = self.env.env.tasks()  # drawn per episode by some tasks (pick-colour)
        for i in envs:
            self._task_indices[i] = self._task_index(instructions[i])
            if i == 0 and self.device is not None:
                start_episode(self.device, self._seeds[0], instructions[0])
            self.source.reset(int(i), self._seeds[i])
            self._steps[i], self._queues[i] = [], []
        self._running |= mask

    def _poll(self):
        """The device's input for env 0 (None without a device or while env 0 waits to start).

        Raises:
            DeviceError: the device failed (every episode in flight is logged first)."""
        if self.device is None or not self._running[0]:
            return None
        try:
            return self.device.poll({k: self._obs[k][0] for k in self._obs})
        except DeviceError as err:
            log.error("actor %d: %s; stopping every episode safely", self.actor_id, err)
            self._end_all()
            raise

    def _query(self, envs: list[int]) -> bool:
        """One policy forward for ``envs``; fills their queues. Returns False when it produced NaN/inf
        (those envs' episodes are ended, nothing was executed).

        Raises:
            PolicyFaultError: ``online.max_nan_stops`` NaN/inf forwards in a row."""
        from robot_rl.algos.base import NonFiniteChunkError  # imported with the source, light here

        self._load_policy()  # between chunks: swap in newer weights
        self._throttle(sum(len(s) for s in self._steps))
        rows = np.asarray(envs)
        try:
            batch = {k: self._obs[k][rows] for k in self.obs_keys}
            chunks = self.source(self._policy_obs(batch, [self._task_indices[i] for i in envs]), rows)
        except NonFiniteChunkError as err:  # never sent to the robot
            log.error("actor %d: %s; episodes of envs %s stopped safely", self.actor_id, err, envs)
            self.counters["policy_nan_stops"] += 1
            for i in envs:
                self._end(i)
            fault = self._nan_fault(True)
            if fault is not None:
                self._flush(self.cfg.online.connect_timeout_s, fault=str(fault))
                raise fault from err
            return False
        for i, chunk in zip(envs, chunks, strict=True):
            self._queues[i] = list(chunk)
        return True

    def _step(self, human_action: np.ndarray | None) -> None:
        """One control step of every running env (env 0 takes ``human_action`` when given); records the
        steps and ends the episodes that finished."""
        running = np.flatnonzero(self._running)
        actions = np.tile((self.low + self.high) / 2, (self.num_envs, 1))
        for i in running:
            action = human_action if (i == 0 and human_action is not None) else self._queues[i].pop(0)
            actions[i] = action
            self.source.executed(int(i), action)
        next_obs, reward, terminated, truncated, info = self.env.step(actions)
        self.counters["interventions"] += int(human_action is not None)
        for i in running:
            obs = {k: self._obs[k][i] for k in self.obs_keys}
            success, intervened = info["is_success"][i], i == 0 and human_action is not None
            frame = self._step_frame(
                obs, actions[i], reward[i], terminated[i], success, intervened, self._task_indices[i]
            )
            self._steps[i].append(frame)
        self._obs = next_obs
        for i in running:
            if terminated[i] or truncated[i] or len(self._steps[i]) >= self.max_steps:
                self._end(int(i))
                self._nan_fault(False)

    def _end(self, env: int, label: str | None = None) -> None:
        """End env ``env``'s episode: log it (with its final observation: the env's current one, the state
        after its last executed step) and offer it to the learner; ``label`` (a human's success /
        failure) relabels its last step. An episode without a step is not logged."""
        self._running[env] = False
        self.env.end(np.arange(self.num_envs) == env)
        steps, self._steps[env], self._queues[env] = self._steps[env], [], []
        if not steps:
            return
        if label is not None:  # the same rule as a recorded relabel (episode_edits)
            steps[-1].update(label_values(label))
        frames = self._frames(steps, {k: self._obs[k][env] for k in self.obs_keys})
        frames[ENV_INDEX_KEY] = np.int64(env)
        frames[ENV_SEED_KEY] = np.int64(self._seeds[env])
        self.live.episode_end(frames, self._record(frames))

    def _end_all(self) -> None:
        """End (log) every episode in flight, e.g. when the device failed."""
        for i in np.flatnonzero(self._running):
            self._end(int(i))
