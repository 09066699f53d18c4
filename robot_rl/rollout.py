"""One rollout engine for every stage: scripted demos, evaluation, report videos and teleoperated recording.

:class:`Rollout` drives N envs through the gymnasium vector-env interface with ``AutoresetMode.DISABLED``
(a gymnasium vector env, :class:`robot_rl.sim.batched_rollout.RolloutView` over a batched env, or one env
seen as N = 1 by :class:`robot_rl.single_env.SingleEnvVector`) over an exact sequence of env seeds. It
executes action chunks open loop (the QC default: the whole chunk of h actions runs before the next query),
builds each executed step's LeRobot-keyed frame (:func:`step_frame`) and hands each finished episode to a
callback. When the env's reset info holds ``task`` (the built-in tasks: the episode's instruction), the
source also gets ``obs["task"]`` (k,) object array of instructions, and the episode records it.

Human take-over is the env's business, as in HIL-SERL: an intervention wrapper (e.g.
:class:`robot_rl.teleop.takeover.InterventionWrapper`) polls its device inside ``step`` and reports in the
step's info (each value (N,)):

- ``info["is_intervention"]`` bool: a human drove this step; ``info["intervention_action"]`` (d,) float32 is
  what was executed instead of the proposed action. The rest of that env's chunk is dropped (the human wins
  within one control step) and the frame is recorded with ``complementary_info.is_intervention``;
- ``info["not_executed"]`` bool: nothing was executed (a human label or an e-stop ended the episode); no
  frame is recorded for it, and ``info["human_label"]`` (``"success"``/``"failure"`` or None) relabels the
  episode's last frame (:func:`robot_rl.runtime.episode_edits.label_values`) before the episode ends.

A source with ``executed(env_id, action)`` (:class:`robot_rl.sources.PrevActionSource`) is told each
executed action, the human's included.

Two ways to run: :meth:`Rollout.run` runs one episode per seed of a list (collect, eval, videos, record, the
single online actor), a finished env starting its next episode at once; :meth:`Rollout.run_schedule` asks a
:class:`Schedule` when episodes start, are cut and stop (the batched online actor's lease and budget, PPO's
env-step budget) and keeps the envs in phase: an env whose episode ended waits until the next query of the
others, then starts and joins that forward, so each chunk boundary costs one forward, not N.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from robot_rl import keys
from robot_rl.runtime.episode_edits import label_values

INTERVENED = "is_intervention"
"""Step-info key, (N,) bool: a human drove this step (HIL-SERL's intervention info)."""
HUMAN_ACTION = "intervention_action"
"""Step-info key, (N, d) float32: the action executed where :data:`INTERVENED`."""
NOT_EXECUTED = "not_executed"
"""Step-info key, (N,) bool: nothing was executed this step; the episode ends without a frame for it."""
HUMAN_LABEL = "human_label"
"""Step-info key, (N,) object: ``"success"``/``"failure"`` where a human ended the episode with that label."""


class ChunkSource(Protocol):
    """Anything that proposes action chunks: a scripted expert (h = 1) or a policy.

    ``reset(env_id, env_seed)`` starts a new episode in sub-env ``env_id``, reset with ``env_seed``; a
    stochastic source seeds its episode noise from it, so an episode depends on its env seed only, not on
    which worker ran it or whether the run was resumed. ``__call__(obs, env_ids)`` gets the observations
    of the envs that need a new chunk, each value of shape (k, ...), and returns float32 chunks (k, h, d)
    in the env's action units.
    """

    def reset(self, env_id: int, env_seed: int) -> None: ...

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray: ...


class Schedule(Protocol):
    """When episodes start, are cut and stop, for :meth:`Rollout.run_schedule`.

    ``start(idle)`` gets the (N,) bool mask of idle envs at a query moment (some running env needs a chunk,
    or none runs) and returns the episodes to start now: env id -> its reset seed (None: the env's own
    random stream goes on, as a batched env's auto-reset). ``stop()``, asked at each query moment first:
    True cuts every episode in flight there and ends the run. ``cut(steps)`` before each control step, with
    the (N,) int steps of each episode in flight (-1 where idle): the (N,) bool mask of episodes to end
    there (truncated, not stepped). ``wait()`` when nothing runs and nothing started: True after waiting
    (the query moment comes again), False ends the run.
    """

    def start(self, idle: np.ndarray) -> dict[int, int | None]: ...

    def stop(self) -> bool: ...

    def cut(self, steps: np.ndarray) -> np.ndarray: ...

    def wait(self) -> bool: ...


@dataclass
class RecordedEpisode:
    """A finished episode. ``frames`` maps LeRobot keys to arrays (T, ...): observations at t, the
    executed ``action``, ``next.reward``, ``next.done`` (true termination only), ``next.success`` and
    ``complementary_info.is_intervention`` (empty with ``steps`` = 0 when a human ended it before any step).
    ``task``: the episode's instruction from the env's reset info ("" when the env gives none).
    ``final_obs``: the observation after its last executed step (unbatched); ``final_info``: the info of its
    last step, per env (e.g. a RobotEnv's ``robot_error``); ``label``: the human's label that ended it, or
    None; ``stopped_by``: the source's error that ended it (:class:`Rollout`'s ``stop_on``), or None;
    ``env_id``: the sub-env it ran on; ``cut``: a :class:`Schedule` (its ``cut`` or ``stop``) or an error
    (``keep_on_error``) ended it, not the env, ``end_when``, a human or the source. ``env_seed`` is None
    where the schedule let the env's own random stream reset it."""

    env_seed: int | None
    frames: dict[str, np.ndarray]
    success: bool
    episode_return: float
    steps: int
    success_step: int | None = None
    task: str = ""
    final_obs: dict[str, np.ndarray] = field(default_factory=dict)
    final_info: dict[str, Any] = field(default_factory=dict)
    label: str | None = None
    stopped_by: Exception | None = None
    env_id: int = 0
    cut: bool = False


def step_frame(
    obs: dict[str, np.ndarray],
    action: np.ndarray,
    reward: float,
    terminated: bool,
    success: bool,
    intervened: bool,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One recorded step: the observation it acted on (each value unbatched), ``extra`` keys (e.g. the
    online actor's ``task_index``), the executed ``action`` as float32 (d,), ``next.reward`` float32,
    ``next.done`` (termination only), ``next.success`` and ``complementary_info.is_intervention``."""
    frame = {k: np.asarray(v) for k, v in obs.items()}
    frame.update(extra or {})
    frame[keys.ACTION] = np.asarray(action, np.float32)
    frame[keys.REWARD] = np.float32(reward)
    frame[keys.DONE] = bool(terminated)
    frame[keys.SUCCESS] = bool(success)
    frame[keys.INTERVENTION] = bool(intervened)
    return frame


@dataclass
class _EnvSlot:
    running: bool = False
    seed: int | None = None
    task: str = ""
    queue: deque = field(default_factory=deque)
    chunk_len: int = 0
    steps: list[dict[str, np.ndarray]] = field(default_factory=list)


def _take(obs: dict[str, np.ndarray], idx) -> dict[str, np.ndarray]:
    return {k: v[idx] for k, v in obs.items()}


def _copy(obs: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    """Sub-env ``i``'s observation, copied (the batch is overwritten when the env is reset)."""
    return {k: np.array(v[i]) for k, v in obs.items()}


def _set_tasks(slots: list[_EnvSlot], info: dict, mask: np.ndarray) -> None:
    """Record each reset env's instruction from the vector env's reset ``info["task"]`` (if any)."""
    if "task" not in info:
        return
    valid = np.asarray(info.get("_task", np.ones(len(slots), bool)), dtype=bool)
    for i in np.flatnonzero(mask & valid):
        slots[i].task = str(info["task"][i])


def _flag(info: dict, key: str, n: int) -> np.ndarray:
    """``info[key]`` as (n,) bool (False where the env did not set it)."""
    if key not in info:
        return np.zeros(n, bool)
    mask = np.asarray(info.get("_" + key, np.ones(n, bool)), dtype=bool)
    return np.asarray([bool(v) for v in info[key]], dtype=bool) & mask


def _row(info: dict, i: int, n: int) -> dict[str, Any]:
    """Sub-env ``i``'s values of a vector step info (the (n,) arrays; not the ``_key`` masks)."""
    rows = {k: v for k, v in info.items() if isinstance(v, np.ndarray) and len(v) == n}
    return {k: v[i] for k, v in rows.items() if not k.startswith("_")}


@dataclass
class StepReport:
    """What :class:`Rollout` hands ``on_step`` after each executed step of a sub-env: ``obs`` the observation
    after it (unbatched), the env's ``reward`` and ``info`` (this env's values), whether a human drove it,
    the executed action's index in its chunk (-1 when the human drove) of ``chunk_len``, the episode's
    ``steps`` so far (1 after its first step) and whether the env ``terminated`` it there."""

    obs: dict[str, np.ndarray]
    reward: float
    info: dict[str, Any]
    intervened: bool
    chunk_index: int
    chunk_len: int
    steps: int
    terminated: bool = False


class _SeedList:
    """The :class:`Schedule` of :meth:`Rollout.run`: one episode per seed of ``seeds``, read lazily (an env
    takes the next one as soon as its episode has ended and ``on_episode`` has had it)."""

    def __init__(self, seeds: Iterable[int]) -> None:
        self.pending, self.ready, self.spent = iter(seeds), {}, False

    def _draw(self) -> int | None:
        seed = None if self.spent else next(self.pending, None)
        self.spent = seed is None
        return seed

    def ended(self, env_id: int) -> None:
        self.ready[env_id] = self._draw()

    def start(self, idle: np.ndarray) -> dict[int, int | None]:
        for i in np.flatnonzero(idle):
            if int(i) not in self.ready:
                self.ready[int(i)] = self._draw()
        out = {i: s for i, s in self.ready.items() if s is not None and idle[i]}
        self.ready = {}
        return out

    def stop(self) -> bool:
        return False

    def cut(self, steps: np.ndarray) -> np.ndarray:
        return np.zeros(len(steps), bool)

    def wait(self) -> bool:
        return False


class Rollout:
    """Steps the N sub-envs of ``vec_env`` (DISABLED autoreset) with the chunks of ``source`` (module
    docstring).

    Args:
        vec_env: ``num_envs``, ``single_action_space`` (Box (d,)), ``reset(seed=[...], options={"reset_mask":
            (N,) bool})`` and ``step(actions (N, d))`` as gymnasium's vector envs. Optional: ``takeover()``
            -> (N,) bool, the envs whose next step a human decides (polled before the chunks are queried,
            so no chunk is queried for them), and ``end(mask)``, told of episodes the engine ended itself
            (``end_when``, a schedule's cut or stop) and of idle envs, which it then need not step.
        source: the :class:`ChunkSource`.
        idle_action: what a sub-env with no episode steps (default: the middle of the action box); its
            results are ignored.
        stop_on: exception types of the source that end the queried envs' episodes instead of propagating
            (nothing of that query is executed; the episode keeps its steps and ``stopped_by``).
        end_when: ``end_when(env_id, steps)`` after each executed step that did not end the episode: True
            ends it there (truncated), e.g. a step limit.
        on_step: ``on_step(env_id, StepReport)`` after each executed step.
        keep_on_error: when an exception leaves the run (the source's, a hook's, ``on_episode``'s), every
            episode in flight is first handed to ``on_episode`` with its steps so far (``cut``), as the
            online actor logs them; by default they are dropped (a dataset keeps no partial demo).
    """

    def __init__(
        self,
        vec_env,
        source: ChunkSource,
        idle_action: np.ndarray | None = None,
        *,
        stop_on: tuple[type[Exception], ...] = (),
        end_when: Callable[[int, int], bool] | None = None,
        on_step: Callable[[int, StepReport], None] | None = None,
        keep_on_error: bool = False,
    ) -> None:
        self.env, self.source = vec_env, source
        space = vec_env.single_action_space
        self.action_dim = int(space.shape[0])
        mid = ((space.low + space.high) / 2).astype(np.float32)
        self.idle_action = mid if idle_action is None else np.asarray(idle_action, np.float32)
        self.stop_on, self.end_when, self.on_step = stop_on, end_when, on_step
        self.keep_on_error = keep_on_error
        self._executed = getattr(source, "executed", None)
        self._takeover = getattr(vec_env, "takeover", None)
        self._end_env = getattr(vec_env, "end", None)

    def run(
        self,
        env_seeds: Iterable[int],
        on_episode: Callable[[RecordedEpisode], None],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Run one episode per seed of ``env_seeds`` (read lazily: a sub-env takes the next one when its
        episode has ended and ``on_episode`` has had it, so a generator may depend on what was recorded).
        Nothing is reset when ``env_seeds`` is empty.

        Raises:
            ValueError: the source returned a chunk of the wrong shape or with NaN/inf values; the env itself
                rejects out-of-range actions.
        """
        self._drive(_SeedList(env_seeds), on_episode, progress, in_phase=False)

    def run_schedule(
        self,
        schedule: Schedule,
        on_episode: Callable[[RecordedEpisode], None],
        progress: Callable[[int], None] | None = None,
    ) -> None:
        """Run episodes as ``schedule`` says (:class:`Schedule`), the envs in phase (module docstring),
        until its ``stop()`` or, with nothing running, its ``wait()`` ends the run.

        Raises:
            ValueError: as :meth:`run`; and whatever the schedule's hooks raise.
        """
        self._drive(schedule, on_episode, progress, in_phase=True)

    def _drive(self, schedule, on_episode, progress, in_phase: bool) -> None:
        n = self.env.num_envs
        slots = [_EnvSlot() for _ in range(n)]
        ended = getattr(schedule, "ended", None)
        self._obs: dict[str, np.ndarray] | None = None

        def end(i: int, final_obs: dict, final_info: dict, label=None, stopped_by=None, cut=False) -> None:
            slot, slots[i] = slots[i], _EnvSlot(task=slots[i].task)
            on_episode(_finish(i, slot, final_obs, final_info, label, stopped_by, cut))
            if progress is not None:
                progress(1)
            if ended is not None:
                ended(i)

        def cut(mask: np.ndarray) -> None:
            if mask.any() and self._end_env is not None:
                self._end_env(mask)
            for i in np.flatnonzero(mask):
                end(int(i), _copy(self._obs, i), {}, cut=True)

        try:
            while True:
                running = np.array([s.running for s in slots])
                moment = not running.any() or any(s.running and not s.queue for s in slots)
                if moment and schedule.stop():
                    cut(running)
                    return
                if (moment or not in_phase) and not running.all():
                    starts = schedule.start(~running)
                    if starts:
                        self._start(slots, starts)
                running = np.array([s.running for s in slots])
                if not running.any():
                    if schedule.wait():
                        continue
                    return
                steps = np.array([len(s.steps) if s.running else -1 for s in slots])
                cut(np.asarray(schedule.cut(steps), bool) & running)
                if not any(s.running for s in slots):
                    continue
                taken = np.zeros(n, bool) if self._takeover is None else np.asarray(self._takeover(), bool)
                stopped, err = self._fill(slots, self._obs, taken)
                for i in stopped:
                    end(int(i), _copy(self._obs, i), {}, stopped_by=err)
                if not stopped.size:
                    self._obs = self._step(slots, self._obs, end)
        except Exception:
            if self.keep_on_error and self._obs is not None:
                for i in [i for i, s in enumerate(slots) if s.running]:
                    end(i, _copy(self._obs, i), {}, cut=True)
            raise

    def _start(self, slots: list[_EnvSlot], starts: dict[int, int | None]) -> None:
        """Reset the envs of ``starts`` (env id -> seed) and start their episodes. The first reset resets
        every env (the idle ones with seed 0, then ended through ``end(mask)`` where the env has it), as a
        vector env must be reset whole before its first step."""
        n = len(slots)
        mask = np.zeros(n, dtype=bool)
        mask[list(starts)] = True
        if self._obs is None:
            self._obs, info = self.env.reset(seed=[starts.get(i, 0) if mask[i] else 0 for i in range(n)])
            self._with_task = "task" in info
            if not mask.all() and self._end_env is not None:
                self._end_env(~mask)
        else:
            seeds = [starts[i] if mask[i] else None for i in range(n)]
            fresh, info = self.env.reset(seed=seeds, options={"reset_mask": mask})
            for k in self._obs:
                self._obs[k][mask] = fresh[k][mask]
        _set_tasks(slots, info, mask)
        for i, seed in starts.items():
            slots[i].running, slots[i].seed = True, seed
            self.source.reset(int(i), seed)

    def _step(self, slots: list[_EnvSlot], obs: dict[str, np.ndarray], end) -> dict[str, np.ndarray]:
        """One step of every sub-env; records the executed steps and ends the finished episodes (``end``).
        Returns the observations after it."""
        n = len(slots)
        actions = np.stack([s.queue.popleft() if s.running and s.queue else self.idle_action for s in slots])
        next_obs, reward, terminated, truncated, info = self.env.step(actions)
        success = np.asarray(info.get("is_success", np.zeros(n, bool)), dtype=bool)
        intervened = _flag(info, INTERVENED, n)
        skipped = _flag(info, NOT_EXECUTED, n)
        for i, slot in enumerate(slots):
            if not slot.running:
                continue
            row = _row(info, i, n)
            if skipped[i]:
                label = row.get(HUMAN_LABEL)
                if label is not None and slot.steps:
                    slot.steps[-1].update(label_values(label))
                end(i, _copy(next_obs, i), row, label=label)
                continue
            action = actions[i]
            if intervened[i]:
                action = np.asarray(info[HUMAN_ACTION][i], np.float32)
                slot.queue.clear()  # the human wins within this control step; the chunk is dropped
            if self._executed is not None:
                self._executed(i, action)
            slot.steps.append(
                step_frame(_take(obs, i), action, reward[i], terminated[i], success[i], intervened[i])
            )
            if self.on_step is not None:
                index = -1 if intervened[i] else slot.chunk_len - len(slot.queue) - 1
                report = StepReport(
                    _take(next_obs, i),
                    reward[i],
                    row,
                    bool(intervened[i]),
                    index,
                    slot.chunk_len,
                    len(slot.steps),
                    bool(terminated[i]),
                )
                self.on_step(i, report)
            limit = self.end_when is not None and self.end_when(i, len(slot.steps))
            if limit and not (terminated[i] or truncated[i]) and self._end_env is not None:
                self._end_env(np.arange(n) == i)
            if terminated[i] or truncated[i] or limit:
                end(i, _copy(next_obs, i), row)
        return next_obs

    def _fill(self, slots: list[_EnvSlot], obs: dict[str, np.ndarray], taken: np.ndarray):
        """Query one chunk for every running sub-env whose queue is empty and whose next step no human
        decides. Returns the queried env ids and the error when the source raised one of ``stop_on``, else
        an empty array and None.

        Raises:
            ValueError: a chunk of the wrong shape or with NaN/inf values."""
        need = np.array(
            [i for i, s in enumerate(slots) if s.running and not s.queue and not taken[i]], dtype=int
        )
        if not need.size:
            return need[:0], None
        query = _take(obs, need)
        if self._with_task:
            query[keys.TASK] = np.array([slots[i].task for i in need], dtype=object)
        try:
            chunks = np.asarray(self.source(query, need), dtype=np.float32)
        except self.stop_on as err:
            return need, err
        if chunks.ndim != 3 or chunks.shape[0] != need.size or chunks.shape[2] != self.action_dim:
            raise ValueError(
                f"chunk source returned shape {chunks.shape}; expected ({need.size}, h, {self.action_dim})"
            )
        if not np.isfinite(chunks).all():
            raise ValueError("chunk source returned NaN/inf actions; refusing to send them to the env")
        for i, chunk in zip(need, chunks, strict=True):
            slots[i].queue.extend(chunk)
            slots[i].chunk_len = len(chunk)
        return need[:0], None


def rollout(
    vec_env,
    source: ChunkSource,
    env_seeds: Iterable[int],
    on_episode: Callable[[RecordedEpisode], None],
    idle_action: np.ndarray | None = None,
    progress: Callable[[int], None] | None = None,
) -> None:
    """Run one episode per entry of ``env_seeds`` on ``vec_env``: ``Rollout(vec_env, source,
    idle_action).run(env_seeds, on_episode, progress)`` (:meth:`Rollout.run`; same errors)."""
    Rollout(vec_env, source, idle_action).run(env_seeds, on_episode, progress)


def _finish(
    env_id: int,
    slot: _EnvSlot,
    final_obs: dict[str, np.ndarray],
    final_info: dict[str, Any],
    label: str | None,
    stopped_by: Exception | None,
    cut: bool,
) -> RecordedEpisode:
    """Env ``env_id``'s episode of ``slot``; ``success``/``success_step`` from its (relabelled) frames'
    ``next.success``."""
    frames = {k: np.stack([s[k] for s in slot.steps]) for k in slot.steps[0]} if slot.steps else {}
    hits = np.flatnonzero(frames[keys.SUCCESS]) if frames else np.zeros(0, int)
    return RecordedEpisode(
        env_seed=None if slot.seed is None else int(slot.seed),
        frames=frames,
        success=bool(hits.size),
        episode_return=float(frames[keys.REWARD].sum()) if frames else 0.0,
        steps=len(slot.steps),
        success_step=int(hits[0]) + 1 if hits.size else None,
        task=slot.task,
        final_obs=final_obs,
        final_info=final_info,
        label=label,
        stopped_by=stopped_by,
        env_id=env_id,
        cut=cut,
    )
