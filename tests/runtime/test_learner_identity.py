"""Identity on loopback (issue 39, item 3): a learner served on 127.0.0.1 without keys answers only
requests that carry its run token (``<online dir>/learner.token``). Any other local process used to push
episodes, send a forged ``bye`` (a false fault for actor 0, which it also unregistered) and download the
whole policy with ``weights have=-1``. Real sockets, a live learner and real actor processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import zmq
from online_setup import CODE, copy_run, free_address, learner_token, overrides

from robot_rl.actor_build import describe_env
from robot_rl.config import ConfigError, load_config
from robot_rl.policies import factory as agents
from robot_rl.runtime.link import PROTOCOL, LinkTokenError, ZmqLearnerLink
from robot_rl.runtime.metrics import episode_meta
from robot_rl.security import TOKEN_FILE, read_token
from robot_rl.security import learner_token as make_or_read_token
from robot_rl.transport import encode_arrays, encode_header

HAND_STEPS = 16  # the budget of the actor started by hand


@pytest.fixture(scope="module")
def served(tiny_offline_run, tmp_path_factory):
    """A learner (not training) served on 127.0.0.1 without keys, and its run dir."""
    from robot_rl.runtime.learner import Learner
    from robot_rl.runtime.link import LearnerServer

    run = copy_run(tiny_offline_run, tmp_path_factory.mktemp("identity") / "run")
    cfg = load_config(None, overrides(run, "--online.address=tcp://127.0.0.1:0"))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    server = LearnerServer(learner, cfg.online.address).start()
    yield learner, server, run
    server.close()


def _frames(learner, length: int) -> dict[str, np.ndarray]:
    frames = {k: np.zeros((length, *shape), dtype) for k, (shape, dtype) in learner.episode_spec.items()}
    frames.update({k: np.zeros(shape, dtype) for k, (shape, dtype) in learner.final_spec.items()})
    return frames


def _state(learner, server) -> tuple:
    """Everything a request could change: the status (less its clocks), acks, live actors, faults (which
    summary.json reports), id holders."""
    replay = learner.replay
    return (
        {k: v for k, v in learner.status().items() if not k.endswith("_s")},
        dict(replay.acked),
        set(learner._active),
        dict(learner.faults),
        dict(server.holders),
    )


def _raw(server, header: dict, *parts: bytes) -> list[bytes]:
    """One request from a bare DEALER socket (any local process can make one); the reply's frames."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(server.address)
    try:
        sock.send_multipart([encode_header({**header, "protocol": PROTOCOL, "id": 1}), *parts])
        assert sock.poll(5000), header
        return sock.recv_multipart()
    finally:
        sock.close()


def test_requests_without_the_run_token_are_refused_and_change_nothing(served):
    learner, server, run = served
    token = learner_token(run)
    path = learner.dir / TOKEN_FILE
    assert path.stat().st_mode & 0o777 == 0o600 and len(token) == 64
    holder = ZmqLearnerLink(server.address)  # in the learner's process: it finds the token by itself
    frames = _frames(learner, 3)
    meta = episode_meta(frames, learner.cfg.env.control_hz, -1)
    holder.hello(7)
    assert holder.push(7, 0, frames, meta)["acked"] == 1
    before = _state(learner, server)
    forged = {"actor": 7, "client": holder.client_id}  # even the holder's client id does not help
    requests = {
        "hello": ({"op": "hello", **forged}, []),
        "push": ({"op": "push", **forged, "episode": 1, "meta": meta}, [encode_arrays(frames)]),
        "bye": ({"op": "bye", **forged, "fault": "forged fault"}, []),
        "weights": ({"op": "weights", "have": -1}, []),
    }
    for op, (header, parts) in requests.items():
        for wrong in ({}, {"token": "0" * 64}, {"token": token[:-1]}, {"token": 12}, {"token": "\ud800"}):
            reply = _raw(server, {**header, **wrong}, *parts)
            assert len(reply) == 1, f"{op} {wrong}: no weights or other frames"  # 13.7 MB of policy before
            head = json.loads(reply[0])
            assert head["ok"] is False and head["type"] == "LinkTokenError", head
            assert head["error"].startswith(f"refused {op}: the request lacks this learner's run token")
            assert str(path) in head["error"] and token not in head["error"] and "\n" not in head["error"]
            assert _state(learner, server) == before, f"{op} {wrong} changed the learner"
    stranger = ZmqLearnerLink(server.address, timeout_s=5.0, token="f" * 64)  # another run's token
    for call in (lambda: stranger.weights(-1), lambda: stranger.bye(7, "forged"), lambda: stranger.hello(3)):
        with pytest.raises(LinkTokenError, match=f"learner {server.address}: refused "):
            call()
    stranger.close()
    assert _state(learner, server) == before and not learner.faults
    # the run token is all it takes: the holder goes on, and a raw request with it gets the weights
    assert holder.push(7, 1, frames, meta)["acked"] == 2
    reply = _raw(server, {"op": "weights", "have": -1, "token": token})
    assert json.loads(reply[0])["ok"] is True and len(reply) == 2 and len(reply[1]) > 1000
    assert holder.bye(7)["status"]["stop"] is False
    assert 7 not in learner._active and not learner.faults
    holder.close()


