"""A tiny offline run (real demos, real BC and QC training with small networks) that online tests start from,
and helpers to run and inspect real `robot-rl online` processes."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import zarr

from robot_rl import keys
from robot_rl.config import load_config
from robot_rl.stages.collect import collect
from robot_rl.stages.train import train

CODE = "import sys; from robot_rl.cli.main import main; sys.exit(main(sys.argv[1:]))"

TINY = [
    "--collect.num_episodes=6",
    "--env.num_envs=1",
    "--bc.steps=10",
    "--offline.steps=10",
    "--bc.batch_size=32",
    "--offline.batch_size=32",
    "--policy.hidden_dims=[32,32]",
    "--offline.critic_hidden_dims=[32,32]",
    "--offline.best_of_n=2",
    "--sac.critic_hidden_dims=[32,32]",
    "--sac.actor_hidden_dims=[32,32]",
    "--seeds=[0]",
    "--data.num_workers=0",
    "--online.batch_size=32",
    "--online.env_steps=120",
    "--online.publish_every=5",
    "--online.checkpoint_every=20",
    "--online.log_every_s=0.5",
    "--online.max_env_steps_ahead=0",
    "--online.connect_timeout_s=60",
    "--intervention.device=sim_human",
    "--eval.episodes_per_seed=2",
]


def overrides(run_dir: Path, *extra: str) -> list[str]:
    return [f"--run_dir={run_dir}", *TINY, *extra]


def build_offline_run(run_dir: Path) -> None:
    """Collect 6 demos and train BC then QC for 10 steps each (tiny networks)."""
    cfg = load_config(None, overrides(run_dir))
    collect(cfg)
    train(cfg, "offline", 0)


def run_online(args: list[str], timeout: float = 300.0) -> Path:
    """Run ``robot-rl online *args`` (learner and actors as real processes) to its end and return the
    seed-0 online QC folder (``<run_dir>/online/online_qc_seed0``); fails the test, with the end of stderr,
    when the run exits non-zero."""
    done = subprocess.run(
        [sys.executable, "-c", CODE, "online", *args], capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = next(a.split("=", 1)[1] for a in args if a.startswith("--run_dir="))
    return Path(run_dir) / "online" / "online_qc_seed0"


def copy_run(src: Path, dst: Path) -> Path:
    """A private copy of the offline run (dataset and checkpoints only)."""
    dst.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src / "dataset", dst / "dataset")
    shutil.copytree(src / "checkpoints", dst / "checkpoints")
    return dst


def learner_token(run_dir: Path, seed: int = 0) -> str:
    """The run token of the learner that has started on ``run_dir`` for training seed ``seed`` (its
    ``<run_dir>/online/<name>_seed<seed>/learner.token``): pass it as ``ZmqLearnerLink(address, token=...)``,
    or as ``"token"`` in a raw request header, to talk to a learner in another process (``robot-rl online
    --role learner``). A link made in the process that serves the learner (``LearnerServer``) needs none."""
    from robot_rl.security import TOKEN_FILE, read_token

    files = sorted(Path(run_dir).glob(f"online/*_seed{seed}/{TOKEN_FILE}"))
    assert len(files) == 1, f"expected one learner token under {run_dir}/online, found {files}"
    return read_token(files[0])


def free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def start(*args: str, log: Path | None = None) -> subprocess.Popen:
    """A real ``robot-rl`` process in its own process group (a kill takes its children too)."""
    out = open(log, "ab") if log is not None else subprocess.DEVNULL
    return subprocess.Popen(
        [sys.executable, "-c", CODE, *args], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def committed_episodes(buffer: Path) -> int:
    """Episodes committed in a zarr replay buffer folder (0 if it does not exist yet); read-only."""
    try:
        return int(zarr.open_group(str(buffer), mode="r").attrs["committed"]["episodes"])
    except (FileNotFoundError, KeyError, zarr.errors.GroupNotFoundError):
        return 0


def wait_for(condition, timeout_s: float = 240.0, procs: tuple = (), what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        for p in procs:
            assert p.poll() is None, f"process {p.args[3:6]} exited ({p.returncode}) before: {what}"
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        time.sleep(0.1)


def toy_episode(
    length: int, intervened: bool = False, value: float = 0.0, final: float = -1.0
) -> dict[str, np.ndarray]:
    """A truncated toy online episode (3-d state, 2-d action) of constant state and action ``value``,
    whose final observation is ``final``."""
    return {
        keys.STATE: np.full((length, 3), value, np.float32),
        keys.TASK_INDEX: np.zeros(length, np.int64),
        keys.ACTION: np.full((length, 2), value, np.float32),
        keys.REWARD: np.zeros(length, np.float32),
        keys.DONE: np.zeros(length, bool),
        keys.SUCCESS: np.zeros(length, bool),
        keys.INTERVENTION: np.full(length, intervened),
        keys.final_key(keys.STATE): np.full(3, final, np.float32),
    }


def replay_on_single_env(env_cfg, seed: int, frames: dict, labelled: bool = False, device=None):
    """Re-run a logged episode on the single env of ``env_cfg`` from its seed with its actions; assert every
    recorded observation, reward and the final observation match bit for bit (``labelled``: a human's label
    set the last step's outcome). With ``device`` (the simulated human that drove this env), also assert
    it steps in exactly where the log says it did, with the logged action. Returns the env's last
    (terminated, truncated)."""
    from robot_rl.runtime.intervention import start_episode
    from robot_rl.sim import make_env

    env = make_env(env_cfg)
    try:
        obs, info = env.reset(seed=seed)
        if device is not None:
            start_episode(device, seed, info["task"])
        ended = (False, False)
        for t, action in enumerate(frames[keys.ACTION]):
            assert not any(ended), f"the env's episode ended before logged step {t}"
            for k in (keys.STATE, keys.ENV_STATE):
                np.testing.assert_array_equal(frames[k][t], obs[k], err_msg=f"{k} at step {t}")
            if device is not None:
                human = device.poll(obs)
                took_over = human is not None and human.action is not None
                assert took_over == bool(frames[keys.INTERVENTION][t]), f"intervention at step {t}"
                if took_over:
                    np.testing.assert_allclose(frames[keys.ACTION][t], human.action, atol=1e-6)
            obs, reward, terminated, truncated, _ = env.step(action)
            if not (labelled and t == len(frames[keys.ACTION]) - 1):
                assert frames[keys.REWARD][t] == np.float32(reward)
                assert frames[keys.DONE][t] == terminated
            ended = (terminated, truncated)
        for k in (keys.STATE, keys.ENV_STATE):
            np.testing.assert_array_equal(frames[keys.final_key(k)], obs[k], err_msg=f"final {k}")
        return ended
    finally:
        env.close()
