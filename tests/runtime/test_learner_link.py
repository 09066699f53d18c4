"""The learner link under bad and hostile input (issue 15): a live learner served on 127.0.0.1 with CURVE
keys, real ZeroMQ clients, malformed pushes, oversized frames, unauthenticated and impersonating clients.
Every rejected message must change nothing, and the learner must keep serving."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import zmq
from online_setup import CODE, copy_run, overrides

from robot_rl import keys
from robot_rl.actor_build import describe_env
from robot_rl.config import ConfigError, load_config
from robot_rl.policies import factory as agents
from robot_rl.runtime.actor_claim import claim_folder, log_id
from robot_rl.runtime.link import PROTOCOL, ActorIdError, LearnerServer, ZmqLearnerLink
from robot_rl.runtime.metrics import episode_meta
from robot_rl.security import (
    actor_key_name,
    is_loopback,
    load_client_keys,
    load_server_keys,
    make_keys,
    secure_client_socket,
)
from robot_rl.transport import PeerUnavailableError, ProtocolError, encode_arrays, encode_header


@pytest.fixture(scope="module")
def key_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("keys")
    make_keys(folder, [actor_key_name(0), actor_key_name(1)])
    return folder


@pytest.fixture(scope="module")
def served(tiny_offline_run, tmp_path_factory, key_folder):
    """A learner (not training) served on 127.0.0.1 with keys: only listed clients are answered."""
    from robot_rl.runtime.learner import Learner

    run = copy_run(tiny_offline_run, tmp_path_factory.mktemp("link") / "run")
    cfg = load_config(None, overrides(run, "--online.address=tcp://127.0.0.1:0"))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    server = LearnerServer(learner, cfg.online.address, load_server_keys(key_folder)).start()
    yield learner, server
    server.close()


def _link(server, key_folder, name: str = "actor0", timeout_s: float = 2.0) -> ZmqLearnerLink:
    return ZmqLearnerLink(server.address, timeout_s=timeout_s, keys=load_client_keys(key_folder, name))


def _frames(learner, length: int) -> dict[str, np.ndarray]:
    """An all-zero episode of ``length`` steps that fits the learner: per-frame keys and the final
    observation."""
    frames = {k: np.zeros((length, *shape), dtype) for k, (shape, dtype) in learner.episode_spec.items()}
    frames.update({k: np.zeros(shape, dtype) for k, (shape, dtype) in learner.final_spec.items()})
    return frames


def _unchanged(learner) -> None:
    assert learner.replay.num_episodes == 0 and learner.replay.num_steps == 0
    assert learner.window.episodes == 0 and not learner.window.recent
    assert learner.window.snapshot() == {}  # the metrics row the training loop writes still works


def test_malformed_pushes_are_refused_and_change_nothing(served, key_folder):
    learner, server = served
    link = _link(server, key_folder)
    good = _frames(learner, 3)
    meta = episode_meta(good, learner.cfg.env.control_hz, -1)
    state, final = keys.STATE, keys.final_key(keys.STATE)
    long = learner.max_episode_steps + 1
    bad_pushes = {
        "meta: missing": (0, good, {}),
        "meta must be a dict": (0, good, "garbage"),
        "meta 'steps' must be int": (0, good, {**meta, "steps": "3"}),
        "meta 'success' must be bool": (0, good, {**meta, "success": 1}),
        "meta: unexpected ['extra']": (0, good, {**meta, "extra": 1}),
        "meta 'steps' is 1000000 but the frames give 3": (0, good, {**meta, "steps": 1_000_000}),
        "meta 'return' is": (0, good, {**meta, "return": float("nan")}),
        f"{long} frames; an episode has 1 to {learner.max_episode_steps}": (
            0,
            _frames(learner, long),
            {**meta, "steps": long},
        ),
        "0 frames": (0, _frames(learner, 0), {**meta, "steps": 0}),
        "frames: missing ['next.reward']": (
            0,
            {k: v for k, v in good.items() if k != keys.REWARD},
            meta,
        ),
        "frames: unexpected ['observation.images.front']": (
            0,
            {**good, "observation.images.front": np.zeros((3, 8, 8, 3), np.uint8)},
            meta,
        ),
        f"'{state}' must be float32": (0, {**good, state: good[state].astype(np.float64)}, meta),
        f"'{state}' has 2 frames, the other keys 3": (0, {**good, state: good[state][:2]}, meta),
        "holds NaN or inf": (0, {**good, keys.ACTION: np.full_like(good[keys.ACTION], np.inf)}, meta),
        f"'{final}' must be float32 {good[final].shape}, got float32 (1, ": (
            0,
            {**good, final: good[final][None]},
            meta,
        ),
        "is set before the last frame": (
            0,
            {**good, keys.DONE: np.array([True, False, False])},
            {**meta, "terminal": True},
        ),
        "actor 0 sent episode 5 but episode 0": (5, good, meta),
        "episode=-1 is out of range": (-1, good, meta),
    }
    for message, (episode, frames, bad_meta) in bad_pushes.items():
        with pytest.raises(RuntimeError, match=re.escape(message)):  # ProtocolError is one
            link.push(0, episode, frames, bad_meta)
        _unchanged(learner)
    # the same checks guard the Ray backend, which calls Learner.push directly
    with pytest.raises(ProtocolError, match="meta: missing"):
        learner.push(0, 0, good, {})
    with pytest.raises(ProtocolError, match="actor must be an integer, got str"):
        learner.push("0", 0, good, meta)
    with pytest.raises(ProtocolError, match="actor must be an integer, got bool"):
        learner.hello(True)
    _unchanged(learner)
    assert not learner._active  # no rejected message registered an actor
    # raw requests with missing or mistyped header fields get error replies too
    sock = _raw_socket(server, key_folder)
    for header, parts in (
        ({"op": "push", "actor": 0, "episode": 0}, [encode_arrays(good)]),  # no meta
        ({"op": "push", "actor": 0, "episode": 0, "meta": meta}, [b"\x00not safetensors"]),
        ({"op": "push", "actor": 0, "episode": 0, "meta": meta}, []),
        ({"op": "weights", "have": "all"}, []),
    ):
        sock.send_multipart([encode_header({**header, "protocol": PROTOCOL, "id": 1}), *parts])
        assert sock.poll(5000), header
        reply = json.loads(sock.recv_multipart()[0])
        assert reply["ok"] is False and reply["type"] == "ProtocolError", reply
    sock.close()
    _unchanged(learner)
    # the learner keeps serving: a valid episode is stored once and counted
    reply = link.push(0, 0, good, meta)
    assert reply["acked"] == 1 and learner.replay.num_steps == 3 and learner.window.episodes == 1
    assert learner.window.snapshot()["success_rate"] == 0.0
    assert link.push(0, 0, good, meta)["acked"] == 1 and learner.replay.num_episodes == 1  # a resend
    link.bye(0)  # frees actor 0 for the other tests' clients
    link.close()


def _raw_socket(server, key_folder, name: str = "actor0") -> zmq.Socket:
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    secure_client_socket(sock, load_client_keys(key_folder, name))
    sock.connect(server.address)
    return sock


def test_oversized_frame_is_dropped_before_buffering_and_the_learner_keeps_serving(served, key_folder):
    learner, server = served
    sock = _raw_socket(server, key_folder)
    header = {"op": "push", "actor": 0, "episode": 99, "meta": {}, "protocol": PROTOCOL, "id": 1}
    start = time.monotonic()
    sock.send_multipart([encode_header(header), b"\x00" * (learner.max_message_bytes + 1)])
    assert not sock.poll(1000), "a frame over MAXMSGSIZE must never be read, let alone answered"
    sock.close()
    link = _link(server, key_folder)
    assert link.weights(-1)[1] is not None  # served at once after the drop
    assert time.monotonic() - start < 5
    link.close()


def test_unauthenticated_and_impersonating_clients_are_refused(served, key_folder, tmp_path):
    learner, server = served
    plain = ZmqLearnerLink(server.address, timeout_s=0.5)  # loopback, no keys: the handshake fails
    # the server drops the connection at the failed handshake (or never answers)
    with pytest.raises(
        PeerUnavailableError, match="(did not answer|closed the connection before answering) 'weights'"
    ):
        plain.weights(-1)  # never gets the weights
    with pytest.raises(
        PeerUnavailableError, match="(did not answer|closed the connection before answering) 'hello'"
    ):
        plain.hello(0)  # nor the config
    plain.close()
    make_keys(tmp_path / "other", [actor_key_name(0)])  # valid CURVE keys the learner does not list
    stranger = ZmqLearnerLink(
        server.address, timeout_s=0.5, keys=load_client_keys(tmp_path / "other", "actor0")
    )
    with pytest.raises(PeerUnavailableError):
        stranger.hello(0)
    stranger.close()
    other = _link(server, key_folder, "actor1")  # listed, but bound to actor 1
    active = set(learner._active)
    for call in (
        lambda: other.hello(0),
        lambda: other.push(0, 0, _frames(learner, 1), {}),
        lambda: other.bye(0),
    ):
        with pytest.raises(RuntimeError, match="client key 'actor1' may not act as actor 0"):
            call()
    assert learner._active == active
    assert other.hello(1)["acked"] == 0  # its own id is fine
    assert other.bye(1)["status"]["stop"] is False
    other.close()
    link = _link(server, key_folder)  # and the learner still serves actor 0
    assert link.hello(0)["max_episode_steps"] == learner.max_episode_steps
    link.bye(0)
    link.close()


def test_non_loopback_bind_without_keys_is_refused(served, tmp_path):
    learner, _ = served
    for address in ("tcp://0.0.0.0:0", "tcp://*:0", "tcp://192.168.1.20:0"):
        with pytest.raises(
            ConfigError, match=f"online.address={address.replace('*', '[*]')} binds a non-loop"
        ):
            LearnerServer(learner, address)  # refused before binding
    with pytest.raises(ConfigError, match="connects to a non-loopback address: set security.keys"):
        ZmqLearnerLink("tcp://192.168.1.20:5560")
    assert (
        is_loopback("tcp://127.0.0.1:5560") and is_loopback("tcp://localhost:1") and is_loopback("ipc:///x")
    )
    assert is_loopback("tcp://[::1]:5560") and not is_loopback("tcp://lo:5560")
    from robot_rl.runtime.local import run_learner

    cfg = load_config(None, overrides(tmp_path, "--online.address=tcp://*:5560"))
    with pytest.raises(ConfigError) as refused:  # `robot-rl online --role learner`: before the learner builds
        run_learner(cfg, 0, describe_env, agents)
    assert "\n" not in str(refused.value) and "set security.keys" in str(refused.value)


def test_keys_command_adds_keys_and_never_replaces_them(tmp_path, capsys):
    from robot_rl.cli.main import main

    folder = tmp_path / "keys"
    assert main(["keys", str(folder), "--actors", "2"]) == 0
    server = (folder / "server.key_secret").read_bytes()
    assert sorted(p.name for p in (folder / "clients").iterdir()) == ["actor0.key", "actor1.key"]
    assert (folder / "actor1.key_secret").stat().st_mode & 0o777 == 0o600
    assert main(["keys", str(folder), "--actors", "3", "--clients", "critic0"]) == 0  # adds actor2, critic0
    assert (folder / "server.key_secret").read_bytes() == server
    assert set(load_server_keys(folder).clients.values()) == {"actor0", "actor1", "actor2", "critic0"}
    assert load_client_keys(folder, "actor2").server == load_server_keys(folder).public
    assert main(["keys", str(folder), "--clients", "../x"]) == 1
    assert "key name '../x'" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"nobody.key_secret not found; make it with: robot-rl keys"):
        load_client_keys(folder, "nobody")


def _actor_cli(run_dir, address: str, key_folder) -> subprocess.CompletedProcess:
    """A real ``robot-rl online --role actor --actor-id 0`` against the learner at ``address``."""
    args = ["online", "--role", "actor", "--actor-id", "0", f"--online.address={address}"]
    return subprocess.run(
        [sys.executable, "-c", CODE, *args, f"--security.keys={key_folder}", *overrides(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _clash_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("robot-rl: actor id clash: "), proc.stderr[-2000:]
    for needle in needles:
        assert needle in line, line
    return line


def test_a_second_live_actor_with_the_same_id_is_refused_and_the_holder_goes_on(served, key_folder, tmp_path):
    """Issue 39: a second actor 0 against a learner whose actor 0 is live took the id over (the holder then
    crashed on acks beyond its log), and a second actor 0 on the same run dir wrote into the holder's log and
    crashed with an IndexError traceback. Now each newcomer exits with one line and the holder goes on."""
    learner, server = served
    holder = _link(server, key_folder)
    first = learner.replay.acked.get(0, 0)
    frames = _frames(learner, 3)
    meta = episode_meta(frames, learner.cfg.env.control_hz, -1)
    holder.hello(0)
    assert holder.push(0, first, frames, meta)["acked"] == first + 1
    steps = learner.replay.num_steps
    # another machine: its own run dir and episode log
    line = _clash_line(
        _actor_cli(tmp_path / "other", server.address, key_folder), "actor 0 already belongs to another"
    )
    assert holder.client_id not in line  # which would tell the newcomer how to pass for the holder
    # this machine: a live actor process holds actor 0's folder
    folder = tmp_path / "same" / "online" / "online_qc_seed0" / "actor0"
    code = "import sys; from pathlib import Path; from robot_rl.runtime.actor_claim import claim_folder; "
    code += "lock = claim_folder(Path(sys.argv[1]), 0); print('held', flush=True); sys.stdin.read()"
    live = subprocess.Popen(
        [sys.executable, "-c", code, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert live.stdout.readline() == b"held\n"
        proc = _actor_cli(tmp_path / "same", server.address, key_folder)
        _clash_line(proc, f"actor 0: {folder} is in use by another running actor process (pid {live.pid})")
    finally:
        live.kill()
        live.wait()
    assert not (folder / "episodes").exists()  # refused before it opened the log
    other = _link(server, key_folder)  # the same key, another client: push and bye are refused as well
    for call in (lambda: other.push(0, first + 1, frames, meta), lambda: other.bye(0)):
        with pytest.raises(ActorIdError, match="actor 0 already belongs to another actor process"):
            call()
    assert learner.replay.num_steps == steps and 0 in learner._active
    assert holder.push(0, first + 1, frames, meta)["acked"] == first + 2  # the holder goes on
    holder.bye(0)
    assert other.hello(0)["acked"] == first + 2  # the holder said bye: the id is free again
    other.bye(0)
    holder.close()
    other.close()
    with claim_folder(folder, 0) as lock:  # the dead holder's lock is free at once (a restart takes it)
        assert (folder / "lock").read_text() == f"{os.getpid()}\n" and not lock.closed
    assert log_id(folder) == log_id(folder) and len(log_id(folder)) == 32
