"""Language-conditioned evaluation: unseen instruction paraphrases and success per task / instruction.

Generalisation splits as LIBERO, CALVIN and the VLA papers report them: success per task (the env's
instruction, the "task" of LeRobot's per-task eval), and the same episodes with each instruction replaced by
an unseen paraphrase (``eval.paraphrases``), reported per wording. Held-out object positions are an env
setting (``env.spawn_region``), recorded with the results.
"""

from __future__ import annotations

import numpy as np

from robot_rl import keys
from robot_rl.eval.metrics import EpisodeResult, summarize
from robot_rl.sources import SourceWrapper


class ParaphraseSource(SourceWrapper):
    """Wraps a ``robot_rl.rollout.ChunkSource``: each episode's instruction ``obs["task"]`` is replaced by a
    paraphrase before the wrapped source (the policy) reads it.

    The wording of an episode is ``paraphrases[task][env_seed % len(paraphrases[task])]``, a function of its
    env seed alone (the same with any number of envs, and balanced over consecutive seeds).
    :attr:`given` maps each env seed to the instruction the policy read. Other attributes (``close``, ...)
    are the wrapped source's.

    Args:
        inner: the chunk source.
        paraphrases: the env's instruction -> non-empty list of paraphrases (``eval.paraphrases``).

    Raises (on a query):
        ValueError: the env gives no instruction (``obs["task"]`` absent), or an episode's instruction has no
            entry in ``paraphrases`` (names ``eval.paraphrases`` and the known instructions).
    """

    def __init__(self, inner, paraphrases: dict[str, list[str]]) -> None:
        super().__init__(inner)
        self.paraphrases = paraphrases
        self.seeds: dict[int, int] = {}
        self.given: dict[int, str] = {}

    def reset(self, env_id: int, env_seed: int) -> None:
        super().reset(env_id, env_seed)
        self.seeds[int(env_id)] = int(env_seed)

    def __call__(self, obs: dict[str, np.ndarray], env_ids: np.ndarray) -> np.ndarray:
        if keys.TASK not in obs:
            raise ValueError("eval.paraphrases is set but the env gives no instruction (no task at reset)")
        tasks = np.asarray(obs[keys.TASK], dtype=object).copy()
        for j, env_id in enumerate(env_ids):
            options = self.paraphrases.get(str(tasks[j]))
            if options is None:
                raise ValueError(
                    f"eval.paraphrases has no entry for the instruction {tasks[j]!r}; it has "
                    f"{sorted(self.paraphrases)}"
                )
            seed = self.seeds[int(env_id)]
            tasks[j] = self.given[seed] = options[seed % len(options)]
        return self.inner({**obs, keys.TASK: tasks}, env_ids)


def summarize_groups(episodes: list[EpisodeResult], field: str) -> dict[str, dict]:
    """:func:`robot_rl.eval.metrics.summarize` of the episodes grouped by ``field`` (``task`` or
    ``instruction``), keyed by its value in sorted order; ``{}`` when no episode has one (a foreign env)."""
    groups: dict[str, list[EpisodeResult]] = {}
    for e in episodes:
        value = getattr(e, field)
        if value:
            groups.setdefault(value, []).append(e)
    return {k: summarize(groups[k]) for k in sorted(groups)}
