"""The rollout engine's scheduled mode (:meth:`robot_rl.rollout.Rollout.run_schedule`), which the batched
online actor and PPO run on: envs in phase, a schedule's cut and stop, and episodes kept on an error. Real
MuJoCo physics: two ``mujoco_cpu`` envs behind :class:`robot_rl.sim.batched_rollout.RolloutView`."""

from __future__ import annotations

import numpy as np
import pytest

from robot_rl import keys
from robot_rl.config import EnvConfig
from robot_rl.rollout import RecordedEpisode, Rollout
from robot_rl.sim import make_batched_env
from robot_rl.sim.batched_rollout import RolloutView

H = 3  # chunk length


class _Hold:
    """Chunks of the action box's middle, h = 3; records which envs each query served; raises ``error`` at
    query ``fail_at`` (1-based)."""

    def __init__(self, mid: np.ndarray, fail_at: int = 0, error: Exception | None = None) -> None:
        self.mid, self.fail_at, self.error = mid, fail_at, error
        self.queries: list[list[int]] = []
        self.resets: list[tuple[int, int | None]] = []

    def reset(self, env_id: int, env_seed: int | None) -> None:
        self.resets.append((env_id, env_seed))

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        self.queries.append(env_ids.tolist())
        if len(self.queries) == self.fail_at:
            raise self.error
        return np.tile(self.mid, (len(env_ids), H, 1))


class _Plan:
    """A schedule: each env runs the seeds of ``seeds[env]`` in turn; ``cut_at`` (env -> steps) cuts an
    episode there; the run stops at query moment ``stop_at`` (1-based; 0: never)."""

    def __init__(self, seeds: dict[int, list[int]], cut_at: dict[int, int] | None = None, stop_at: int = 0):
        self.seeds, self.cut_at, self.stop_at = {i: list(s) for i, s in seeds.items()}, cut_at or {}, stop_at
        self.moments = 0

    def start(self, idle: np.ndarray) -> dict[int, int | None]:
        return {int(i): self.seeds[int(i)].pop(0) for i in np.flatnonzero(idle) if self.seeds.get(int(i))}

    def stop(self) -> bool:
        self.moments += 1
        return self.moments == self.stop_at

    def cut(self, steps: np.ndarray) -> np.ndarray:
        return np.array([self.cut_at.get(i, -2) == s for i, s in enumerate(steps)])

    def wait(self) -> bool:
        return False


@pytest.fixture
def view():
    env = RolloutView(make_batched_env(EnvConfig(max_episode_steps=60), 2, backend="mujoco_cpu"))
    yield env
    env.close()


def _mid(view) -> np.ndarray:
    space = view.single_action_space
    return ((space.low + space.high) / 2).astype(np.float32)


def test_an_env_that_ended_mid_chunk_joins_the_next_query_of_the_others(view):
    """Env 0's episodes end after 2 steps (end_when), inside its 3-step chunk: in scheduled mode it waits
    for env 1's chunk to end and both are queried in one forward; the list mode (run) starts it at once
    and queries it alone."""
    source = _Hold(_mid(view))
    done: list[RecordedEpisode] = []
    engine = Rollout(view, source, end_when=lambda env, steps: env == 0 and steps == 2)
    engine.run_schedule(_Plan({0: [10, 11], 1: [20]}, stop_at=3), done.append)
    assert source.queries == [[0, 1], [0, 1]]  # env 0 never alone
    assert source.resets == [(0, 10), (1, 20), (0, 11)]
    by_seed = {ep.env_seed: ep for ep in done}
    assert [by_seed[s].steps for s in (10, 11, 20)] == [2, 2, 2 * H]
    assert not by_seed[10].cut and by_seed[20].cut and by_seed[20].env_id == 1  # the stop cut env 1's
    assert not by_seed[20].frames[keys.DONE].any()

    listed = _Hold(_mid(view))
    Rollout(view, listed, end_when=lambda env, steps: env == 0 and steps == 2).run([10, 20, 11], done.append)
    assert [0] in listed.queries  # env 0 restarted at once, alone


def test_a_cut_ends_an_episode_before_its_next_step_and_stop_cuts_every_episode_in_flight(view):
    """The batched actor's lease and budget: a cut ends env 1's episode where its schedule says, inside a
    chunk; the stop, asked at each query moment, ends env 0's there."""
    source = _Hold(_mid(view))
    done: list[RecordedEpisode] = []
    Rollout(view, source).run_schedule(_Plan({0: [1], 1: [2]}, cut_at={1: 4}, stop_at=3), done.append)
    (env1,) = [ep for ep in done if ep.env_id == 1]
    assert env1.steps == 4 and env1.cut  # cut at 4 steps, in the middle of its second chunk
    (env0,) = [ep for ep in done if ep.env_id == 0]
    assert env0.steps == 2 * H and env0.cut  # the stop at the third query moment
    assert env0.final_obs[keys.STATE].shape == env0.frames[keys.STATE].shape[1:]


@pytest.mark.parametrize("keep", [True, False])
def test_an_error_hands_over_the_episodes_in_flight_only_when_asked(view, keep):
    """The actor's engine keeps what ran before a failure (keep_on_error); a dataset's drops it."""
    source = _Hold(_mid(view), fail_at=3, error=RuntimeError("link gone"))
    done: list[RecordedEpisode] = []
    with pytest.raises(RuntimeError, match="link gone"):
        Rollout(view, source, keep_on_error=keep).run_schedule(_Plan({0: [1], 1: [2]}), done.append)
    if keep:
        assert sorted(ep.env_id for ep in done) == [0, 1]
        assert all(ep.cut and ep.steps == 2 * H for ep in done)
    else:
        assert done == []
