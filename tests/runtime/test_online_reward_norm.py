"""The online learner maps rewards exactly as offline training did (issue 14 §2: reward normalisation)."""

from __future__ import annotations

import json

from online_setup import copy_run, overrides

from robot_rl.actor_build import describe_env
from robot_rl.algos.targets import reward_affine
from robot_rl.config import load_config
from robot_rl.policies import factory as agents
from robot_rl.run_dir import RunDir
from robot_rl.runtime.agents import build_online_agent


def test_online_agent_keeps_the_checkpoints_reward_map(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    saved = json.loads((run / "checkpoints" / "offline_seed0" / "config.json").read_text())["offline"]
    assert saved["reward_norm"] == "max" and len(saved["reward_range"]) == 2
    cfg = load_config(None, overrides(run, "--offline.reward_range=[-5.0,5.0]"))  # ignored: checkpoint wins
    online = build_online_agent(cfg, 0, RunDir(run), describe_env(cfg), agents)
    assert online.agent.reward_affine == reward_affine("max", saved["reward_range"])
    assert online.config["offline"]["reward_range"] == saved["reward_range"]
    # a BC init checkpoint has no range yet: it comes from the demos, as in offline training
    bc = run / "checkpoints" / "bc_seed0"
    cfg = load_config(None, overrides(run, f"--online.init={bc}"))
    online = build_online_agent(cfg, 0, RunDir(run), describe_env(cfg), agents)
    assert online.agent.reward_affine == reward_affine("max", saved["reward_range"])
