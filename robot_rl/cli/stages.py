"""The main job's stages: collect -> train (bc, offline) -> eval -> report.

Each stage reads and writes files in the run directory and records a marker when it finishes, so a rerun
skips finished stages and a killed run resumes (training resumes from its last periodic checkpoint).
"""

from __future__ import annotations

import time

import numpy as np

from robot_rl import keys
from robot_rl.cli.envs import (
    DEMO_SEED_STRIDE,
    dataset_features,
    make_rollout_vec_env,
)
from robot_rl.cli.train_inputs import print_train_inputs
from robot_rl.config import ConfigError, PipelineConfig, config_to_dict, save_config
from robot_rl.eval.instructions import ParaphraseSource, summarize_groups
from robot_rl.eval.metrics import EpisodeResult, episodes_to_json, summarize, summarize_seeds
from robot_rl.eval.report import plot_curves, write_report
from robot_rl.eval.splits import eval_variant, split_seeds
from robot_rl.progress import progress
from robot_rl.rollout import RecordedEpisode, rollout
from robot_rl.run_dir import RunDir, online_name, write_json_atomic
from robot_rl.sources import ExpertSource, policy_source
from robot_rl.training.loop import score_checkpoint, train_agent


def collect(cfg: PipelineConfig) -> dict:
    """Record ``cfg.collect.num_episodes`` scripted demos as a LeRobot v3.0 dataset in ``run_dir/dataset``.

    Episodes already written by a killed run are kept; collection continues with the remaining seeds.

    Raises:
        ConfigError: ``cfg.env.id`` has no scripted expert (the built-in tasks and the ManiSkill tasks
            of ``robot_rl.sim.tasks.MANISKILL_EXPERTS`` have one), or
            ``env.robot.action`` is not ``ee_delta`` (the expert's actions).
        OSError: the run dir is not writable (checked first) or the disk fills up (names the path).
    """
    from robot_rl.data.lerobot.writer import LeRobotWriter
    from robot_rl.sim import TASKS, resolve_control_hz, robot_type
    from robot_rl.sim.tasks import MANISKILL_EXPERTS, has_expert

    run = RunDir(cfg.run_dir)
    if run.is_done("collect"):
        return run.result("collect")
    if not has_expert(cfg.env.id):
        raise ConfigError(
            f"env.id={cfg.env.id!r}: collect has scripted experts only for {', '.join(TASKS)} and "
            f"ManiSkill's {', '.join(MANISKILL_EXPERTS)} (env.backend=maniskill). Record "
            f"your own demos as a LeRobot v3.0 dataset in {run.dataset} (robot_rl.data.LeRobotWriter), then "
            "run train"
        )
    if cfg.env.robot is not None and cfg.env.robot.action != "ee_delta":
        raise ConfigError(
            f"env.robot.action={cfg.env.robot.action}: collect's scripted expert sends end-effector deltas "
            "(env.robot.action=ee_delta); record joint-target demos with robot-rl record --teleop leader"
        )
    run.check_writable()
    start = time.time()
    vec = make_rollout_vec_env(cfg.env)
    try:
        hz = resolve_control_hz(cfg, vec).env.control_hz  # a ManiSkill task's own rate
        features = dataset_features(vec.single_observation_space, vec.single_action_space)
        writer = LeRobotWriter(run.dataset, fps=round(hz), features=features, robot_type=robot_type(cfg.env))
        task = vec.get_attr("task")[0]
        done = writer.num_episodes
        base = cfg.collect.seed * DEMO_SEED_STRIDE
        seeds = list(range(base + done, base + cfg.collect.num_episodes))
        successes = []

        def on_episode(ep: RecordedEpisode) -> None:
            writer.add_episode(ep.frames, task=ep.task or task, source="demo")
            successes.append(ep.success)

        source = ExpertSource(
            vec.num_envs, cfg.collect.expert_noise, seed=cfg.collect.seed, task_id=cfg.env.id
        )
        with progress(total=len(seeds), desc="collect demos", unit="ep") as bar:
            rollout(vec, source, seeds, on_episode, progress=bar.update)
        writer.close()
    finally:
        vec.close()
    result = {
        "num_episodes": cfg.collect.num_episodes,
        "expert_noise": cfg.collect.expert_noise,
        "demo_success_rate": dataset_success_rate(run.dataset),
        "wall_time_s": time.time() - start,
    }
    run.mark_done("collect", result)
    return result


def dataset_success_rate(root) -> float | None:
    """Fraction of the dataset's episodes with a ``next.success`` frame; None without that column."""
    from robot_rl.data.lerobot.reader import LeRobotDataset

    table = LeRobotDataset(root).load_tabular()
    if keys.SUCCESS not in table:
        return None
    success = np.asarray(table[keys.SUCCESS]).reshape(-1).astype(bool)
    episodes = np.asarray(table[keys.EPISODE_INDEX]).reshape(-1)
    return float(np.mean([success[episodes == e].any() for e in np.unique(episodes)]))


def given_dataset(cfg: PipelineConfig) -> dict:
    """The pipeline's dataset entry when ``data.path`` names the training data: nothing is collected."""
    from robot_rl.data.lerobot.reader import LeRobotDataset

    dataset = LeRobotDataset(cfg.data.path)
    return {
        "path": cfg.data.path,
        "num_episodes": dataset.num_episodes,
        "fps": dataset.fps,
        "demo_success_rate": dataset_success_rate(cfg.data.path),
        "wall_time_s": 0.0,
    }


