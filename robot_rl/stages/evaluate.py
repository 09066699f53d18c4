"""The ``eval`` stage: one checkpoint (or a served policy) on held-out env seeds in parallel envs, its
episodes and summaries written to the run's eval file."""

from __future__ import annotations

import time

from robot_rl.checkpoint import CONFIG_FILE, read_header
from robot_rl.config import ConfigError, PipelineConfig
from robot_rl.eval.instructions import ParaphraseSource, summarize_groups
from robot_rl.eval.metrics import EpisodeResult, episodes_to_json, summarize
from robot_rl.eval.splits import eval_variant, split_seeds
from robot_rl.progress import progress
from robot_rl.rollout import RecordedEpisode, rollout
from robot_rl.run_dir import RunDir, write_json_atomic
from robot_rl.sim import resolve_control_hz
from robot_rl.source_build import policy_source
from robot_rl.stages.envs import make_rollout_vec_env


def evaluate(cfg: PipelineConfig, algo: str, seed: int, inference: dict | None = None) -> dict:
    """Evaluate one checkpoint on ``cfg.eval.episodes_per_seed`` held-out env seeds in parallel envs.

    With ``cfg.deploy.server`` set, the chunks come from that policy server (``robot-rl serve``) instead of
    the run's checkpoint (``robot_rl.source_build.policy_source``); ``algo`` and ``seed`` then only name the
    result. The eval file's ``policy`` names the checkpoint, or the server and its model id.

    The episodes run on the env seeds of ``eval.split`` (:mod:`robot_rl.eval.splits`): ``test`` by default,
    or ``validation``, the only seeds any setting may be chosen on, filed apart; the file records the
    split.

    Language and generalisation splits: the file holds each episode's ``task`` (the env's instruction) and
    ``instruction`` (what the policy read), ``per_task`` and ``per_instruction`` summaries, and the
    ``conditions`` (``eval.name``, ``env.spawn_region``, ``eval.paraphrases``); with ``eval.paraphrases`` each
    instruction is replaced by a paraphrase (:class:`robot_rl.eval.instructions.ParaphraseSource`), and
    ``eval.name`` keeps the variant's file and stage apart from the default evaluation's. ``inference``:
    inference-time knobs given on the command line (:mod:`robot_rl.eval.inference`), set on the agent and
    recorded as ``policy.inference``. A finished evaluation of the same name is reused, unless it ran under
    other conditions or knobs: then a ConfigError asks for another ``eval.name``.

    Raises OSError naming the path when the run dir is not writable (checked before any episode runs),
    CheckpointError when the checkpoint is corrupt or does not fit the env, PolicyServerUnavailable when
    the server does not answer, ConfigError when the served model does not fit the env.
    """
    run = RunDir(cfg.run_dir)
    variant = eval_variant(cfg.eval.name, cfg.eval.split)
    stage = f"eval_{algo}_seed{seed}" + (f"_{variant}" if variant else "")
    conditions = {
        "name": cfg.eval.name,
        "split": cfg.eval.split,
        "env_id": cfg.env.id,
        "spawn_region": list(cfg.env.spawn_region),
        "paraphrases": dict(cfg.eval.paraphrases),
    }
    if run.is_done(stage):
        done = run.result(stage)
        _check_same_eval(stage, done, conditions, inference or {})
        return done
    run.check_writable()
    start = time.time()
    vec = make_rollout_vec_env(cfg.env)
    results: list[EpisodeResult] = []
    try:  # a foreign env's own rate (else its training data's)
        hz = resolve_control_hz(cfg, vec, _trained_fps(run.checkpoint(algo, seed))).env.control_hz
    except BaseException:
        vec.close()
        raise

    source = None

    def on_episode(ep: RecordedEpisode) -> None:
        cycle = ep.success_step / hz if ep.success_step is not None else None
        given = getattr(source, "given", {}).get(ep.env_seed, ep.task)
        results.append(
            EpisodeResult(ep.env_seed, ep.success, ep.episode_return, ep.steps, cycle, ep.task, given)
        )

    try:
        space = (vec.single_observation_space, vec.single_action_space)
        source, policy = policy_source(cfg, run.checkpoint(algo, seed), seed, space, vec.num_envs, inference)
        if cfg.eval.paraphrases:
            source = ParaphraseSource(source, cfg.eval.paraphrases)
        seeds = split_seeds(cfg.eval.split, cfg.eval.episodes_per_seed)
        with progress(total=len(seeds), desc=f"eval {algo} seed {seed}", unit="ep") as bar:
            rollout(vec, source, seeds, on_episode, progress=bar.update)
    finally:
        if source is not None:
            source.close()
        vec.close()
    results.sort(key=lambda e: e.env_seed)
    out = {
        "summary": summarize(results),
        "per_task": summarize_groups(results, "task"),
        "per_instruction": summarize_groups(results, "instruction"),
        "conditions": conditions,
        "split": cfg.eval.split,
        "episodes": episodes_to_json(results),
        "policy": policy,
    }
    write_json_atomic(run.eval_file(algo, seed, variant), out)
    out["wall_time_s"] = time.time() - start
    run.mark_done(stage, out)
    return out


def _check_same_eval(stage: str, done: dict, conditions: dict, inference: dict) -> None:
    """Raise ConfigError when the finished evaluation ``done`` ran under other ``conditions`` (env id,
    paraphrases, spawn region) or inference knobs than this request; a result from before conditions were
    recorded counts as the default ones (its env id unknown)."""
    before = {
        "env_id": conditions["env_id"],
        "spawn_region": [],
        "paraphrases": {},
        "split": "test",
        **done.get("conditions", {}),
    }
    differs = [k for k in ("env_id", "spawn_region", "paraphrases", "split") if before[k] != conditions[k]]
    policy = done.get("policy", {})
    if "inference" not in policy:  # recorded before knobs could be overridden: the checkpoint's values
        differs += list(inference)
    else:  # a knob the agent does not read was ignored then and is now
        differs += [k for k, v in inference.items() if policy["inference"].get(k, v) != v]
    if differs:
        raise ConfigError(
            f"stage {stage} already ran with other {', '.join(differs)}; give this evaluation its own "
            "--eval.name=<name> (or delete that eval's stage marker to redo it)"
        )


def _trained_fps(checkpoint) -> float | None:
    """The fps of the dataset a checkpoint was trained on (its header's ``fps``), None if unknown."""
    return read_header(checkpoint).fps if (checkpoint / CONFIG_FILE).is_file() else None
