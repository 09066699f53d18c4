"""The online actor: runs the policy on one env, lets a human take over, records episodes durably.

Its env and device come from the edge (:mod:`robot_rl.runtime.actor_parts`); each episode runs on the
rollout engine (:class:`robot_rl.rollout.Rollout`) with the device behind
:class:`~robot_rl.runtime.takeover.InterventionWrapper`.

Each control step (docs/design.md §4, docs/algorithms.md §5):
1. the intervention device is polled; a human action wins at once and the rest of the current chunk is
   dropped, a human success/failure label ends the episode;
2. otherwise the next action of the current chunk runs; a new chunk is queried when it is used up, and only
   then are newer weights swapped in (between chunks, never inside one);
3. every executed action goes through the safety filter: a NaN/inf chunk is never sent (the episode stops
   safely, as truncated), finite actions are clipped to the action box.

A finished episode is appended to the actor's own zarr log (``actor<k>/episodes``) before it is offered
to the learner; a background thread pushes every logged episode the learner has not acknowledged and
polls for weights. The control loop never waits on the link: it reads what that thread last heard.
An actor killed mid-episode loses only that unfinished episode.

The run's budget (``online.env_steps``, over all actors) holds with the learner up or down: the actor
logs no step past the lease the learner granted it (:mod:`robot_rl.runtime.leases`; an episode in flight
is cut where the lease ends). While the learner is unreachable it acts on with its last weights until its
lease is spent, or until ``online.max_weight_age_s`` without contact; then it stops acting but not
running: it keeps its episodes on disk, delivers them whenever the learner is back (no time limit; only
its parent process gone or an operator's Ctrl-C ends the wait), and acts again on a renewed lease.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl import keys
from robot_rl.algos.base import NonFiniteChunkError
from robot_rl.checkpoint import CONFIG_FILE, MODEL_FILE, NORM_FILE
from robot_rl.config import PipelineConfig
from robot_rl.data.normalize import save_stats, stats_from_json
from robot_rl.data.prev_action import prev_action_start, prev_action_steps
from robot_rl.data.replay import ZarrReplayBuffer
from robot_rl.rollout import RecordedEpisode, Rollout, StepReport
from robot_rl.run_dir import RunDir, online_name
from robot_rl.runtime.actor_claim import log_id
from robot_rl.runtime.actor_parts import ActorParts
from robot_rl.runtime.intervention import DeviceError
from robot_rl.runtime.leases import ActorLease
from robot_rl.runtime.link import ActorIdError, LearnerLink
from robot_rl.runtime.live import LiveStats
from robot_rl.runtime.messages import MAX_FAULT_CHARS, max_episode_steps
from robot_rl.runtime.metrics import episode_meta
from robot_rl.runtime.replay import episode_spec, final_spec
from robot_rl.runtime.takeover import DEVICE_ERROR, ESTOP, InterventionWrapper
from robot_rl.runtime.weights import load_weights
from robot_rl.single_env import SingleEnvVector
from robot_rl.sources import AgentSource, PrevActionSource
from robot_rl.threads import set_threads
from robot_rl.transport import PeerUnavailableError

log = logging.getLogger(__name__)
ONLINE_SEED_OFFSET = 2_000_000  # online env seeds; demos use 0.., evaluation 1,000,000..
ACTOR_SEED_STRIDE = 100_000
POLL_S = 0.1
WAIT_REPORT_S = 30.0  # between log lines saying why an actor is not acting and what it holds
CONTACT_S = 5.0  # a connected sender that completed no exchange for this long is not waited on


class PolicyFaultError(RuntimeError):
    """The policy produced NaN/inf chunks ``online.max_nan_stops`` episodes in a row: the actor stops (a
    real robot holds) instead of spinning through resets with a broken policy."""


class RejectedEpisodesError(RuntimeError):
    """The learner rejected ``online.max_rejected_episodes`` of this actor's episodes in a row (their values
    leave the run's ranges: robot_rl.runtime.episode_guard): the actor says bye with this fault and stops
    instead of spending robot time on data that is never stored. Its episode log keeps every episode."""


def actor_folder(cfg: PipelineConfig, seed: int, actor_id: int) -> Path:
    """``<run_dir>/online/<name>_seed<seed>/actor<actor_id>``: the actor's episode log and cached policy."""
    return RunDir(cfg.run_dir).root / "online" / f"{online_name(cfg)}_seed{seed}" / f"actor{actor_id}"