def train(cfg: PipelineConfig, algo: str, seed: int) -> dict:
    """Train ``algo`` ('bc' or 'offline') for one seed; offline RL warm-starts from that seed's BC policy.

    A finished stage is skipped, unless its budget (``bc.steps`` / ``offline.steps``) has grown since: then
    training continues from the saved checkpoint to the new budget
    (:func:`robot_rl.training.loop.train_agent`) and that seed's evaluation of ``algo`` is run again. A
    smaller or equal budget keeps the checkpoint and prints how to train longer.

    Raises OSError naming the path when the run dir is not writable (checked before training starts).
    """
    from robot_rl.training.resume import trained_steps

    run = RunDir(cfg.run_dir)
    stage = f"train_{algo}_seed{seed}"
    steps = (cfg.bc if algo == "bc" else cfg.offline).steps
    if run.is_done(stage):
        done = run.result(stage)
        have = done.get("steps") or trained_steps(run.checkpoint(algo, seed), algo)
        if have is None:
            return done
        if steps <= have:
            key = key_steps(algo)
            print(
                f"train {algo} seed {seed}: already trained ({have} steps, {key}={steps}); checkpoint "
                f"{done['checkpoint']}. To train longer, rerun with --{key}=<more than {have}>",
                flush=True,
            )
            return {**done, "steps": have}
        print(
            f"train {algo} seed {seed}: continuing from step {have} to {key_steps(algo)}={steps}", flush=True
        )
        run.clear(stage)
        run.clear(f"eval_{algo}_seed{seed}")
    run.check_writable()
    start = time.time()
    init = run.checkpoint("bc", seed) if algo == "offline" else None
    if init is not None and not run.is_done(f"train_bc_seed{seed}"):
        train(cfg, "bc", seed)
    metrics = train_agent(cfg, algo, seed, run, init_from=init, on_features=print_train_inputs)
    result = {
        "checkpoint": str(run.checkpoint(algo, seed)),
        "steps": steps,
        "final": metrics,
        "wall_time_s": time.time() - start,
    }
    run.mark_done(stage, result)
    return result


def key_steps(algo: str) -> str:
    """The config key of ``algo``'s step budget."""
    return "bc.steps" if algo == "bc" else "offline.steps"


def open_loop(cfg: PipelineConfig, algo: str, seed: int) -> dict:
    """Open-loop action error of a trained checkpoint on the dataset's held-out episodes (no simulator)."""
    run = RunDir(cfg.run_dir)
    run.check_writable()
    return score_checkpoint(cfg, algo, seed, run)


def evaluate(cfg: PipelineConfig, algo: str, seed: int, inference: dict | None = None) -> dict:
    """Evaluate one checkpoint on ``cfg.eval.episodes_per_seed`` held-out env seeds in parallel envs.

    With ``cfg.deploy.server`` set, the chunks come from that policy server (``robot-rl serve``) instead of
    the run's checkpoint (``robot_rl.sources.policy_source``); ``algo`` and ``seed`` then only name the
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
    from robot_rl.sim import resolve_control_hz

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
    from robot_rl.policies.checkpoint import CONFIG_FILE, read_header

    return read_header(checkpoint).fps if (checkpoint / CONFIG_FILE).is_file() else None


def pipeline(cfg: PipelineConfig) -> dict:
    """Run every stage for every seed, then write report.json, report.md, curves.png and videos.

    With ``data.path`` set, that dataset is the training data and nothing is collected (any env, also a
    foreign one through ``env.adapter``); else ``collect`` records scripted demos of the built-in task.
    """
    from robot_rl.cli.videos import record_videos
    from robot_rl.sim import resolve_control_hz

    if cfg.deploy.server:
        raise ConfigError(
            f"deploy.server={cfg.deploy.server!r}: pipeline evaluates every trained checkpoint in process; "
            "evaluate a served policy with `robot-rl eval --deploy.server=...`"
        )
    run = RunDir(cfg.run_dir)
    run.check_writable()
    save_config(cfg, run.root / "config.yaml")
    collected = given_dataset(cfg) if cfg.data.path else collect(cfg)
    cfg = resolve_control_hz(cfg, dataset_fps=collected.get("fps"))  # a foreign env's own rate (videos)
    walls = {"collect": collected["wall_time_s"], "train": 0.0, "eval": 0.0}
    algos = ["bc", "offline"] + ([online_name(cfg)] if cfg.online.in_pipeline else [])
    per_method: dict[str, dict[int, list[EpisodeResult]]] = {algo: {} for algo in algos}
    for seed in cfg.seeds:
        for algo in algos:
            if algo.startswith("online"):
                from robot_rl.cli.online import online

                walls["online"] = walls.get("online", 0.0) + online(cfg, seed)["wall_time_s"]
            else:
                walls["train"] += train(cfg, algo, seed)["wall_time_s"]
            evaluated = evaluate(cfg, algo, seed)
            walls["eval"] += evaluated["wall_time_s"]
            per_method[algo][seed] = [EpisodeResult(**e) for e in evaluated["episodes"]]
    summaries = {algo: summarize_seeds(eps) for algo, eps in per_method.items()}
    videos = record_videos(cfg, run, seed=cfg.seeds[0])
    logs = {algo: {s: run.train_log(algo, s) for s in cfg.seeds} for algo in per_method}
    plot_curves(logs, summaries, run.root / "curves.png")
    report = {
        "env_id": cfg.env.id,
        "config": config_to_dict(cfg),
        "dataset": collected,
        "eval_split": cfg.eval.split,
        "methods": summaries,
        "gain_success_rate": summaries["offline"]["success_rate"] - summaries["bc"]["success_rate"],
        "wall_time_s": walls,
        "videos": [str(v.relative_to(run.root)) for v in videos],
    }
    write_report(run.root, report)
    print((run.root / "report.md").read_text())
    return report
