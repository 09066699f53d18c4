"""Training on arbitrary LeRobot datasets (issue 5): the real G1 fixtures (26-dim state/action, one 480x640
AV1 camera), a multi-camera dataset we write, frame stores, batch determinism and bad configs."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from repo_paths import LEROBOT_FIXTURES

from robot_rl.algos.batch import batch_to_torch
from robot_rl.cli.errors import explain
from robot_rl.cli.main import main
from robot_rl.config import ConfigError, DataConfig
from robot_rl.data.lerobot.writer import LeRobotWriter
from robot_rl.data.training.frames import ZarrFrameCache
from robot_rl.data.training.loader import batches
from robot_rl.data.training.training_set import TrainingSet, horizon_from_seconds
from robot_rl.policies import load_agent
from robot_rl.policies.encoders import UnknownTaskError

FIXTURES = LEROBOT_FIXTURES
G1 = FIXTURES / "g1_pick_bottle_v30"
pytestmark = pytest.mark.skipif(not G1.is_dir(), reason=f"fixtures absent under {FIXTURES}")
TINY = ["--policy.hidden_dims=[32,32]", "--policy.image_features=8", "--offline.critic_hidden_dims=[32,32]"]


def g1_set(tmp_path: Path, mode: str, **kw) -> TrainingSet:
    cfg = DataConfig(path=str(G1), image_size=[24, 32], frame_cache=mode, **kw)
    return TrainingSet(G1, cfg, horizon=4, gamma=0.99, cache_dir=tmp_path / "cache")


def test_horizon_from_seconds_maps_to_frames_or_names_the_key():
    assert horizon_from_seconds(0.5, 30, default=5) == 15
    assert horizon_from_seconds(0.0, 30, default=5) == 5
    with pytest.raises(ConfigError, match="data.horizon_s"):
        horizon_from_seconds(0.51, 30, default=5)


def test_frame_stores_return_the_same_frames(tmp_path):
    rows = np.array([1786, 3, 0, 1000, 3, 290, 289])  # several episodes, unsorted, repeated
    video = g1_set(tmp_path, "none")
    expected = video.store.frames("observation.images.cam_high", rows)
    assert expected.shape == (7, 24, 32, 3) and expected.dtype == np.uint8
    assert not np.array_equal(expected[0], expected[2])
    for mode in ("memory", "zarr"):
        got = g1_set(tmp_path, mode).store.frames("observation.images.cam_high", rows)
        np.testing.assert_array_equal(got, expected, err_msg=mode)


def test_zarr_cache_is_reused_and_a_killed_build_is_ignored(tmp_path):
    g1_set(tmp_path, "zarr")
    meta = tmp_path / "cache" / "frames_24x32" / "cache.json"
    stamp = meta.stat().st_mtime_ns
    g1_set(tmp_path, "zarr")
    assert meta.stat().st_mtime_ns == stamp  # reused, not rebuilt
    json.loads(meta.read_text())
    # a cache whose recorded source differs (as after a killed or stale build) is rebuilt
    meta.write_text(json.dumps({"root": "elsewhere"}))
    data = g1_set(tmp_path, "zarr")
    assert isinstance(data.store, ZarrFrameCache) and meta.stat().st_mtime_ns != stamp
    assert not (tmp_path / "cache" / "frames_24x32.tmp").exists()


def test_batches_depend_only_on_seed_and_step_whatever_the_workers(tmp_path):
    data = g1_set(tmp_path, "none", val_episodes=[4])
    in_process = list(batches(data, 8, seed=3, start=5, stop=7, num_workers=0))
    workers = list(batches(data, 8, seed=3, start=5, stop=7, num_workers=2))
    for a, b in zip(in_process, workers, strict=True):
        for key in ("observation.state", "observation.images.cam_high"):
            torch.testing.assert_close(a["observations"][key], b["observations"][key])
        torch.testing.assert_close(a["actions"], b["actions"])
    assert not torch.equal(in_process[0]["actions"], in_process[1]["actions"])
    val_rows = set(data.val.rows.tolist())
    assert val_rows == set(range(1425, 1787)) and not val_rows & set(data.train.rows.tolist())


def test_repeated_batches_serve_k_steps_each_and_a_resumed_run_gets_the_same(tmp_path):
    """``repeat`` = 3 (an agent's batch_reuse): steps 0-2 get block 0's batch, 3-5 block 1's, 6 block 2's
    (block b's batch is what step b gets without repeat); a run resumed at step 4 gets steps 4-6's."""
    data = g1_set(tmp_path, "none", val_episodes=[4])

    def same(a: dict, b: dict) -> bool:
        return torch.equal(a["actions"], b["actions"])

    full = list(batches(data, 8, seed=3, start=0, stop=7, num_workers=0, repeat=3))
    assert len(full) == 7
    assert same(full[0], full[2]) and same(full[3], full[5])
    assert not same(full[2], full[3]) and not same(full[5], full[6])
    plain = list(batches(data, 8, seed=3, start=0, stop=3, num_workers=0))
    assert all(same(full[3 * b], plain[b]) for b in range(3))
    resumed = list(batches(data, 8, seed=3, start=4, stop=7, num_workers=0, repeat=3))
    assert len(resumed) == 3 and all(same(a, b) for a, b in zip(resumed, full[4:], strict=True))


@pytest.mark.parametrize("version", ["v30", "v21"])
def test_train_bc_on_g1_then_reload_and_predict_chunks(tmp_path, version):
    root = FIXTURES / f"g1_pick_bottle_{version}"
    run = tmp_path / "run"
    args = ["train", "--algo", "bc", "--seed", "0", f"--run_dir={run}", f"--data.path={root}"]
    args += [
        "--data.image_size=[24,32]",
        "--data.val_episodes=[4]",
        "--data.val_every=4",
        "--data.horizon_s=0.2",
    ]
    args += ["--data.frame_cache=none", "--data.num_workers=0", "--bc.steps=8", "--bc.batch_size=16", *TINY]
    assert main(args) == 0
    with open(run / "logs" / "bc_seed0_val.csv") as f:
        val = list(csv.DictReader(f))
    assert [int(r["step"]) for r in val] == [4, 8]
    report = json.loads((run / "open_loop" / "bc_seed0.json").read_text())
    assert report["horizon"] == 6 and report["frames_scored"] == 362
    assert np.isfinite(report["val_action_mae"]) and len(report["mae_per_chunk_step"]) == 6
    assert (run / "open_loop" / "bc_seed0.png").stat().st_size > 0
    assert (run / "logs" / "bc_seed0.png").stat().st_size > 0

    assert report["val_hold_action_mae"] > 0
    rescored = run / "open_loop" / "bc_seed0.json"
    rescored.unlink()
    assert main(["open-loop", "--seed", "0", *args[5:]]) == 0  # same checkpoint, same numbers
    assert json.loads(rescored.read_text())["val_action_mae"] == pytest.approx(report["val_action_mae"])

    agent, header = load_agent(run / "checkpoints" / "bc_seed0", evaluate=True, seed=0)
    assert header.obs_keys == ["observation.state", "observation.images.cam_high"]
    data = g1_set(tmp_path, "none")
    batch = batch_to_torch(data.batch(data.train, np.array([0, 400, 1700])))
    chunks = agent.act(batch["observations"])
    assert chunks.shape == (3, 6, 26) and torch.isfinite(chunks).all()


def write_two_camera_dataset(root: Path) -> None:
    features = {
        "observation.state": {"dtype": "float32", "shape": [3]},
        "observation.images.left": {"dtype": "video", "shape": [16, 16, 3]},
        "observation.images.right": {"dtype": "video", "shape": [16, 16, 3]},
        "action": {"dtype": "float32", "shape": [2]},
        "next.reward": {"dtype": "float32", "shape": [1]},
        "next.done": {"dtype": "bool", "shape": [1]},
    }
    rng = np.random.default_rng(0)
    with LeRobotWriter(root, fps=10, features=features) as writer:
        for ep in range(3):
            t = 12 + ep
            done = np.zeros(t, dtype=bool)
            done[-1] = True
            writer.add_episode(
                {
                    "observation.state": rng.normal(size=(t, 3)).astype(np.float32),
                    "observation.images.left": rng.integers(0, 255, (t, 16, 16, 3), dtype=np.uint8),
                    "observation.images.right": rng.integers(0, 255, (t, 16, 16, 3), dtype=np.uint8),
                    "action": rng.normal(size=(t, 2)).astype(np.float32),
                    "next.reward": done.astype(np.float32),
                    "next.done": done,
                },
                task=["pick the cube", "push the cube"][ep % 2],
            )


def test_two_camera_dataset_trains_bc_and_offline_rl(tmp_path):
    root = tmp_path / "two_cams"
    write_two_camera_dataset(root)
    data = TrainingSet(root, DataConfig(cameras=["right"]), horizon=3, gamma=0.9, cache_dir=tmp_path)
    assert data.obs_keys == ["observation.state", "observation.images.right"]
    with pytest.raises(ConfigError, match="observation.images.top"):
        TrainingSet(root, DataConfig(cameras=["top"]), horizon=3, gamma=0.9, cache_dir=tmp_path)
    run = tmp_path / "run"
    args = ["train", "--algo", "offline", "--seed", "0", f"--run_dir={run}", f"--data.path={root}"]
    args += ["--bc.steps=3", "--offline.steps=3", "--bc.batch_size=8", "--offline.batch_size=8", *TINY]
    args += ["--offline.best_of_n=2", "--data.val_episodes=[2]", "--data.val_every=3"]
    assert main(args) == 0
    agent, header = load_agent(run / "checkpoints" / "offline_seed0", evaluate=True, seed=0)
    assert header.obs_keys == ["observation.state", "observation.images.left", "observation.images.right"]
    assert json.loads((run / "open_loop" / "offline_seed0.json").read_text())["frames_scored"] == 14
    # rewards 0/1 in the data: reward_range is filled from it and saved; the val log holds Q against MC
    saved = json.loads((run / "checkpoints" / "offline_seed0" / "config.json").read_text())
    assert saved["offline"]["reward_norm"] == "max" and saved["offline"]["reward_range"] == [0.0, 1.0]
    with open(run / "logs" / "offline_seed0_val.csv") as f:
        row = next(csv.DictReader(f))
    for key in ("val_q_data", "val_q_policy", "val_mc_return", "val_q_minus_mc_terminal"):
        assert np.isfinite(float(row[key])), key
    # episode 2 (14 frames, -1 per step until its terminal frame, which is worth 0): exact MC returns
    assert float(row["val_mc_return"]) == pytest.approx(-np.mean([(1 - 0.99**k) / 0.01 for k in range(14)]))
    # two instructions in the data: the policy is conditioned on the task string
    batch = batch_to_torch(data.batch(data.train, np.array([0, 0])))
    obs = {
        **batch["observations"],
        "observation.images.left": batch["observations"]["observation.images.right"],
    }
    noise = torch.zeros(2, 2, 5, 2)
    pick = agent.act({**obs, "task": ["pick the cube"] * 2}, noise)
    push = agent.act({**obs, "task": ["push the cube"] * 2}, noise)
    assert not torch.allclose(pick, push)
    with pytest.raises(UnknownTaskError, match="'stack the cube' was not in the training data") as err:
        agent.act({**obs, "task": ["stack the cube"] * 2})
    # the CLI prints it as one line instead of a traceback (a pipeline whose demos lack an instruction)
    assert explain(err.value) == (f"robot-rl: policy error: {err.value}", 1)


def test_bad_training_configs_exit_with_a_clear_message(tmp_path, capsys):
    def train(algo: str, *extra: str) -> int:  # a fresh run dir each time: finished stages are skipped
        run = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        return main(["train", "--algo", algo, "--seed", "0", f"--run_dir={run}", f"--data.path={G1}", *extra])

    small = ["--bc.steps=1", "--data.frame_cache=none", "--data.image_size=[24,32]", "--data.num_workers=0"]
    assert train("offline", *small, *TINY) == 1
    err = capsys.readouterr().err
    assert "next.reward" in err and "data.reward=episode_end" in err
    assert train("bc", "--data.val_episodes=[5]") == 2
    assert "data.val_episodes" in capsys.readouterr().err
    assert train("bc", "--data.val_episodes=[0,1,2,3,4]") == 2
    assert "none is left to train on" in capsys.readouterr().err
    assert train("bc", "--data.horizon_s=0.01") == 2
    assert "data.horizon_s" in capsys.readouterr().err
    assert train("bc", "--data.frame_cache=disk") == 2
    assert "data.frame_cache" in capsys.readouterr().err


def test_reward_range_is_filled_from_the_data_and_bad_settings_name_the_key():
    from robot_rl.config import OfflineRLConfig
    from robot_rl.training.loop import resolve_reward_range

    rewards = np.array([0.0, 3.5, 10.0, 1.0], dtype=np.float32)
    assert resolve_reward_range(OfflineRLConfig(), rewards).reward_range == [0.0, 10.0]
    assert resolve_reward_range(OfflineRLConfig(reward_range=[0.0, 20.0]), rewards).reward_range == [
        0.0,
        20.0,
    ]
    raw = OfflineRLConfig(reward_norm="none", success_value="zero")
    assert resolve_reward_range(raw, rewards).reward_range == []
    with pytest.raises(ConfigError, match="offline.reward_norm"):
        resolve_reward_range(OfflineRLConfig(reward_norm="minmax"), rewards)
    with pytest.raises(ConfigError, match="offline.reward_range"):
        resolve_reward_range(OfflineRLConfig(reward_range=[1.0, 0.0]), rewards)
