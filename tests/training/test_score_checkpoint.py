"""``robot-rl open-loop`` (robot_rl.training.loop.score_checkpoint) rebuilds ``observation.prev_action`` the
way the checkpoint was trained, whatever the config now says: its ``data.prev_action_steps`` and
``data.prev_action_start`` (issue 38 item 4: configs/g1_pick_bottle.yaml moved from one command to two), and
its relative-action reference (``policy.action_reference_velocity``)."""

from __future__ import annotations

import json

import pytest
from repo_paths import LEROBOT_FIXTURES, ROOT

from robot_rl.config import load_config
from robot_rl.policies import factory as agents
from robot_rl.run_dir import RunDir
from robot_rl.training.loop import score_checkpoint, train_agent

G1 = LEROBOT_FIXTURES / "g1_pick_bottle_v30"


@pytest.mark.skipif(not G1.is_dir(), reason=f"fixture absent: {G1}")
def test_open_loop_scores_with_the_checkpoints_command_history(tmp_path):
    common = [
        f"--run_dir={tmp_path}",
        f"--data.path={G1}",
        "--bc.steps=20",
        "--data.val_every=20",
        "--threads=1",
    ]
    config = ROOT / "configs" / "g1_pick_bottle.yaml"
    cfg = load_config(config, [*common, "--data.prev_action_steps=2", "--checkpoint_every=20"])
    run = RunDir(cfg.run_dir)
    trained = train_agent(cfg, "bc", 0, run, None, agents)
    saved = json.loads((run.checkpoint("bc", 0) / "config.json").read_text())
    assert saved["data"]["prev_action_steps"] == 2 and saved["policy"]["action_reference_velocity"] is True
    # a config that now says one command from zeros, held: the checkpoint's two from the state, continued
    later = load_config(
        config,
        [
            *common,
            "--data.prev_action_steps=1",
            "--data.prev_action_start=zeros",
            "--policy.action_reference_velocity=false",
        ],
    )
    scored = score_checkpoint(later, "bc", 0, run, agents)
    assert scored["val_action_mae"] == pytest.approx(trained["val_action_mae"], rel=1e-5)
    assert scored["val_first_action_mae"] == pytest.approx(trained["val_first_action_mae"], rel=1e-5)
