"""The online agent's init checkpoint: a policy conditioned on several instructions with a reward that
scores against one instruction is refused with an error naming the checkpoint and the key."""

from __future__ import annotations

import json

import pytest
from online_setup import copy_run, overrides

from robot_rl.actor_build import describe_env
from robot_rl.config import ConfigError, load_config
from robot_rl.policies import factory as agents
from robot_rl.run_dir import RunDir
from robot_rl.runtime.agents import build_online_agent


def test_a_multi_instruction_policy_with_a_one_instruction_reward_is_refused(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    config = run / "checkpoints" / "offline_seed0" / "config.json"
    saved = json.loads(config.read_text())
    saved["policy"]["tasks"] = ["Pick up the red cube and lift it.", "Pick up the blue cube and lift it."]
    config.write_text(json.dumps(saved))
    cfg = load_config(None, overrides(run, "--reward.mode=shaped"))
    with pytest.raises(
        ConfigError,
        match=r"offline_seed0: the policy is conditioned on 2 instructions.*"
        r"reward.mode='shaped'",
    ):
        build_online_agent(cfg, 0, RunDir(run), describe_env(cfg), agents)