class _Sender(threading.Thread):
    """Pushes unacknowledged logged episodes to the learner and fetches newer weights, in the background."""

    def __init__(self, actor: Actor) -> None:
        super().__init__(name=f"actor{actor.actor_id}-sender", daemon=True)
        self.actor = actor
        self.closed = threading.Event()
        self.wake = threading.Event()
        self.connected = False
        self.acked = -1  # unknown until hello
        self.delivered = 0  # episodes the learner last acknowledged (kept while it is unreachable)
        self.spec: dict | None = None
        self.episode_keys: list[str] = []  # what a push holds, from the learner's hello
        self.max_steps = 0
        self.status: dict[str, Any] = {}
        self.pending: tuple[int, bytes] | None = None
        self.have = -1
        self.latest = -1  # the newest weight version the learner has published
        self.error: Exception | None = None
        self.rejected_streak = 0  # episodes in a row the learner rejected
        self.fault: RejectedEpisodesError | None = None  # set once the streak reaches the limit
        self.last_contact = time.monotonic()  # of the last completed exchange with the learner

    def run(self) -> None:
        backoff, said_down = 0.2, False  # said_down: this outage was logged (once; the actor logs on)
        while not self.closed.is_set():
            try:
                self._cycle()
                if not self.connected:
                    log.info("actor %d: connected to the learner", self.actor.actor_id)
                self.connected, backoff, self.last_contact, said_down = True, 0.2, time.monotonic(), False
                self.wake.wait(POLL_S)
                self.wake.clear()
            except Exception as err:  # the learner refused something: stop the actor, loudly
                if not isinstance(err, PeerUnavailableError):
                    log.error("actor %d: the learner link failed: %s", self.actor.actor_id, err)
                    self.error = err
                    self.closed.set()
                    return
                if not said_down:
                    log.warning(
                        "actor %d: learner unreachable, acting on within its lease (%d env steps) and "
                        "retrying: %s",
                        self.actor.actor_id,
                        self.actor.lease.steps,
                        err,
                    )
                    said_down = True
                self.connected = False
                self.acked = -1
                self.closed.wait(backoff)
                backoff = min(2 * backoff, 5.0)

    def _rejected(self, reason: str) -> None:
        """Count a rejected episode; at ``online.max_rejected_episodes`` in a row, set :attr:`fault`."""
        self.rejected_streak += 1
        limit = self.actor.cfg.online.max_rejected_episodes
        if self.rejected_streak >= limit and self.fault is None:
            self.fault = RejectedEpisodesError(
                f"actor {self.actor.actor_id}: the learner rejected {limit} episodes in a row "
                f"(online.max_rejected_episodes), the last one: {reason}; stopping: check the robot's "
                f"sensors and action scaling against the training data (the episodes stay in "
                f"{self.actor.log.path})"
            )

    def _take(self, status: dict[str, Any]) -> None:
        """Keep the learner's ``status`` and this actor's lease in it (on disk before it is used)."""
        lease = status.get("leases", {}).get(str(self.actor.actor_id))
        if lease is not None:
            self.actor.lease.set(int(lease))
        self.status = status

    def _cycle(self) -> None:
        """Say hello (after a (re)connect), fetch newer weights and the status (a 2-s probe: a learner
        that died is found before a push waits its longer timeout on it), then push every logged episode
        the learner has not acknowledged."""
        link, actor = self.actor.link, self.actor
        if self.acked < 0:
            reply = link.hello(actor.actor_id)
            self.spec, self.acked = reply["spec"], int(reply["acked"])
            self._take(reply["status"])
            self.episode_keys, self.max_steps = reply["episode_keys"], int(reply["max_episode_steps"])
            if self.acked > actor.num_logged():
                raise ActorIdError(
                    f"the learner holds {self.acked} episodes of actor {actor.actor_id} but its log "
                    f"{actor.log.path} has {actor.num_logged()}: another actor uses this id, or the log was "
                    "deleted"
                )
            self.delivered = self.acked
        head, blob = link.weights(self.have)
        self._take(head["status"])
        self.latest = int(head["version"])
        if blob is not None:
            self.pending, self.have = (int(head["version"]), blob), int(head["version"])
        while self.acked < actor.num_logged():
            logged = actor.logged_episode(self.acked)
            missing = sorted(set(self.episode_keys) - set(logged))
            if missing or len(logged[keys.ACTION]) > self.max_steps:
                raise RuntimeError(
                    f"episode {self.acked} of {actor.log.path} does not fit the learner: it lacks {missing} "
                    f"or has more than {self.max_steps} steps (online.max_episode_steps)"
                )
            frames = {k: logged[k] for k in self.episode_keys}  # not the cameras only a critic reads
            meta = episode_meta(frames, actor.cfg.env.control_hz, actor.versions.get(self.acked, self.have))
            reply = link.push(actor.actor_id, self.acked, frames, meta)
            if reply.get("rejected"):  # acknowledged, not stored: this log keeps the episode
                log.warning("actor %d: the learner rejected %s", actor.actor_id, reply["rejected"])
                actor.lease.reject(len(frames[keys.ACTION]))  # its steps count for no lease
                self._rejected(reply["rejected"])
            else:
                self.rejected_streak = 0
            self.acked = self.delivered = int(reply["acked"])
            self._take(reply["status"])
            self.last_contact = time.monotonic()


