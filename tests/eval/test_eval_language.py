"""Language and generalisation splits of evaluation (issue 20): unseen instruction paraphrases
(``eval.paraphrases``), held-out object positions (``env.spawn_region``), per-task / per-instruction success
and named evaluation variants (``eval.name``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from online_setup import copy_run, overrides

from robot_rl import keys
from robot_rl.config import ConfigError, EnvConfig, load_config
from robot_rl.eval.instructions import ParaphraseSource
from robot_rl.rollout import rollout
from robot_rl.sim import make_env
from robot_rl.sim.expert_source import ExpertSource
from robot_rl.sim.panda_tasks import PandaPickColourEnv
from robot_rl.stages.collect import collect
from robot_rl.stages.envs import make_rollout_vec_env
from robot_rl.stages.evaluate import evaluate
from robot_rl.stages.train import train

COLOUR = "robot_rl/PandaPickColour-v0"


def _expert_rollout(paraphrases: dict[str, list[str]], seeds: list[int]) -> tuple[dict, ParaphraseSource]:
    cfg = EnvConfig(id=COLOUR, num_envs=1, success_hold_steps=1)
    vec = make_rollout_vec_env(cfg)
    source = ParaphraseSource(ExpertSource(1, 0.0, seed=0, task_id=COLOUR), paraphrases)
    out: dict[int, tuple[str, bool]] = {}
    try:
        rollout(vec, source, seeds, lambda ep: out.__setitem__(ep.env_seed, (ep.task, ep.success)))
    finally:
        vec.close()
    return out, source


def test_paraphrases_reach_the_policy_and_are_recorded_per_episode():
    """The pick-colour expert reads the instruction it is given: a paraphrase naming the same colour still
    succeeds, one naming another colour makes it lift the wrong cube (no success)."""
    tasks = PandaPickColourEnv.instructions
    same = {t: [t.replace("Pick up", "Grab").replace("cube", "block")] for t in tasks}
    episodes, source = _expert_rollout(same, [0, 1])
    assert all(ok for _, ok in episodes.values())
    assert {source.given[s] for s in episodes} <= {w for ws in same.values() for w in ws}
    assert all("Grab the" in source.given[s] for s in episodes)
    swapped = {t: [f"Grab the {'blue' if 'red' in t else 'red'} block."] for t in tasks}
    episodes, source = _expert_rollout(swapped, [0])
    assert not any(ok for _, ok in episodes.values())
    with pytest.raises(ValueError, match="eval.paraphrases has no entry"):
        _expert_rollout({"Open the drawer.": ["Pull the drawer out."]}, [0])


def test_paraphrase_choice_depends_on_the_env_seed_only():
    """``paraphrases[task][env_seed % n]``: the same wording for a seed in any env slot."""
    task = "Pick up the cube and lift it."
    calls: list[str] = []

    class Echo:
        def reset(self, env_id, env_seed):
            pass

        def __call__(self, obs, env_ids):
            calls.extend(obs[keys.TASK])
            return np.zeros((len(env_ids), 1, 4), np.float32)

    source = ParaphraseSource(Echo(), {task: ["a", "b", "c"]})
    for env_id, seed in [(0, 7), (1, 9)]:
        source.reset(env_id, seed)
    source({keys.TASK: np.array([task, task], dtype=object)}, np.array([0, 1]))
    source.reset(0, 9)
    source({keys.TASK: np.array([task], dtype=object)}, np.array([0]))
    assert calls == ["b", "a", "a"]
    assert source.given == {7: "b", 9: "a"}


def test_spawn_region_places_objects_inside_it_and_is_checked():
    """Held-out positions: the pick-cube cube and the pick-colour cubes start inside ``env.spawn_region``;
    the default region gives the same episodes as before (the task's own ranges)."""
    region = [0.56, 0.66, -0.28, 0.28]  # beyond the tasks' default x ranges (up to 0.55 m)
    for task_id, n in (("robot_rl/PandaPickCube-v0", 1), (COLOUR, 3)):
        env = make_env(EnvConfig(id=task_id, spawn_region=region))
        try:
            for seed in range(4):
                obs, _ = env.reset(seed=seed)
                xy = obs[keys.ENV_STATE].reshape(n, 7)[:, :2]
                assert (xy[:, 0] >= 0.56).all() and (xy[:, 0] <= 0.66).all()
                assert (np.abs(xy[:, 1]) <= 0.28).all()
        finally:
            env.close()
    a, b = make_env(EnvConfig()), make_env(EnvConfig(spawn_region=[0.38, 0.55, -0.15, 0.15]))
    np.testing.assert_array_equal(a.reset(seed=3)[0][keys.ENV_STATE], b.reset(seed=3)[0][keys.ENV_STATE])
    with pytest.raises(ValueError, match="workspace"):
        make_env(EnvConfig(spawn_region=[0.5, 0.9, 0.0, 0.1]))
    with pytest.raises(ValueError, match="too small"):
        make_env(EnvConfig(id=COLOUR, spawn_region=[0.5, 0.52, 0.0, 0.02])).reset(seed=0)
    with pytest.raises(ConfigError, match="env.spawn_region"):
        load_config(None, ["--env.spawn_region=[0.5, 0.4, 0.0, 0.1]"])
    with pytest.raises(ConfigError, match=r"eval.paraphrases\['x'\]"):
        load_config(None, ["--eval.paraphrases={x: []}"])


def test_named_eval_variant_records_instructions_groups_and_conditions(tiny_offline_run, tmp_path):
    """``robot-rl eval --eval.name=... --eval.paraphrases=... --env.spawn_region=...`` writes its own file
    (the default evaluation is neither overwritten nor reused) with each episode's task and instruction, the
    success per task and per instruction, and the conditions."""
    run = copy_run(tiny_offline_run, tmp_path / "run")
    task = "Pick up the cube and lift it."
    extra = [
        "--eval.name=para_pos",
        f"--eval.paraphrases={{'{task}': ['Lift the cube.', 'Raise the block.']}}",
        "--env.spawn_region=[0.56, 0.62, 0.16, 0.22]",
    ]
    out = evaluate(load_config(None, overrides(run, *extra)), "bc", 0)
    path = run / "eval" / "bc_seed0_para_pos.json"
    assert path.is_file() and not (run / "eval" / "bc_seed0.json").exists()
    saved = json.loads(path.read_text())
    assert saved["conditions"]["spawn_region"] == [0.56, 0.62, 0.16, 0.22]
    assert saved["conditions"]["paraphrases"] == {task: ["Lift the cube.", "Raise the block."]}
    for ep in saved["episodes"]:
        assert ep["task"] == task
        assert ep["instruction"] == ["Lift the cube.", "Raise the block."][ep["env_seed"] % 2]
    assert list(saved["per_task"]) == [task] and saved["per_task"][task]["num_episodes"] == 2
    assert sorted(saved["per_instruction"]) == ["Lift the cube.", "Raise the block."]
    assert out["per_instruction"] == saved["per_instruction"]
    default = evaluate(load_config(None, overrides(run)), "bc", 0)
    assert (run / "eval" / "bc_seed0.json").is_file()
    assert {e["instruction"] for e in default["episodes"]} == {task}
    # the same name under other conditions is refused, not answered with the earlier result
    with pytest.raises(ConfigError, match="already ran with other env_id"):
        evaluate(load_config(None, overrides(run, "--env.id=robot_rl/PandaPushToTarget-v0")), "bc", 0)


def test_one_policy_on_two_suite_tasks_is_evaluated_per_task(tmp_path):
    """Multi-task training on the suite: place-in-bin and stack differ in ``observation.environment_state``
    (10 and 14), so ``dataset merge`` refuses them as they are (naming the key) and joins them with it
    dropped; one policy is conditioned on both instructions and each task's evaluation (``--env.id=<task>
    --eval.name=<name>``) reports that task, its env's environment_state left unread."""
    from robot_rl.data.errors import DatasetError
    from robot_rl.data.lerobot.ops import merge
    from robot_rl.data.lerobot.reader import LeRobotDataset

    tiny = ["--env.max_episode_steps=8", "--env.num_envs=1", "--env.backend=mujoco_cpu", "--seeds=[0]"]
    tasks = {"bin": "robot_rl/PandaPlaceInBin-v0", "stack": "robot_rl/PandaStack-v0"}
    for name, task_id in tasks.items():
        collect(
            load_config(
                None,
                [f"--run_dir={tmp_path / name}", f"--env.id={task_id}", "--collect.num_episodes=2", *tiny],
            )
        )
    sources = [tmp_path / "bin" / "dataset", tmp_path / "stack" / "dataset"]
    with pytest.raises(DatasetError, match=keys.ENV_STATE):
        merge(sources, tmp_path / "merged")
    merge(sources, tmp_path / "merged", drop=[keys.ENV_STATE])
    merged = LeRobotDataset(tmp_path / "merged")
    try:
        assert keys.ENV_STATE not in merged.features and keys.STATE in merged.features
        assert keys.ENV_STATE not in merged.load_tabular() and merged.num_episodes == 4
    finally:
        merged.close()
    run = [
        f"--run_dir={tmp_path / 'mt'}",
        f"--data.path={tmp_path / 'merged'}",
        "--data.num_workers=0",
        *tiny,
    ]
    run += ["--bc.steps=2", "--bc.batch_size=8", "--policy.hidden_dims=[16]", "--eval.episodes_per_seed=1"]
    train(load_config(None, run), "bc", 0)
    config = json.loads((tmp_path / "mt" / "checkpoints" / "bc_seed0" / "config.json").read_text())
    instructions = ["Put the cube in the bin.", "Stack the red cube on the blue cube."]
    assert sorted(config["policy"]["tasks"]) == sorted(instructions)
    for (name, task_id), instruction in zip(tasks.items(), instructions, strict=True):
        out = evaluate(load_config(None, [*run, f"--env.id={task_id}", f"--eval.name={name}"]), "bc", 0)
        assert list(out["per_task"]) == [instruction] and out["conditions"]["env_id"] == task_id
