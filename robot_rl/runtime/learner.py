"""The online learner: ingests actors' episodes, trains on RLPD batches, publishes weights, checkpoints.

docs/algorithms.md §3-5. The agent is the chunked QC agent (best-of-N or FQL extraction) warm-started from the
offline checkpoint, the HIL-SERL SAC recipe, or HG-DAgger (flow BC on demos plus the human-driven steps
of interventions). One update consumes ``agent.batches_per_update`` independently drawn RLPD batches
(SAC: one per critic step). The learner keeps ``updates <= utd_ratio * max(0, online env steps -
warmup_steps)``: it waits for data instead of overfitting the first episodes. Weights are published every
``publish_every`` updates; a resumable checkpoint (modules, optimizers, counters) is written every
``checkpoint_every`` updates, and the replay lives in zarr, so a learner killed at any moment resumes
without losing a recorded episode. Operators' recorded edits (``actor<i>/edits.jsonl``: relabels,
exclusions; robot_rl.runtime.episode_edits) are re-read between updates and on every start.

No pushed episode can end a run (issue 39): one outside the run's bounds (robot_rl.runtime.episode_guard)
is acknowledged as rejected, never stored, and counted; and when training diverges anyway (weights turn
NaN/inf), the learner rolls back to its last resumable checkpoint, quarantines the episodes stored since
(robot_rl.runtime.episode_ledger) and goes on, at most ``online.max_rollbacks`` times in a row.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from robot_rl.algos.batch import batch_to_torch
from robot_rl.algos.registry import AgentFactory
from robot_rl.checkpoint import CONFIG_FILE, read_header, save_checkpoint
from robot_rl.config import ConfigError, PipelineConfig, config_to_dict
from robot_rl.config_checks import problems
from robot_rl.data.normalize import stats_to_json
from robot_rl.progress import progress
from robot_rl.run_dir import RunDir, online_name, write_json_atomic
from robot_rl.runtime.agents import build_online_agent
from robot_rl.runtime.env_info import EnvInfo
from robot_rl.runtime.episode_guard import EpisodeRejected, run_guard
from robot_rl.runtime.leases import Leases
from robot_rl.runtime.messages import (
    MAX_ACTOR,
    check_fault,
    check_int,
    check_push,
    max_episode_steps,
    max_push_bytes,
)
from robot_rl.runtime.metrics import EpisodeWindow, MetricSinks, RateMeter, episode_meta
from robot_rl.runtime.replay import (
    ACTOR_KEY,
    OnlineReplay,
    PriorData,
    episode_spec,
    final_spec,
    rlpd_batch,
)
from robot_rl.runtime.weights import NonFiniteWeightsError, agent_weights
from robot_rl.threads import set_threads
from robot_rl.training.resume import restore, resume_checkpoint, save_resume

log = logging.getLogger(__name__)
WAIT_REPORT_S = 30.0  # between log lines naming the actors a learner waits for
RUNTIME_FORMAT = 2  # learner checkpoint and replay layout (2: final observations); another is refused
SUMMARY_REASONS = 20  # rejection reasons per actor in summary.json (all of them are in rejected.jsonl)


class ActorsFaultedError(RuntimeError):
    """Every actor that joined the run has stopped on a fault it reported (``bye`` with ``fault``) and none
    is active, so no data can come; the learner saves its resumable checkpoint and stops."""


class Learner:
    """One learner for run ``cfg.run_dir`` and training seed ``seed``.

    Files under ``<run_dir>/online/<name>_seed<seed>/``: ``replay/`` (zarr), ``learner/`` (resumable
    checkpoint); the final policy goes to ``<run_dir>/checkpoints/<name>_seed<seed>`` (``name`` is
    ``online_<method>``), metrics to ``logs/<name>_seed<seed>.csv``, TensorBoard events to ``tensorboard/``
    and ``summary.json``. ``env``: the edge's description of the env the actors step
    (:func:`robot_rl.actor_build.describe_env`; the learner builds no env). ``agents``: the edge's agent
    factory (:class:`~robot_rl.algos.registry.AgentFactory`, the module :mod:`robot_rl.policies.factory`).

    Raises:
        ConfigError: unknown method, no env-step budget, a missing or incompatible init checkpoint, or a
            learner checkpoint written by another method, task or runtime format (names the file).
    """

    def __init__(
        self, cfg: PipelineConfig, seed: int, progress: bool = True, *, env: EnvInfo, agents: AgentFactory
    ) -> None:
        on = cfg.online
        bad = problems(cfg)  # the same range checks as load_config, for a config built in code
        if bad:
            raise ConfigError("; ".join(bad))
        self.cfg, self.seed, self.progress = cfg, seed, progress
        set_threads(cfg.threads, on.num_actors + 1)  # the learner shares the CPU with its actors
        self.run = RunDir(cfg.run_dir)
        self.name = online_name(cfg)
        self.dir = self.run.root / "online" / f"{self.name}_seed{seed}"
        self.lock = threading.Lock()
        torch.manual_seed(seed)
        built = build_online_agent(cfg, seed, self.run, env, agents)
        self.agent, self.config, self.stats = built.agent, built.config, built.stats
        self.obs_shapes, self.action_dim = built.obs_shapes, built.action_dim
        self.replay = OnlineReplay(
            self.dir / "replay",
            self.obs_shapes,
            self.action_dim,
            built.horizon,
            built.gamma,
            on.replay_capacity,
            edits_dir=self.dir,
            tasks=built.tasks,
        )
        self.episode_spec = episode_spec(self.obs_shapes, self.action_dim)
        self.final_spec = final_spec(self.obs_shapes)
        self.max_episode_steps = max_episode_steps(cfg)
        self.max_message_bytes = max_push_bytes(self.episode_spec, self.final_spec, self.max_episode_steps)
        demos = built.demos
        self.guard = run_guard(cfg, self.config, self.stats, self.obs_shapes, demos, env)
        self._rollbacks = 0  # rollbacks in a row (since the last checkpoint written after one)
        self.prior = PriorData(demos, sorted(self.obs_shapes), built.tasks) if demos is not None else None
        self.human_only = on.method == "hg_dagger"  # BC imitates human steps only (rlpd_batch)
        self._drawn: list[dict] | None = None  # the last draw and the updates it served (draw_batches)
        self._drawn_uses = 0
        self.updates = self.version = 0
        self._resume()
        self.rng = np.random.default_rng([seed, self.updates])
        self.window = EpisodeWindow()
        self._lags: dict[tuple[int, int], int] = {}  # (actor, actor episode) -> weight lag at ingest
        # the window is rebuilt from the replay as edited when an operator's edit touches it
        self._window_stale = self.replay.edits is not None and bool(self.replay.edits.edits)
        self._published: tuple[int, bytes] = (self.version, agent_weights(self.agent))
        self._spec = {"config": self.config, "stats": stats_to_json(self.stats)}
        self._active: set[int] = set()
        self.faults: dict[
            int, str
        ] = {}  # actor -> the fault it stopped on (cleared when it says hello again)
        self._trained_steps = 0  # online env steps when training stopped
        self._reached_90: dict | None = None  # when the last 20 episodes first were >= 90% autonomous
        self._finished = False
        # the budget as per-actor leases (robot_rl.runtime.leases), and who a restarted learner waits for
        window = 2 * self.max_episode_steps * on.envs_per_actor
        self.leases = Leases(self.dir, on.env_steps, on.num_actors, window)
        self._actor_steps: dict[int, int] = {}  # stored env steps per actor (_stored_steps)
        self._steps_counted = 0  # stored episodes counted in _actor_steps
        self._greeted: set[int] = set()  # actors that said hello since this learner started
        self._started = time.monotonic()
        self._next_wait_report = 0.0  # monotonic time of the next _report_waiting line
        self._heard: dict[int, float] = {}  # actor -> when it last said hello or had an episode stored
        # an actor holding an unspent lease and silent this long is waited for (a long episode is not)
        self._silent_s = max(WAIT_REPORT_S, 2 * self.max_episode_steps / cfg.env.control_hz)

    # -- the link endpoint (called from the server thread or Ray); every argument is checked first ------
    def status(self) -> dict[str, Any]:
        """What every reply carries (robot_rl.runtime.link): the run's progress, ``stop``, each actor's
        env-step lease (``leases``: actor id as a string -> steps, topped up here first,
        :meth:`Leases.renew`), and ``waiting_for`` (:meth:`waiting_for`) with ``waited_s``, the seconds
        since this learner started. Call with :attr:`lock` held.

        Raises:
            OSError: the leases cannot be written (names the file)."""
        on = self.cfg.online
        self.leases.renew(self._active, self._stored_steps())
        allowed = (
            on.warmup_steps + math.floor(self.updates / max(on.utd_ratio, 1e-9)) + on.max_env_steps_ahead
        )
        return {
            "env_steps": self.replay.num_steps,
            "updates": self.updates,
            "allowed_env_steps": allowed if on.max_env_steps_ahead > 0 else -1,
            "caught_up": self.updates >= self.updates_allowed(),
            "stop": self._finished or self.replay.num_steps >= on.env_steps,
            "leases": self.leases.as_status(),
            "waiting_for": self.waiting_for(),
            "waited_s": round(time.monotonic() - self._started, 1),
            "rejected_episodes": len(self.replay.rejected.reasons),
        }

    def hello(self, actor: int) -> dict[str, Any]:
        """Register ``actor``; the reply carries what it needs to act and send: the policy ``spec``, the
        frame keys a push holds (``episode_keys``) and ``max_episode_steps``.

        Raises:
            ProtocolError: ``actor`` is not an int in [0, 2^31)."""
        actor = check_int(actor, "actor", 0, MAX_ACTOR)
        with self.lock:
            self._active.add(actor)
            self._greeted.add(actor)
            self._heard[actor] = time.monotonic()
            self.faults.pop(actor, None)
            return {
                "acked": self.replay.acked.get(actor, 0),
                "version": self._published[0],
                "spec": self._spec,
                "episode_keys": sorted(self.episode_spec) + sorted(self.final_spec),
                "max_episode_steps": self.max_episode_steps,
                "status": self.status(),
            }

    def push(self, actor: int, episode: int, frames: dict, meta: dict) -> dict[str, Any]:
        """Store ``actor``'s episode number ``episode`` (a resend of a stored one is acknowledged only).

        An episode with a value outside the run's bounds (:mod:`robot_rl.runtime.episode_guard`) is not
        stored: it is acknowledged (``acked`` moves past it, so the actor goes on), recorded in
        ``rejected.jsonl``, logged, and the reply carries ``rejected``: the one-line reason. A resend of a
        rejected episode gets the same answer.

        Raises:
            ProtocolError: the message does not pass :func:`robot_rl.runtime.messages.check_push`.
            DatasetError: an episode was skipped (``episode`` beyond the next one expected).
        Nothing is stored, counted or registered when it raises."""
        actor, episode, frames, meta = check_push(
            actor,
            episode,
            frames,
            meta,
            self.episode_spec,
            self.final_spec,
            self.max_episode_steps,
            self.cfg.env.control_hz,
        )
        try:
            self.guard.check(frames, f"actor {actor} episode {episode}")
        except EpisodeRejected as err:
            return self._reject(actor, episode, str(err))
        with self.lock:
            if self.replay.add(actor, episode, frames):
                self.window.add(meta, self.version)
                self._lags[actor, episode] = self.version - int(meta.get("version", self.version))
                self._window_stale |= self.replay.edited(actor, episode)
            self._active.add(actor)
            reply = {"acked": self.replay.acked[actor], "status": self.status()}
            rejected = self.replay.rejected.reason(actor, episode)  # a resend of one rejected before
            return {**reply, "rejected": rejected} if rejected else reply

    def _reject(self, actor: int, episode: int, reason: str) -> dict[str, Any]:
        """Answer a push whose values :attr:`guard` refused (:meth:`push`); a resend of a stored episode
        is acknowledged as stored."""
        with self.lock:
            if self.replay.reject(actor, episode, reason):
                log.warning("learner: rejected %s; not stored", reason)
            else:
                reason = self.replay.rejected.reason(actor, episode) or ""
            self._active.add(actor)
            reply = {"acked": self.replay.acked[actor], "status": self.status()}
            return {**reply, "rejected": reason} if reason else reply

    def weights(self, have: int) -> tuple[dict[str, Any], bytes | None]:
        """The published weights when newer than version ``have`` (-1: none yet).

        Raises:
            ProtocolError: ``have`` is not an int >= -1."""
        have = check_int(have, "have", -1, 2**62)
        version, blob = self._published
        with self.lock:
            status = self.status()
        return {"version": version, "status": status}, (blob if version > have else None)

    def bye(self, actor: int, fault: str = "") -> dict[str, Any]:
        """``actor`` has stopped; a non-empty ``fault`` says why it cannot go on (logged, kept in
        ``summary.json``; when every actor has stopped on one, :meth:`train` raises ActorsFaultedError).

        Raises:
            ProtocolError: ``actor`` is not an int in [0, 2^31), or ``fault`` not a short string."""
        actor = check_int(actor, "actor", 0, MAX_ACTOR)
        fault = check_fault(fault)
        with self.lock:
            self._active.discard(actor)
            self.leases.release(actor, self._stored_steps().get(actor, 0))
            if fault:
                self.faults[actor] = fault
                log.error("learner: actor %d stopped on a fault: %s", actor, fault)
            return {"status": self.status()}

    def _stored_steps(self) -> dict[int, int]:
        """Env steps the replay holds per actor, counted once per stored episode (read back from disk after
        a restart). Call with :attr:`lock` held."""
        buffer = self.replay.buffer
        done, total = self._steps_counted, buffer.num_episodes
        if total > done:
            ends = buffer.episode_ends
            starts = np.concatenate([[0], ends[:-1]])[done:total]
            actors = buffer.zarr_arrays()[ACTOR_KEY].get_coordinate_selection(starts)
            for actor, length in zip(actors.tolist(), (ends[done:total] - starts).tolist(), strict=True):
                self._actor_steps[actor] = self._actor_steps.get(actor, 0) + length
                self._heard[actor] = time.monotonic()
            self._steps_counted = total
        return self._actor_steps

    def waiting_for(self) -> list[int]:
        """The actors this learner waits for while the budget is not in (empty once it is): those with
        episodes stored or a lease in this run that have not said hello since it started, and those
        holding an unspent lease that have neither said hello nor had an episode stored for ``_silent_s``
        (max(:data:`WAIT_REPORT_S`, two longest episodes); a dead actor's lease holds budget until it is
        back). Call with :attr:`lock` held."""
        if self._finished or self.replay.num_steps >= self.cfg.online.env_steps:
            return []
        now, stored = time.monotonic(), self._stored_steps()
        silent = {
            k
            for k, lease in self.leases.granted.items()
            if lease > stored.get(k, 0) and now - self._heard.get(k, self._started) > self._silent_s
        }
        return sorted(({*self.replay.acked, *self.leases.granted} - self._greeted) | silent)

    def _report_waiting(self) -> None:
        """Log the actors the learner waits for (:meth:`waiting_for`) and for how long, every
        :data:`WAIT_REPORT_S` s while there are any."""
        now = time.monotonic()
        if now < self._next_wait_report:
            return
        with self.lock:
            waiting, steps = self.waiting_for(), self.replay.num_steps
        if waiting:
            self._next_wait_report = now + WAIT_REPORT_S
            log.warning(
                "learner: waiting for actors %s, %.0f s after it started: they hold episodes or an unspent "
                "lease in this run and said no hello since it started, or sent nothing for %.0f s; %d of %d "
                "env steps are in",
                waiting,
                now - self._started,
                self._silent_s,
                steps,
                self.cfg.online.env_steps,
            )

    def _check_faults(self) -> None:
        self._report_waiting()  # called whenever the learner waits for data
        with self.lock:
            faulted = bool(self.faults) and not self._active
            faults = dict(self.faults)
        if faulted:
            raise ActorsFaultedError(
                "every actor stopped on a fault, no data can come: "
                + "; ".join(f"actor {k}: {v}" for k, v in sorted(faults.items()))
            )

    # -- training ------------------------------------------------------------------------------------
    def updates_allowed(self) -> int:
        on = self.cfg.online
        return math.floor(on.utd_ratio * max(0, self.replay.num_steps - on.warmup_steps))

    def train(self, drain_s: float = 30.0, check: Callable[[], None] | None = None) -> dict:
        """Train until the env-step budget is in and the UTD target met, then save the final policy and
        ``summary.json``; wait up to ``drain_s`` for active actors to say bye. Returns the summary.

        ``check()`` is called whenever the learner waits for data and may raise to abort (e.g. when every
        actor process died); the resumable checkpoint is written before the error propagates. A run
        without one writes one first, so a divergence always has a checkpoint to roll back to
        (:meth:`_roll_back`).

        Raises:
            ActorsFaultedError: every actor that joined stopped on a reported fault and none is active.
            NonFiniteWeightsError: training diverged more than ``online.max_rollbacks`` times in a row."""
        on = self.cfg.online
        sinks = self._sinks()
        env_rate, upd_rate = RateMeter(self.replay.num_steps), RateMeter(self.updates)
        self._start = time.monotonic()
        self._first_checkpoint()
        last_log = time.monotonic()
        metrics: dict[str, float] = {}
        bar = progress(
            total=on.env_steps,
            initial=min(self.replay.num_steps, on.env_steps),
            desc=f"online {on.method} seed {self.seed}",
            unit="step",
            disable=not self.progress,
        )
        try:
            while True:
                with self.lock:
                    self.refresh_edits()  # operators' relabels / exclusions, between updates
                    steps, allowed = self.replay.num_steps, self.updates_allowed()
                    done = steps >= on.env_steps and self.updates >= allowed
                    batches = self.draw_batches() if self.updates < allowed else None
                if done and self._publish_and_save(True, True):
                    break
                if batches is None:
                    self._checked(self._check_faults)
                    if check is not None:
                        self._checked(check)
                    time.sleep(0.01)
                else:
                    metrics = self.agent.update(*(batch_to_torch(b, self.cfg.device) for b in batches))
                    self.updates += 1
                    u = self.updates
                    self._publish_and_save(u % on.publish_every == 0, u % on.checkpoint_every == 0)
                if min(steps, on.env_steps) > bar.n:
                    bar.update(min(steps, on.env_steps) - bar.n)
                if time.monotonic() - last_log >= on.log_every_s:
                    last_log = time.monotonic()
                    row = self._row(metrics, env_rate, upd_rate)
                    sinks.write(steps, row)
                    bar.set_postfix(
                        success=f"{row.get('success_rate', float('nan')):.2f}",
                        interv=f"{row.get('intervention_rate', float('nan')):.2f}",
                        upd_s=f"{row['updates_per_s']:.1f}",
                    )
            self._finished = True
            self._trained_steps = steps  # episodes still in flight are stored, not trained on
            sinks.write(self.replay.num_steps, self._row(metrics, env_rate, upd_rate))
            self._drain(drain_s)
        finally:
            bar.close()
            sinks.close()
        return self._finish()

    def draw_batches(self) -> list[dict]:
        """The ``agent.batches_per_update`` batches of one update, each drawn independently by
        :func:`rlpd_batch` with ``online.batch_size`` chunks (numpy; ``human_only`` for HG-DAgger); an agent
        with ``batch_reuse`` = k > 1 (QC with ``offline.target_reuse``) gets each draw for k updates in a
        row (an operator's edit reaches the next draw). Call it with :attr:`lock` held while actors may push.

        Raises:
            DatasetError: nothing to sample from yet.
        """
        if self._drawn is not None and self._drawn_uses < self.agent.batch_reuse:
            self._drawn_uses += 1
            return self._drawn
        on = self.cfg.online
        self._drawn = [
            rlpd_batch(self.replay, self.prior, on.batch_size, on.demo_fraction, self.rng, self.human_only)
            for _ in range(self.agent.batches_per_update)
        ]
        self._drawn_uses = 1
        return self._drawn

    def _publish_and_save(self, publish: bool, save: bool) -> bool:
        """Publish the weights and/or write the resumable checkpoint, only when the weights are finite;
        returns True, or False after rolling back (:meth:`_roll_back`) because they are not.

        Raises:
            NonFiniteWeightsError: the weights diverged and the learner may not roll back again."""
        try:
            if publish:
                self._publish()
            if save:
                if not publish:
                    agent_weights(self.agent)  # raises on NaN/inf: never checkpoint a diverged learner
                self._save_resume()
                self._rollbacks = 0
        except NonFiniteWeightsError as err:
            self._roll_back(err)
            return False
        return True

    def _first_checkpoint(self) -> None:
        """Write a resumable checkpoint when there is none and the weights are finite, so a divergence has
        one to roll back to."""
        if resume_checkpoint(self.dir / "learner") is not None:
            return
        try:
            agent_weights(self.agent)
        except NonFiniteWeightsError as err:
            log.error("learner: no first checkpoint written: %s", err)
            return
        self._save_resume()

    def _roll_back(self, err: NonFiniteWeightsError) -> None:
        """Training diverged (``err``): restore the last resumable checkpoint (modules, optimizers and the
        update count; the weight version keeps counting up, and the restored weights are published), and
        quarantine every episode stored since it (``quarantine.jsonl``: kept on disk, never sampled, also
        after a restart). Logs the checkpoint and the episodes.

        Raises:
            NonFiniteWeightsError: there is no checkpoint, or this is rollback ``online.max_rollbacks + 1``
                in a row (no checkpoint written in between): one line naming the checkpoint."""
        path = resume_checkpoint(self.dir / "learner")
        limit = self.cfg.online.max_rollbacks
        if path is None:
            raise NonFiniteWeightsError(f"{err}; there is no learner checkpoint to roll back to") from err
        if self._rollbacks >= limit:
            raise NonFiniteWeightsError(
                f"{err}; it diverged again after {self._rollbacks} rollbacks in a row to {path} with the "
                f"episodes since quarantined (online.max_rollbacks={limit}): the training itself is "
                "unstable (lower offline.lr / sac.lr, or check the demos)"
            ) from err
        self._rollbacks += 1
        state = restore(self.agent, path)
        with self.lock:
            self.updates = int(state["updates"])
            named = self.replay.quarantine(int(state.get("replay_episodes", 0)), f"training diverged: {err}")
            self._window_stale = True  # the live rates leave the quarantined episodes out
            self._drawn = None  # the next update draws anew, leaving out the quarantined episodes
        self._publish()
        log.error(
            "learner: %s; rolled back to %s (%d updates, rollback %d of at most %d in a row) and quarantined "
            "the %d episodes stored since: %s (%s)",
            err,
            path,
            self.updates,
            self._rollbacks,
            limit,
            len(named),
            ", ".join(f"actor {a} episode {e}" for a, e in named) or "none",
            self.replay.quarantined.path,
        )

    def _checked(self, check: Callable[[], None]) -> None:
        try:
            check()
        except Exception:
            self._save_resume()
            raise

    def _row(self, metrics: dict, env_rate: RateMeter, upd_rate: RateMeter) -> dict[str, float]:
        with self.lock:
            window = self.window_snapshot()
            steps = self.replay.num_steps
        elapsed = time.monotonic() - self._start
        full = len(self.window.recent) == self.window.recent.maxlen
        if self._reached_90 is None and full and window.get("autonomous_success_rate", 0.0) >= 0.9:
            self._reached_90 = {"elapsed_s": elapsed, "env_steps": steps}
        return {
            **window,
            "elapsed_s": elapsed,
            "env_steps_per_s": env_rate.rate(steps),
            "updates_per_s": upd_rate.rate(self.updates),
            "updates": float(self.updates),
            "version": float(self.version),
            **{k: float(v) for k, v in metrics.items()},
        }

    def _sinks(self) -> MetricSinks:
        on = self.cfg.online
        return MetricSinks(
            self.run.root / "logs" / f"{self.name}_seed{self.seed}.csv",
            self.dir / "tensorboard" if on.tensorboard else None,
            on.wandb_project if on.wandb else None,
            run_name=f"{self.name}_seed{self.seed}",
            config=config_to_dict(self.cfg),
        )

    def _publish(self) -> None:
        blob = agent_weights(self.agent)
        self.version += 1
        self._published = (self.version, blob)

    def _drain(self, drain_s: float) -> None:
        deadline = time.monotonic() + drain_s
        while time.monotonic() < deadline:
            with self.lock:
                if not self._active:
                    return
            time.sleep(0.1)
        log.warning("learner: actors %s did not say bye within %.0f s", sorted(self._active), drain_s)

    # -- checkpoints ---------------------------------------------------------------------------------
    def _counters(self) -> dict:
        return {"updates": self.updates, "version": self.version, "format": RUNTIME_FORMAT}

    def _save_resume(self) -> None:
        state = {**self._counters(), "replay_episodes": self.replay.num_episodes}  # the rollback's cut
        save_resume(self.agent, self.dir / "learner_resume", state, self.config, self.stats)

    def _resume(self) -> None:
        path = resume_checkpoint(self.dir / "learner")
        if path is None:
            return
        state = json.loads((path / "learner_state.json").read_text())
        if state.get("format") != RUNTIME_FORMAT:
            raise ConfigError(
                f"{path / 'learner_state.json'}: learner checkpoint format {state.get('format')!r}; this "
                f"version reads format {RUNTIME_FORMAT}. Use another run_dir or delete {self.dir}"
            )
        saved = read_header(path)
        shapes = {k: tuple(v) for k, v in self.config["obs_shapes"].items()}
        if saved.method != self.config["method"] or saved.obs_shapes != shapes:
            raise ConfigError(
                f"{path / CONFIG_FILE}: the learner checkpoint is for method {saved.method!r} with "
                f"observations {saved.config['obs_shapes']}, not {self.config['method']!r} with "
                f"{self.config['obs_shapes']}. Use another run_dir or delete {self.dir}"
            )
        restore(self.agent, path)
        self.updates, self.version = int(state["updates"]), int(state["version"])
        log.info(
            "learner: resumed from %s at %d updates, %d online steps (%d episodes quarantined, %d rejected)",
            path,
            self.updates,
            self.replay.num_steps,
            len(self.replay.quarantined.reasons),
            len(self.replay.rejected.reasons),
        )

    def _finish(self) -> dict:
        final = self.run.checkpoint(self.name, self.seed)
        self.agent.eval()
        save_checkpoint(
            final,
            self.agent.modules(),
            self.config,
            self.stats,
            obs_shapes=self.obs_shapes,
            action_dim=self.action_dim,
        )
        summary = {
            **self._buffer_summary(),
            "updates": self.updates,
            "env_steps_trained": self._trained_steps,
            "autonomous_90": self._reached_90,
            "actor_faults": {str(k): v for k, v in sorted(self.faults.items())},
            "checkpoint": str(final),
        }
        write_json_atomic(self.dir / "summary.json", summary)
        return summary

    def refresh_edits(self) -> bool:
        """Apply operators' new edit lines to the replay and the rates (call with :attr:`lock` held).
        Returns whether any edit log changed."""
        changed = self.replay.refresh_edits()
        self._window_stale |= changed
        return changed

    def window_snapshot(self) -> dict[str, float]:
        """The metric rows' rates over the last 20 episodes (:meth:`EpisodeWindow.snapshot`), counting
        episodes as edited (:meth:`_edited_window`, rebuilt when an edit touched them). Call with
        :attr:`lock` held."""
        if self._window_stale:
            self.window, self._window_stale = self._edited_window(), False
        return self.window.snapshot()

    def _edited_window(self) -> EpisodeWindow:
        """The episode window over every stored episode as operators' edits make it (relabels applied,
        excluded episodes left out; robot_rl.runtime.episode_edits), read back from the replay on disk;
        weight lags as measured at ingest (0 for episodes stored before a restart)."""
        window = EpisodeWindow()
        for key, frames in self.replay.edited_episodes():
            # add() records version_now - meta["version"]: the lag measured when the episode came in
            window.add(episode_meta(frames, self.cfg.env.control_hz, 0), self._lags.get(key, 0))
        return window

    def _buffer_summary(self) -> dict:
        """Run totals and last-20-episode rates read back from the replay on disk (exact after restarts),
        counting episodes as operators edited them (:meth:`_edited_window`); ``excluded_episodes``: those
        operators left out; ``quarantined_episodes``: ``[actor, episode]`` of each episode quarantined
        after a divergence; ``rejected_episodes``: per actor, the ``count`` of episodes refused at push and
        the ``reasons`` of the last :data:`SUMMARY_REASONS` (every one is in ``rejected.jsonl``)."""
        window = self._edited_window()
        quarantined = sorted(self.replay.quarantined.reasons)
        rejected = {
            str(actor): {"count": len(reasons), "reasons": reasons[-SUMMARY_REASONS:]}
            for actor, reasons in sorted(self.replay.rejected.per_actor().items())
        }
        return {
            "method": self.cfg.online.method,
            "seed": self.seed,
            "env_steps": int(self.replay.num_steps),
            **window.totals(),
            "excluded_episodes": self.replay.num_episodes - window.episodes - len(quarantined),
            "quarantined_episodes": [list(k) for k in quarantined],
            "rejected_episodes": rejected,
            **{f"last20_{k}": v for k, v in window.snapshot().items() if k != "weight_lag"},
        }
