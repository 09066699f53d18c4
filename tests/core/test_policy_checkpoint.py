"""Checkpoint folders: round trips, the typed header and its format versions, errors, warm start (no
pickle)."""

import json

import numpy as np
import pytest
import torch

from robot_rl.algos.qc import TargetPicks
from robot_rl.checkpoint import FORMAT_KEY, FORMAT_VERSION, CheckpointError, read_header
from robot_rl.config import (
    BCConfig,
    CORFTConfig,
    OfflineRLConfig,
    PipelineConfig,
    PolicyConfig,
    SACConfig,
    config_to_dict,
)
from robot_rl.keys import ENV_STATE, STATE
from robot_rl.policies import (
    build_agent,
    check_compatible,
    load_agent,
    load_checkpoint,
    load_extra_state,
    load_policy,
    save_agent,
    save_checkpoint,
    warm_start_from_bc,
)
from robot_rl_testing.fakes import SIM_ACTION_DIM, SIM_OBS_SHAPES, fake_batch, fake_obs, fake_stats

H, D = 5, SIM_ACTION_DIM


def _full_config(method):
    cfg = PipelineConfig(
        policy=PolicyConfig(horizon=H, hidden_dims=[32, 32]),
        bc=BCConfig(lr=1e-3),
        offline=OfflineRLConfig(
            method=method, critic_hidden_dims=[32, 32], best_of_n=4, critic_agg="min", reward_range=[0.0, 1.0]
        ),
    )
    return cfg, config_to_dict(cfg)


def _noise(method, b):
    if method in ("qc", "qc_fql"):  # qc_fql acts best-of-N by default (offline.extraction=bc_anchored)
        return torch.randn(b, 4, H, D)
    if method == "bc":
        return torch.randn(b, 1, H, D)
    return torch.randn(b, H, D)


@pytest.mark.parametrize("method", ["bc", "qc", "qc_fql"])
def test_round_trip_identical_actions(tmp_path, method):
    torch.manual_seed(0)
    cfg, tree = _full_config(method)
    stats = fake_stats()
    algo_cfg = cfg.bc if method == "bc" else cfg.offline
    agent = build_agent(method, cfg.policy, algo_cfg, SIM_OBS_SHAPES, D, stats)
    batch = fake_batch(8, H, seed=0)
    agent.update(batch)
    save_agent(tmp_path / "ckpt", agent, tree, stats, SIM_OBS_SHAPES, D, include_optimizer=True)
    names = {p.name for p in (tmp_path / "ckpt").iterdir()}
    assert names == {
        "model.safetensors",
        "config.json",
        "normalization.json",
        "extra_state.safetensors",
        "extra_state.json",
    }
    saved = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert saved["method"] == method and saved["action_dim"] == D and saved["obs_shapes"][STATE] == [22]

    loaded, header = load_agent(
        tmp_path / "ckpt", load_optimizer=True, obs_shapes=SIM_OBS_SHAPES, action_dim=D
    )
    assert header.method == method and header.format_version == FORMAT_VERSION
    assert loaded.modules()["policy"].training  # not evaluate=True: train mode, as built
    obs = fake_obs(3, seed=4)
    noise = _noise(method, 3)
    torch.testing.assert_close(loaded.act(obs, noise), agent.act(obs, noise), rtol=0, atol=0)
    # optimizer state survived: one more identical update gives identical weights (on the next batch: QC
    # keeps a batch's target pick for offline.target_reuse updates, a state a checkpoint does not hold)
    after = fake_batch(8, H, seed=1)
    torch.manual_seed(1)
    agent.update(after)
    torch.manual_seed(1)
    loaded.update(after)
    for (n1, m1), (_, m2) in zip(agent.modules().items(), loaded.modules().items(), strict=True):
        for (k, p1), p2 in zip(m1.state_dict().items(), m2.state_dict().values(), strict=True):
            torch.testing.assert_close(p1, p2, msg=f"{n1}.{k}")


def test_policy_only_and_warm_start(tmp_path):
    torch.manual_seed(0)
    cfg, tree = _full_config("qc")
    stats = fake_stats()
    bc = build_agent("bc", cfg.policy, cfg.bc, SIM_OBS_SHAPES, D, stats)
    bc.update(fake_batch(8, H, seed=0))
    save_agent(tmp_path / "bc", bc, tree, stats, SIM_OBS_SHAPES, D)
    policy, _, _ = load_policy(tmp_path / "bc")
    obs, noise = fake_obs(2, seed=1), torch.randn(2, 1, H, D)
    torch.testing.assert_close(policy.act(obs, noise), bc.act(obs, noise))
    for method in ("qc", "qc_fql"):
        agent = build_agent(method, cfg.policy, cfg.offline, SIM_OBS_SHAPES, D, stats)
        warm_start_from_bc(agent, tmp_path / "bc")
        torch.testing.assert_close(agent.policy.sample(obs, 1, noise), bc.policy.sample(obs, 1, noise))
    assert load_extra_state(tmp_path / "bc") is None