def test_the_token_is_kept_across_restarts_and_a_damaged_one_is_named(tmp_path):
    first = make_or_read_token(tmp_path / "online")
    assert make_or_read_token(tmp_path / "online") == first  # a restarted learner: actors reconnect
    path = tmp_path / "online" / TOKEN_FILE
    assert path.stat().st_mode & 0o777 == 0o600 and read_token(path) == first
    assert sorted(p.name for p in path.parent.iterdir()) == [TOKEN_FILE]  # no temporary file left
    path.write_text("not a token\n")
    with pytest.raises(
        ConfigError, match=f"{path} is not a learner token .*: delete it, restart the learner"
    ):
        make_or_read_token(tmp_path / "online")


def _actor(run_dir, address: str, actor_id: int, *extra: str) -> subprocess.CompletedProcess:
    """A real ``robot-rl online --role actor`` against the learner at ``address``, without keys."""
    args = ["online", "--role", "actor", "--actor-id", str(actor_id), f"--online.address={address}"]
    return subprocess.run(
        [sys.executable, "-c", CODE, *args, *overrides(run_dir, *extra)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def _error_line(proc: subprocess.CompletedProcess, start: str, *needles: str) -> str:
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith(start), proc.stderr[-2000:]
    for needle in needles:
        assert needle in line, line
    return line


def _with_token(run_dir, token: str):
    """A run dir on 'another machine' holding a copy of a learner token (``robot-rl online`` layout)."""
    folder = run_dir / "online" / "online_qc_seed0"
    folder.mkdir(parents=True)
    (folder / TOKEN_FILE).write_text(token + "\n")
    return run_dir


@pytest.mark.e2e
def test_actors_started_by_hand_read_the_token_and_a_second_actor_with_a_live_id_is_refused(served, tmp_path):
    learner, server, run = served
    # an actor on the learner's run dir finds the token there and runs to its budget
    budget = [f"--online.env_steps={HAND_STEPS}", f"--env.max_episode_steps={HAND_STEPS}"]
    done = _actor(run, server.address, 0, *budget)
    assert done.returncode == 0, done.stderr[-3000:]
    assert learner.replay.acked.get(0, 0) >= 1 and learner.replay.num_steps >= HAND_STEPS
    assert 0 not in learner._active and not learner.faults  # it said bye, with no fault
    # a live holder of actor 3; a second actor 3 (another run dir, a copy of the token) is refused
    holder = ZmqLearnerLink(server.address)
    frames = _frames(learner, 3)
    meta = episode_meta(frames, learner.cfg.env.control_hz, -1)
    holder.hello(3)
    before = _state(learner, server)
    other = _with_token(tmp_path / "other", learner_token(run))
    line = _error_line(
        _actor(other, server.address, 3),
        "robot-rl: actor id clash: ",
        "actor 3 already belongs to another actor process",
    )
    assert holder.client_id not in line
    assert _state(learner, server) == before
    assert holder.push(3, 0, frames, meta)["acked"] == 1  # the holder goes on
    holder.bye(3)
    holder.close()
    # a copy of another run's token is refused in one line
    stale = _with_token(tmp_path / "stale", "e" * 64)
    _error_line(_actor(stale, server.address, 4), "robot-rl: connection error: ", "refused hello", TOKEN_FILE)
    assert 4 not in learner._active and 4 not in learner.replay.acked


def test_an_actor_that_never_finds_the_token_names_the_file(tmp_path):
    address = free_address()
    done = _actor(tmp_path / "run", address, 0, "--online.connect_timeout_s=1")
    token = tmp_path / "run" / "online" / "online_qc_seed0" / TOKEN_FILE
    _error_line(
        done,
        "robot-rl: connection error: ",
        address,
        f"nor is there a learner token at {token}: start the learner on this run_dir first",
        "copy that file",
        "--security.keys",
    )
