"""Small VLA-path leftovers (issue 20): the ``--policy.vlm`` alias, eval overrides of inference-time knobs
(QC's ``offline.best_of_n``; RECAP's ``recap.cfg_beta`` is in test_recap.py) and the train report of
``next.success``."""

from __future__ import annotations

import json

import pytest
from online_setup import copy_run, overrides

from robot_rl.cli.main import main
from robot_rl.config import ConfigError, load_config
from robot_rl.data.training.features import FeatureUse


def test_policy_vlm_is_an_alias_of_policy_vla_vlm():
    cfg = load_config(None, ["--policy.kind=vla", "--policy.vlm=/models/smolvlm"])
    assert cfg.policy.vla.vlm == "/models/smolvlm"
    with pytest.raises(ConfigError, match="set the same key policy.vla.vlm"):
        load_config(None, ["--policy.vlm=a", "--policy.vla.vlm=b"])
    with pytest.raises(ConfigError, match="vlmx"):
        load_config(None, ["--policy.vlmx=a"])


def test_next_success_is_a_label_never_an_input():
    """Behaviour cloning ignores ``next.success`` without suggesting it as an input; RECAP reads it."""
    features = {
        "observation.state": {"dtype": "float32", "shape": [3]},
        "action": {"dtype": "float32", "shape": [2]},
        "next.reward": {"dtype": "float32", "shape": [1]},
        "next.success": {"dtype": "bool", "shape": [1]},
    }
    use = FeatureUse.build(features, {"observation.state": (3,)}, [], True, for_rl=False, multi_task=False)
    assert "data.features" not in use.ignored["next.success"]
    use = FeatureUse.build(features, {"observation.state": (3,)}, [], True, for_rl=True, multi_task=False)
    use.read_labels(["next.success"])
    assert use.targets[-1] == "next.success" and "next.success" not in use.ignored


def test_eval_override_of_best_of_n_takes_effect_and_is_recorded(tiny_offline_run, tmp_path):
    run = copy_run(tiny_offline_run, tmp_path / "run")
    args = ["eval", "--algo", "offline", *overrides(run)]
    assert main(args) == 0
    saved = json.loads((run / "eval" / "offline_seed0.json").read_text())
    assert saved["policy"]["inference"] == {"offline.best_of_n": 2}  # the checkpoint's (trained with 2)
    assert main([*args, "--offline.best_of_n=5", "--eval.name=n5"]) == 0
    saved = json.loads((run / "eval" / "offline_seed0_n5.json").read_text())
    assert saved["policy"]["inference"] == {"offline.best_of_n": 5}
    # a YAML/default value alone does not override the checkpoint: only the command line does
    assert main([*args, "--eval.name=again"]) == 0
    saved = json.loads((run / "eval" / "offline_seed0_again.json").read_text())
    assert saved["policy"]["inference"] == {"offline.best_of_n": 2}


def test_eval_refuses_a_policy_key_the_checkpoint_fixed(tiny_offline_run, tmp_path, capsys):
    """Before, ``robot-rl eval --policy.horizon=9`` evaluated the checkpoint's horizon-5 policy and said
    nothing. Training's own values, and the keys an evaluation reads, are accepted."""
    run = copy_run(tiny_offline_run, tmp_path / "run")
    args = ["eval", "--algo", "bc", *overrides(run)]  # repeats training's --policy.hidden_dims=[32,32]
    assert main([*args, "--policy.horizon=9", "--eval.name=h9"]) == 2
    err = capsys.readouterr().err
    assert "--policy.horizon=9" in err and "policy.horizon=5" in err and str(run / "checkpoints") in err
    assert not (run / "eval" / "bc_seed0_h9.json").exists()
    low = json.loads((run / "checkpoints" / "bc_seed0" / "config.json").read_text())["policy"]["action_low"]
    same = f"--policy.action_low=[{','.join(str(round(v, 6)) for v in low)}]"  # float32 round trip
    assert main([*args, same, "--policy.execution=temporal_ensemble", "--eval.name=te"]) == 0
    assert (run / "eval" / "bc_seed0_te.json").is_file()