def test_missing_files_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_checkpoint(tmp_path / "nowhere")
    torch.manual_seed(0)
    cfg, tree = _full_config("qc")
    stats = fake_stats()
    agent = build_agent("bc", cfg.policy, cfg.bc, SIM_OBS_SHAPES, D, stats)
    save_agent(tmp_path / "c", agent, tree, stats, SIM_OBS_SHAPES, D)
    (tmp_path / "c" / "normalization.json").unlink()
    with pytest.raises(FileNotFoundError, match="normalization.json"):
        load_agent(tmp_path / "c")
    with pytest.raises(FileNotFoundError, match="optimizer state"):
        save_agent(tmp_path / "d", agent, tree, stats, SIM_OBS_SHAPES, D)
        load_agent(tmp_path / "d", load_optimizer=True)


def test_shape_mismatch_names_key_and_shapes(tmp_path):
    torch.manual_seed(0)
    cfg, tree = _full_config("qc")
    stats = fake_stats()
    agent = build_agent("bc", cfg.policy, cfg.bc, SIM_OBS_SHAPES, D, stats)
    save_agent(tmp_path / "c", agent, tree, stats, SIM_OBS_SHAPES, D)
    config = load_checkpoint(tmp_path / "c").header.config
    check_compatible(config, {**SIM_OBS_SHAPES, "observation.images.front": (64, 64, 3)}, D)  # extra key ok
    with pytest.raises(ValueError, match=r"observation\.environment_state.*\(9,\).*\(7,\)"):
        check_compatible(config, {STATE: (22,), ENV_STATE: (9,)}, D)
    with pytest.raises(ValueError, match=r"observation\.environment_state.*missing"):
        check_compatible(config, {STATE: (22,)}, D)
    with pytest.raises(ValueError, match=r"'action'.*\(7,\).*\(4,\)"):
        load_agent(tmp_path / "c", obs_shapes=SIM_OBS_SHAPES, action_dim=7)


def test_plain_save_checkpoint_layout(tmp_path):
    from safetensors.torch import load_file

    mod = torch.nn.Linear(2, 3)
    save_checkpoint(
        tmp_path / "x", {"lin": mod}, {"a": 1}, fake_stats(), obs_shapes={STATE: (2,)}, action_dim=1
    )
    keys = set(load_file(str(tmp_path / "x" / "model.safetensors")))
    assert keys == {"lin.weight", "lin.bias"}
    with pytest.raises(CheckpointError, match=r"y/config.json: checkpoint format 2 lacks \['obs_shapes'"):
        save_checkpoint(tmp_path / "y", {"policy": mod}, {}, fake_stats())  # no header: refused
    assert not (tmp_path / "y").exists()


def test_extra_state_round_trip(tmp_path):
    mod = torch.nn.Linear(2, 3)
    opt = torch.optim.Adam(mod.parameters())
    mod(torch.randn(4, 2)).sum().backward()
    opt.step()
    big = 2**100 + 3  # PCG64 rng states are 128-bit ints
    extra = {
        "optimizers": {"policy": opt.state_dict()},
        "step": 7,
        "rng": {"state": big},
        "t": (1, "a"),
    }
    stats = fake_stats()
    save_checkpoint(tmp_path / "x", {"lin": mod}, {}, stats, extra, obs_shapes={STATE: (2,)}, action_dim=1)
    back = load_extra_state(tmp_path / "x")
    assert back["step"] == 7 and back["rng"]["state"] == big and back["t"] == (1, "a")
    assert load_extra_state(tmp_path / "x")["step"] == 7
    opt2 = torch.optim.Adam(mod.parameters())
    opt2.load_state_dict(back["optimizers"]["policy"])
    torch.testing.assert_close(
        opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"]
    )


def test_a_kept_target_pick_with_an_instruction_survives_a_checkpoint(tmp_path):
    """QC's kept target pick (offline.target_reuse) goes into a resumable checkpoint and, read back, still
    serves the same s' (its instruction strings included) without a new pick."""
    picks, drawn = TargetPicks(3), []

    def pick(obs):
        drawn.append(1)
        return torch.randn(4, 5, D)

    next_obs = {STATE: torch.randn(4, 2), "task": np.array(["lift the red cube"] * 4)}
    kept = picks.get(next_obs, pick)
    save_checkpoint(
        tmp_path / "x",
        {},
        {},
        fake_stats(),
        {"agent": picks.state()},
        obs_shapes={STATE: (2,)},
        action_dim=D,
    )
    again = TargetPicks(3)
    again.load_state(load_extra_state(tmp_path / "x")["agent"], torch.device("cpu"))
    same = {STATE: next_obs[STATE].clone(), "task": np.array(["lift the red cube"] * 4)}
    assert torch.equal(again.get(same, pick), kept) and len(drawn) == 1
    other = {**same, "task": np.array(["lift the blue cube"] * 4)}
    again.get(other, pick)
    assert len(drawn) == 2  # another instruction is another s': a new pick