class Actor:
    """Actor ``actor_id`` of online run ``cfg.run_dir`` / training seed ``seed``.

    Args:
        link: the learner link (ZeroMQ or Ray); bound to this actor's episode log id (``actor_claim``).
        parts: its env and intervention device, built at the edge (:mod:`robot_rl.runtime.actor_parts`);
            the actor closes them when :meth:`run` ends.
        parent_pid: when given, the actor stops once that process is gone (it was started by it).
    """

    def __init__(
        self,
        cfg: PipelineConfig,
        seed: int,
        actor_id: int,
        link: LearnerLink,
        parts: ActorParts,
        parent_pid: int | None = None,
    ) -> None:
        self.cfg, self.seed, self.actor_id, self.link, self.parent_pid = cfg, seed, actor_id, link, parent_pid
        set_threads(cfg.threads, cfg.online.num_actors + 1)  # actors share the CPU with the learner
        self.dir = actor_folder(cfg, seed, actor_id)
        link.bind_client(log_id(self.dir))  # the learner knows this actor by its episode log
        self.env, space, action_space = parts.env, parts.observation_space, parts.action_space
        self.task, self.robot = parts.task, parts.robot
        self.obs_keys = sorted(space)
        shapes = {k: tuple(int(d) for d in s.shape) for k, s in space.items()}
        self.low = action_space.low.astype(np.float32)
        self.high = action_space.high.astype(np.float32)
        self.log = ZarrReplayBuffer(
            self.dir / "episodes", episode_spec(shapes, len(self.low)), self._log_episode_spec(shapes)
        )
        self._log_lock = threading.Lock()
        self.device = parts.device
        self.agents = parts.agents
        self.observe = getattr(self.device, "observe", None)  # optional: a device that displays the run
        self.live = LiveStats(actor_id, cfg.env.control_hz, edits_dir=self.dir.parent)
        self.versions: dict[int, int] = {}
        self.lease = ActorLease(self.dir)  # env steps this actor may log in all (robot_rl.runtime.leases)
        self._waiting = ""  # why the actor is not acting now ("" while it acts), for _wait_note
        self._wait_start = self._next_note = 0.0
        self.version = -1
        self.source = None  # robot_rl.sources.PrevActionSource around an AgentSource once weights arrived
        self.max_steps = max_episode_steps(cfg)  # episodes are truncated there, as the learner caps them
        self.counters = {"episodes": 0, "steps": 0, "policy_nan_stops": 0, "interventions": 0}
        self.tasks: list[str] = []  # the policy's instruction vocabulary (policy.tasks), set with the policy
        self._nan_streak = 0  # episodes in a row stopped by a NaN/inf chunk
        self._estopped = False  # the device ended the last episode with a latched e-stop
        self.sender = _Sender(self)

    # -- wiring --------------------------------------------------------------------------------------
    num_envs = 1  # envs stepped as one batch (robot_rl.runtime.batched_actor: online.envs_per_actor)

    @staticmethod
    def _log_episode_spec(shapes: dict[str, tuple[int, ...]]) -> dict:
        """Per-episode keys of the episode log: the final observation."""
        return final_spec(shapes)

    def num_logged(self) -> int:
        with self._log_lock:
            return self.log.num_episodes

    def logged_episode(self, index: int) -> dict[str, np.ndarray]:
        with self._log_lock:
            return self.log.episode(index)

    def _policy_dir(self) -> Path:
        return self.dir / "policy"

    def _load_policy(self) -> bool:
        """Build or refresh the policy from the newest weights: from the learner if any arrived, else from
        the cached copy of a previous run. Returns whether a policy is ready."""
        pending, self.sender.pending = self.sender.pending, None
        spec = self.sender.spec
        folder = self._policy_dir()
        if pending is not None and spec is not None:
            version, blob = pending
            if self.source is not None:
                load_weights(self.source.agent, blob)
            self._cache(folder, spec, blob, version, with_spec=self.source is None)
            self.version = version
        if self.source is None and (folder / MODEL_FILE).is_file():
            agent, header = self.agents.load_agent(folder, device=self.cfg.device)
            config = header.config
            agent.train()  # stochastic action sampling for exploration where the agent has it
            self.tasks = list((config.get("policy") or {}).get("tasks") or [])
            self.version = int(json.loads((folder / "version.json").read_text())["version"])
            inner = AgentSource(
                agent,
                list(config["obs_keys"]),
                self.low,
                self.high,
                self.cfg.device,
                self.cfg.policy.execution,
                self.cfg.policy.ensemble_decay,
                num_envs=self.num_envs,
            )  # observation.prev_action: the executed action (the human's too), reported in _episode
            start, steps = prev_action_start(config), prev_action_steps(config)
            self.source = PrevActionSource(inner, start, len(self.low), self.num_envs, steps)
        return self.source is not None

    @staticmethod
    def _cache(folder: Path, spec: dict, blob: bytes, version: int, with_spec: bool) -> None:
        """Keep the newest weights on disk (each file replaced atomically) for a restart without learner;
        ``with_spec`` also (re)writes the config and normalisation, which do not change within a run."""
        folder.mkdir(parents=True, exist_ok=True)
        files = (
            [  # the model last: its presence is what marks the cache usable
                (CONFIG_FILE, lambda p: p.write_text(json.dumps(spec["config"]))),
                (NORM_FILE, lambda p: save_stats(stats_from_json(spec["stats"]), p)),
            ]
            if with_spec
            else []
        )
        files += [
            ("version.json", lambda p: p.write_text(json.dumps({"version": version}))),
            (MODEL_FILE, lambda p: p.write_bytes(blob)),
        ]
        for name, write in files:
            tmp = folder / (name + ".tmp")
            try:
                write(tmp)
                os.replace(tmp, folder / name)
            except OSError as err:
                tmp.unlink(missing_ok=True)
                raise OSError(err.errno, err.strerror, str(folder / name)) from err

    # -- acting --------------------------------------------------------------------------------------
    def _should_stop(self) -> bool:
        """Stop when the learner has said the run's budget is in (``status["stop"]``), or when the process
        that started this actor is gone.

        Raises:
            Exception: the error that stopped the link (the learner refused something).
            RejectedEpisodesError: the learner rejected too many episodes in a row (after a bye saying so).
        """
        if self.sender.error is not None:
            raise self.sender.error
        if self.sender.fault is not None:  # the learner hears why, then the actor stops
            self._flush(fault=str(self.sender.fault))
            raise self.sender.fault
        if self._parent_gone():
            log.warning("actor %d: the process that started it is gone; stopping", self.actor_id)
            return True
        return bool(self.sender.status.get("stop"))

    def _parent_gone(self) -> bool:
        return self.parent_pid is not None and os.getppid() != self.parent_pid

    def _logged_steps(self) -> int:
        """Env steps in the episode log. Read without the log lock (the sender holds it while it reads an
        episode): only this, the control thread, appends to the log."""
        return len(self.log)

    def _lease_room(self) -> int:
        """Env steps this actor may still log: its lease less every step in its log but those of the
        episodes the learner rejected (:mod:`robot_rl.runtime.leases`)."""
        return self.lease.steps - (self._logged_steps() - self.lease.rejected)

    def _stale(self) -> bool:
        """Whether the learner has been unreachable for more than ``online.max_weight_age_s`` (0: never)."""
        limit = self.cfg.online.max_weight_age_s
        age = time.monotonic() - self.sender.last_contact
        return limit > 0 and not self.sender.connected and age > limit

    def _may_act(self) -> bool:
        """Whether the actor may start acting: its lease has room and its weights are not stale."""
        return self._lease_room() > 0 and not self._stale()

    def _idle(self) -> None:
        """Wait one poll period instead of acting (:meth:`_may_act` is False), saying why
        (:meth:`_wait_note`); the sender delivers meanwhile."""
        if self._stale():
            age = time.monotonic() - self.sender.last_contact
            self._wait_note(
                "stale",
                f"no contact with the learner at {self.cfg.online.address} for {age:.0f} s "
                f"(online.max_weight_age_s={self.cfg.online.max_weight_age_s:g}): not acting on stale "
                f"weights (version {self.version}) until it is back",
            )
        else:
            self._wait_note(
                "lease",
                f"its lease of {self.lease.steps} env steps is spent (online.env_steps="
                f"{self.cfg.online.env_steps} over all actors): waiting for the learner to renew it or end "
                "the run",
            )
        time.sleep(POLL_S)

    def _wait_note(self, why: str, message: str) -> None:
        """Log ``message`` (why the actor is not acting, keyed ``why``) when the reason changes and every
        :data:`WAIT_REPORT_S` s while it lasts, with how long it has lasted and what is not delivered."""
        now = time.monotonic()
        if why == self._waiting and now < self._next_note:
            return
        if why != self._waiting:
            self._waiting, self._wait_start = why, now
        self._next_note = now + WAIT_REPORT_S
        episodes = self.num_logged() - self.sender.delivered
        log.warning(
            "actor %d: %s (%.0f s); %d episodes not yet delivered, kept in %s",
            self.actor_id,
            message,
            now - self._wait_start,
            episodes,
            self.log.path,
        )

    def _throttle(self, episode_steps: int) -> None:
        """Simulation only (``online.max_env_steps_ahead`` > 0): wait while this actor is too far ahead of
        the learner's updates; ``episode_steps``: the steps of the episodes in flight. Never waits while the
        learner is unreachable or silent (no exchange completed for :data:`CONTACT_S`: a push to a learner
        that just died waits out its timeout), nor while it has done every update the steps it holds allow
        and none of this actor's steps are unsent: no update could come, so waiting would never end (an
        episode longer than ``max_env_steps_ahead`` once hung a single-env actor here)."""
        while self._in_contact() and not self.sender.closed.is_set():
            status = self.sender.status
            allowed = int(status.get("allowed_env_steps", -1))
            unsent = self._unsent_steps()
            if allowed < 0 or int(status.get("env_steps", 0)) + unsent + episode_steps <= allowed:
                return
            if status.get("caught_up") and unsent == 0:  # the learner's own UTD rule (updates_allowed)
                return
            self.sender.closed.wait(0.02)

    def _in_contact(self) -> bool:
        """Whether the sender is connected and completed an exchange within the last :data:`CONTACT_S`."""
        return self.sender.connected and time.monotonic() - self.sender.last_contact < CONTACT_S

    def _unsent_steps(self) -> int:
        """Steps of the logged episodes the learner has not acknowledged (from the log itself, so episodes
        left over from an earlier run of this actor count too)."""
        acked = max(self.sender.acked, 0)
        with self._log_lock:
            sent = int(self.log.episode_ends[acked - 1]) if acked else 0
            return len(self.log) - sent

    def _wait_for_policy(self) -> None:
        """Wait for a policy: the learner's weights, or those cached by an earlier run of this actor.

        Raises:
            PeerUnavailableError: none after ``online.connect_timeout_s`` while this actor has no episode
                to deliver (a new actor that cannot reach the learner: a wrong address, or no learner).
                With episodes to deliver it waits on, as :meth:`_flush` does.
            Exception: the error that stopped the link.
        """
        timeout_s = self.cfg.online.connect_timeout_s
        deadline = time.monotonic() + timeout_s
        while not self._load_policy() and not self._parent_gone():
            if self.sender.error is not None:
                raise self.sender.error
            if time.monotonic() > deadline:
                if self.num_logged() == 0:
                    raise PeerUnavailableError(
                        f"actor {self.actor_id}: no policy after {timeout_s:.0f} s: the learner at "
                        f"{self.cfg.online.address} never answered and {self._policy_dir()} has no cached "
                        "weights"
                    )
                self._wait_note(
                    "policy", f"no policy yet: waiting for the learner at {self.cfg.online.address}"
                )
            time.sleep(POLL_S)

    def run(self) -> dict[str, Any]:
        """Act within the lease until the learner reports the env-step budget in (or the parent is gone);
        then deliver the backlog (:meth:`_flush`) and say bye. Returns the actor's counters.

        Raises:
            DeviceError: the intervention device failed mid-run (the episode so far is recorded first).
            PolicyFaultError: ``online.max_nan_stops`` episodes in a row ended on a NaN/inf chunk.
        """
        self.sender.start()
        try:
            self._wait_for_policy()
            self._act()
            self._flush()
        finally:
            self.sender.closed.set()
            self.sender.join(timeout=5)
            if self.device is not None:
                self.device.close()
            self.env.close()
        return dict(self.counters)

    def _act(self) -> None:
        """Run episodes, each logged and offered to the learner, until :meth:`_should_stop`; while the
        actor may not act (:meth:`_may_act`: its lease is spent, its weights stale) it waits instead.

        Raises:
            DeviceError, PolicyFaultError: as :meth:`run`."""
        while not self._should_stop():
            if not self._may_act():
                self._idle()
                continue
            self._waiting = ""
            index = self.num_logged()
            nan_stops = self.counters["policy_nan_stops"]
            frames, error = self._episode(self.env_seed(0, index), within_lease=True)
            fault = self._nan_fault(self.counters["policy_nan_stops"] > nan_stops)
            if frames is not None:
                self._record(frames)
            self.live.episode_end(frames, index)
            if error is None and self._estopped:
                error = self._hold_while_stopped()
            if fault is not None:  # the recorded episodes still reach the learner, then it hears why
                self._flush(fault=str(fault))
                raise fault
            if error is not None:
                raise error

    def env_seed(self, env: int, episode: int) -> int:
        """The reset seed of episode ``episode`` (0, 1, ...) of env ``env`` of this actor: ``2,000,000 +
        seed * 1,000,000 + actor_id * 100,000 + episode * num_envs + env``."""
        base = ONLINE_SEED_OFFSET + self.seed * 10 * ACTOR_SEED_STRIDE + self.actor_id * ACTOR_SEED_STRIDE
        return base + episode * self.num_envs + env

    def _record(self, frames: dict[str, np.ndarray]) -> int:
        """Append a finished episode to the log and offer it to the learner; returns its index."""
        with self._log_lock:
            index = self.log.add_episode(frames, source="online")
        self.versions[index] = self.version
        self.counters["episodes"] += 1
        self.counters["steps"] += len(frames[keys.ACTION])
        self.sender.wake.set()
        return index

    def _task_index(self, instruction: str) -> int:
        """An episode's ``task_index``: ``instruction``'s index in the policy's ``policy.tasks`` (0 for a
        policy conditioned on no instruction).

        Raises:
            ValueError: the policy was not trained on ``instruction`` (names it and the vocabulary)."""
        if not self.tasks:
            return 0
        if instruction not in self.tasks:
            raise ValueError(
                f"actor {self.actor_id}: the env's instruction {instruction!r} is not one the policy was "
                f"trained on (policy.tasks: {self.tasks})"
            )
        return self.tasks.index(instruction)

    def _policy_obs(self, obs: dict[str, np.ndarray], task_indices: list[int]) -> dict:
        """The policy's input for a batch of (B, ...) observations: with the episodes' instructions (their
        ``task_indices`` (B,) into ``policy.tasks``) as ``obs["task"]`` when the policy is conditioned on
        several."""
        if not self.tasks:
            return obs
        return {**obs, keys.TASK: np.asarray(self.tasks, dtype=object)[task_indices]}

    def _episode_frames(self, ep: RecordedEpisode) -> dict[str, np.ndarray]:
        """What the log keeps of an episode with steps: the engine's (T, ...) frames, ``task_index`` (T,)
        int64 (the episode's instruction in ``policy.tasks``) and the final observation ``final.<key>`` (the
        state after its last executed step).

        Raises:
            ValueError: the policy was not trained on the episode's instruction (:meth:`_task_index`)."""
        frames = dict(ep.frames)
        frames[keys.TASK_INDEX] = np.full(ep.steps, self._task_index(ep.task or self.task), np.int64)
        frames.update({keys.final_key(k): np.asarray(ep.final_obs[k]) for k in self.obs_keys})
        return frames

    def _hold_while_stopped(self) -> Exception | None:
        """After the device ended an episode with an e-stop: execute nothing while it still reports it,
        then release the robot's e-stop (:meth:`_latch_robot`). Returns the DeviceError that ended the
        wait, if any."""
        latched = False
        try:
            while self.device is not None and self.device.poll({}).stop:
                if not latched:
                    log.warning("actor %d: e-stop latched; waiting for a reset", self.actor_id)
                    latched = True
                if self.sender.error is not None or self._parent_gone():
                    return None
                time.sleep(0.01)
        except DeviceError as err:
            return err
        self._estopped = False
        log.warning("actor %d: e-stop reset; acting again", self.actor_id)
        robot = self.robot
        if hasattr(robot, "reset_estop"):
            robot.reset_estop()
        return None

    def _latch_robot(self) -> None:
        """Latch the robot's own e-stop at once when the env drives one that has it (``env.robot``: the
        safety layer ``SafeRobot.estop`` holds the arm within its watchdog period)."""
        robot = self.robot
        if hasattr(robot, "estop"):
            robot.estop("GUI e-stop")

    def _nan_fault(self, stopped: bool) -> PolicyFaultError | None:
        self._nan_streak = self._nan_streak + 1 if stopped else 0
        limit = self.cfg.online.max_nan_stops
        if self._nan_streak < limit:
            return None
        return PolicyFaultError(
            f"actor {self.actor_id}: the policy (weights version {self.version}) produced NaN/inf "
            f"actions in {limit} episodes in a row (online.max_nan_stops); stopping, nothing unsafe was "
            "executed"
        )

    def _flush(self, fault: str = "") -> None:
        """Deliver every logged episode, then say bye (``fault``: a short text when the actor stops on
        one). No time limit: it waits for the learner as long as it takes (:meth:`_wait_note` says so every
        :data:`WAIT_REPORT_S` s), and stops waiting only when its parent process is gone, the link failed,
        or the learner said the run is over and is gone. What is not delivered stays in the episode log
        for the next run of this actor. A bye the learner heard hands back the unspent lease."""
        while self.sender.acked < self.num_logged():
            over = self.sender.status.get("stop") and not self.sender.connected
            if self.sender.error is not None or self._parent_gone() or over:
                break
            self.sender.wake.set()
            self._wait_note("flush", f"stopping: delivering to the learner at {self.cfg.online.address}")
            time.sleep(POLL_S)
        try:
            self.link.bye(self.actor_id, fault[:MAX_FAULT_CHARS])
        except PeerUnavailableError:
            log.warning(
                "actor %d: learner gone at shutdown; %d unsent episodes stay in %s",
                self.actor_id,
                self.num_logged() - self.sender.delivered,
                self.log.path,
            )
            return
        self.lease.set(self._logged_steps() - self.lease.rejected)  # handed back: a later run asks again

    def _episode(
        self, env_seed: int, within_lease: bool = False
    ) -> tuple[dict[str, np.ndarray] | None, Exception | None]:
        """One episode on the rollout engine (:class:`robot_rl.rollout.Rollout`; the device takes over
        through :class:`~robot_rl.runtime.takeover.InterventionWrapper`), truncated at ``max_steps`` and,
        when ``within_lease``, where the actor's lease ends (:meth:`_lease_room`, re-read every step: a
        renewal extends it). Returns (frames or None if no step ran, the DeviceError that ended it or None);
        frames hold (T, ...) per step key and the final observation ``final.<key>`` (the state after the
        last executed step)."""
        env = self.env if self.device is None else InterventionWrapper(self.env, self.device, self.task)
        policy = ActorPolicy(self)

        def end_when(env_id: int, steps: int) -> bool:
            return steps >= self.max_steps or (within_lease and steps >= self._lease_room())

        def on_step(env_id: int, step: StepReport) -> None:
            policy.steps[env_id] = step.steps
            self.counters["interventions"] += int(step.intervened)
            if self.observe is not None:
                self.observe(
                    self.live.step(
                        step.obs,
                        step.steps,
                        step.reward,
                        step.info,
                        step.intervened,
                        step.chunk_index,
                        step.chunk_len,
                        self.version,
                        self.sender.latest,
                    )
                )

        done: list[RecordedEpisode] = []
        engine = Rollout(
            SingleEnvVector(env), policy, stop_on=(NonFiniteChunkError,), end_when=end_when, on_step=on_step
        )
        engine.run([env_seed], done.append)
        ep = done[0]
        error = ep.final_info.get(DEVICE_ERROR)
        if ep.final_info.get(ESTOP):  # nothing more is executed; run() waits for the reset
            self._estopped = True
            self._latch_robot()
            log.warning("actor %d: e-stop; episode ended after %d steps", self.actor_id, ep.steps)
        if error is not None:
            log.error("actor %d: %s; stopping the episode safely", self.actor_id, error)
        if ep.stopped_by is not None:  # never sent to the robot
            log.error("actor %d: %s; episode stopped safely", self.actor_id, ep.stopped_by)
            self.counters["policy_nan_stops"] += 1
        if not ep.steps:
            return None, error
        return self._episode_frames(ep), error


class ActorPolicy:
    """An actor's chunk source for the engine: newer weights are swapped in before each query (between
    chunks, never inside one), the ``online.max_env_steps_ahead`` throttle waits there, and the policy reads
    each episode's instruction as the index into ``policy.tasks`` (:meth:`Actor._policy_obs`). Resets and
    executed actions reach the actor's current source (``observation.prev_action``)."""

    def __init__(self, actor: Actor) -> None:
        self.actor = actor
        self.steps: dict[int, int] = {}  # env -> steps of its episode in flight (the throttle counts them)

    def reset(self, env_id: int, env_seed: int) -> None:
        self.actor.source.reset(env_id, env_seed)

    def executed(self, env_id: int, action: np.ndarray) -> None:
        self.actor.source.executed(env_id, action)

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        """Chunks (k, h, d) for ``obs`` (k, ...) of ``env_ids``; raises what the source raises (a NaN/inf
        chunk: NonFiniteChunkError; an instruction the policy was not trained on: ValueError)."""
        actor = self.actor
        actor._load_policy()
        actor._throttle(sum(self.steps.values()))
        given = obs.get(keys.TASK, np.array([actor.task] * len(env_ids), dtype=object))
        batch = {k: np.asarray(obs[k]) for k in actor.obs_keys}
        return actor.source(actor._policy_obs(batch, [actor._task_index(str(t)) for t in given]), env_ids)