def _saved_qc(tmp_path):
    torch.manual_seed(0)
    cfg, tree = _full_config("qc")
    stats = fake_stats()
    agent = build_agent("qc", cfg.policy, cfg.offline, SIM_OBS_SHAPES, D, stats)
    agent.update(fake_batch(8, H, seed=0))
    tree = {**tree, "obs_keys": sorted(SIM_OBS_SHAPES), "fps": 10, "features": {"inputs": [STATE]}}
    return cfg, agent, save_agent(tmp_path / "ckpt", agent, tree, stats, SIM_OBS_SHAPES, D)


def _rewrite_config(path, edit) -> None:
    file = path / "config.json"
    config = json.loads(file.read_text())
    edit(config)
    file.write_text(json.dumps(config))


def test_header_is_typed(tmp_path):
    cfg, _, path = _saved_qc(tmp_path)
    assert json.loads((path / "config.json").read_text())[FORMAT_KEY] == FORMAT_VERSION
    header = read_header(path)
    assert header.method == "qc" and header.action_dim == D and header.obs_shapes == SIM_OBS_SHAPES
    assert header.policy == cfg.policy and header.algo_config == cfg.offline
    assert list(header.algo_configs) == ["offline"]
    assert header.fps == 10 and header.features == {"inputs": [STATE]}
    assert header.obs_keys == sorted(SIM_OBS_SHAPES)
    ckpt = load_checkpoint(path, extra_state=True)
    assert ckpt.header == header and ckpt.extra_state is None
    assert set(ckpt.weights) == {"policy", "critic", "target_critic"}


def test_corft_header_holds_both_sections(tmp_path):
    torch.manual_seed(0)
    cfg, tree = _full_config("corft")
    cfg.corft = CORFTConfig(lambda_bc=2.0)
    tree = config_to_dict(cfg)
    agent = build_agent(
        "corft", cfg.policy, cfg.offline, SIM_OBS_SHAPES, D, fake_stats(), corft_cfg=cfg.corft
    )
    save_agent(tmp_path / "c", agent, tree, fake_stats(), SIM_OBS_SHAPES, D)
    loaded, header = load_agent(tmp_path / "c")
    assert header.algo_configs == {"offline": cfg.offline, "corft": cfg.corft}
    assert loaded.corft_cfg.lambda_bc == 2.0


def test_evaluate_sets_eval_mode_and_deterministic_actions(tmp_path):
    torch.manual_seed(0)
    cfg = PipelineConfig(policy=PolicyConfig(horizon=1, hidden_dims=[32]), sac=SACConfig(num_critics=2))
    agent = build_agent("sac", cfg.policy, cfg.sac, SIM_OBS_SHAPES, D, fake_stats())
    save_agent(tmp_path / "s", agent, config_to_dict(cfg), fake_stats(), SIM_OBS_SHAPES, D)
    loaded, _ = load_agent(tmp_path / "s", evaluate=True, seed=0)
    assert loaded.deterministic and not any(m.training for m in loaded.modules().values())
    obs = fake_obs(2, seed=3)
    torch.testing.assert_close(loaded.act(obs), loaded.act(obs), rtol=0, atol=0)  # the mean, no sampling
    sampling, _ = load_agent(tmp_path / "s")
    assert not sampling.deterministic


def test_format_1_checkpoint_loads(tmp_path):
    """A checkpoint written before the format version existed (no ``checkpoint_format`` key) loads with
    the same weights; one without ``method`` is a BC checkpoint, as before."""
    _, agent, path = _saved_qc(tmp_path)
    _rewrite_config(path, lambda c: c.pop(FORMAT_KEY))
    loaded, header = load_agent(path)
    assert header.format_version == 1 and header.method == "qc"
    obs, noise = fake_obs(3, seed=4), torch.randn(3, 4, H, D)
    torch.testing.assert_close(loaded.act(obs, noise), agent.act(obs, noise), rtol=0, atol=0)
    policy, _, _ = load_policy(path)
    assert policy.horizon == H


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: c.update({FORMAT_KEY: 99}), r"checkpoint format 99 is not one this robot_rl reads"),
        (lambda c: c.update({FORMAT_KEY: "2.x"}), r"checkpoint format '2\.x' is not one"),
        (lambda c: [c.pop(FORMAT_KEY), c.pop("obs_shapes")], r"checkpoint format 1 lacks \['obs_shapes'\]"),
        (lambda c: c.update({"method": "dreamer"}), r"checkpoint format 2: unknown method 'dreamer'"),
        (lambda c: c["offline"].update({"best_of_n": "many"}), r"section 'offline' does not decode"),
    ],
)
def test_unreadable_header_fails_with_one_line_naming_the_file(tmp_path, edit, message):
    _, _, path = _saved_qc(tmp_path)
    _rewrite_config(path, edit)
    for load in (load_agent, load_checkpoint, read_header, load_policy):
        with pytest.raises(CheckpointError, match=message) as err:
            load(path)
        assert str(err.value).startswith(str(path / "config.json")) and "\n" not in str(err.value)
