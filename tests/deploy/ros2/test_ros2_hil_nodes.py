"""The human-in-the-loop ROS 2 nodes over real DDS (loopback, both transports): intervention_node turns
Joy into intervention commands and labels (bad Joy rejected with a reason, never moving anything), critic_node
publishes progress for published images, and actor_node (a real process) acts on sim_robot_node, takes the
human's Joy commands as intervention steps of its episode log and sends the episode to a real learner."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from waits import wait_until

pytest.importorskip("cyclonedds")
from launch_files import ROBOT_RL  # noqa: E402
from ros2_helpers import TRANSPORTS, Spun, new_domain, node_flags  # noqa: E402

from robot_rl.actor_build import describe_env
from robot_rl.config import Ros2Config  # noqa: E402
from robot_rl.hardware.ros2 import msgs  # noqa: E402
from robot_rl.hardware.ros2.node import parse_args  # noqa: E402
from robot_rl.hardware.ros2.transport import make_node  # noqa: E402
from robot_rl.policies import factory as agents

LOW = np.array([-0.03, -0.03, -0.03, 0.0], np.float32)
HIGH = np.array([0.03, 0.03, 0.03, 1.0], np.float32)


def _joy(axes=(0.0,) * 6, buttons=(0,) * 8, stamp=None) -> msgs.Joy:
    return msgs.Joy(msgs.Header(msgs.stamp(stamp), "joy"), list(axes), list(buttons))


def _held(x: float = 1.0, **pressed: int) -> msgs.Joy:
    """RB held (button 5), left stick up by ``x`` (axis 1, +x in joy_node's signs), other buttons."""
    buttons = [0] * 8
    buttons[5] = 1
    for i, v in pressed.items():
        buttons[int(i[1:])] = v
    return _joy((0.0, x, 0.0, 0.0, 0.0, 0.0), buttons)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_joy_becomes_interventions_and_labels_and_bad_joy_never_moves_anything(caplog, transport):
    from robot_rl.deploy.ros2.intervention_node import InterventionNode
    from robot_rl.hardware.ros2.intervention_device import RosInterventionDevice

    caplog.set_level(logging.WARNING, "robot_rl.ros2")
    domain = new_domain()
    iv = Spun("intervention_node", InterventionNode, domain, transport, "rate_hz:=50.0", "joy_timeout_s:=0.3")
    ros2 = Ros2Config(transport=transport, domain_id=domain, loopback=True)
    device = RosInterventionDevice(ros2, "/robot_rl/intervention", LOW, HIGH, 1.0, timeout_s=0.3)
    pub_node = make_node("joy_pub", parse_args(node_flags(domain, transport), "t"))
    joy = pub_node.publisher(msgs.Joy, "/joy")
    wrong_node = make_node("wrong_pub", parse_args(node_flags(domain), "t"))  # cyclonedds: see test_ros2_node
    wrong = wrong_node.publisher(msgs.String, "/joy")  # a wrong-type message on the Joy topic
    try:
        device.reset(0)
        assert device.poll({}).action is None  # nobody intervenes: the policy drives

        def drive(msg, until, timeout_s=10.0):
            """Publish ``msg`` and poll the device until ``until(HumanInput)``; whether it came."""
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                joy.publish(msg)
                if until(device.poll({})):
                    return True
                time.sleep(0.02)
            return False

        assert drive(_held(1.0), lambda h: h.action is not None and h.action[0] > 0.029)
        h = device.poll({})
        np.testing.assert_allclose(h.action, [0.03, 0.0, 0.0, 0.0], atol=1e-6)  # +x, gripper open
        # A (button 0) closes the gripper (latched), Y (3) labels the episode a success once
        assert drive(_held(1.0, b0=1, b3=1), lambda h: h.label == "success")
        assert drive(_held(0.0, b0=0, b3=0), lambda h: h.action is not None and h.action[3] == 1.0)
        assert device.poll({}).label is None  # the label was handed out once
        # released: the policy drives again
        assert drive(_joy(), lambda h: h.action is None)

        # bad Joy (dead-man held, full deflection): NaN, out of range, too few axes, stale; and a String
        n_before = iv.app.rejected
        actions = []
        bad = [
            _joy((0.0, float("nan"), 0.0, 0.0, 0.0, 0.0), [0, 0, 0, 0, 0, 1, 0, 0]),
            _joy((0.0, 3.0, 0.0, 0.0, 0.0, 0.0), [0, 0, 0, 0, 0, 1, 0, 0]),
            _joy((0.0, 1.0), [0, 0, 0, 0, 0, 1, 0, 0]),
            _joy((0.0, 1.0, 0.0, 0.0, 0.0, 0.0), [0, 0, 0, 0, 0, 1, 0, 0], stamp=time.time() - 10.0),
        ]
        deadline = time.monotonic() + 10.0
        while iv.app.rejected < n_before + 8 and time.monotonic() < deadline:
            for m in bad:
                joy.publish(m)
            wrong.publish(msgs.String("axes: [1, 1]"))
            actions.append(device.poll({}).action)
            time.sleep(0.05)
        assert iv.app.rejected >= n_before + 8
        assert all(a is None for a in actions)  # nothing of it ever drove the robot
        text = caplog.text
        for reason in ("has NaN or inf", "outside [-1, 1]", "the mapping needs 5 and 6", "stale timestamp"):
            assert "rejected /joy: " in text and reason in text, reason
        # a bad twist or label on the intervention topics themselves is rejected by the actor's side too
        tw = pub_node.publisher(msgs.TwistStamped, "/robot_rl/intervention/twist")
        lab = pub_node.publisher(msgs.String, "/robot_rl/intervention/label")
        nan = msgs.TwistStamped(msgs.Header(), msgs.Twist(msgs.Vector3(float("nan"), 0.0, 0.0)))
        assert wait_until(
            lambda: [tw.publish(nan), lab.publish(msgs.String("maybe"))] and len(device.shared.rejected) >= 2,
            5.0,
        )
        assert device.poll({}).label is None
    finally:
        device.close()
        pub_node.close()
        wrong_node.close()
        iv.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_critic_node_publishes_progress_for_published_images(tmp_path, caplog, transport):
    from robot_rl.config import RewardModelConfig
    from robot_rl.deploy.ros2.critic_node import CriticNode
    from robot_rl.rewards.compact import CompactProgressCritic

    caplog.set_level(logging.WARNING, "robot_rl.ros2")
    ckpt = tmp_path / "critic"
    CompactProgressCritic(RewardModelConfig(cameras=["front"], image_size=32)).save(ckpt)
    domain = new_domain()
    params = [f"checkpoint:={ckpt}", "task:=pick up the cube", "rate_hz:=20.0"]
    app = Spun("critic_node", CriticNode, domain, transport, *params)
    node = make_node("img_pub", parse_args(node_flags(domain, transport), "t"))
    img = node.publisher(msgs.Image, "/camera/front/image_raw")
    progress: list[float] = []
    done: list[float] = []
    node.subscribe(msgs.Float32, "/robot_rl/critic/progress", lambda m: progress.append(m.data))
    node.subscribe(msgs.Float32, "/robot_rl/critic/done", lambda m: done.append(m.data))
    rng = np.random.default_rng(0)

    def image(size: int) -> msgs.Image:
        data = rng.integers(0, 255, (size, size, 3), dtype=np.uint8).tobytes()
        return msgs.Image(msgs.Header(msgs.stamp(), "front_camera"), size, size, "rgb8", 0, 3 * size, data)

    try:
        deadline = time.monotonic() + 20.0
        while (len(progress) < 4 or len(done) < 4) and time.monotonic() < deadline:
            img.publish(image(32))
            img.publish(image(48))  # wrong size: rejected
            node.spin_once(0.06)
        assert len(progress) >= 4 and len(done) >= 4
        assert progress[0] == 0.0  # the first frames anchor progress at 0
        assert all(0.0 <= v <= 1.0 for v in progress + done)
        assert app.app.scored >= 4
        assert "rejected /camera/front/image_raw: image is 48x48, expected 32x32" in caplog.text
    finally:
        node.close()
        app.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_actor_node_acts_on_the_sim_robot_takes_joy_interventions_and_feeds_the_learner(
    tiny_offline_run, tmp_path, transport
):
    import zarr
    from online_setup import copy_run, overrides

    from robot_rl import keys
    from robot_rl.config import load_config
    from robot_rl.deploy.ros2.intervention_node import InterventionNode
    from robot_rl.deploy.ros2.sim_robot_node import SimRobotNode
    from robot_rl.runtime.learner import Learner
    from robot_rl.runtime.link import LearnerServer

    run = copy_run(tiny_offline_run, tmp_path / "run")
    flags = ["--online.env_steps=16", "--env.max_episode_steps=16"]
    cfg = load_config(None, overrides(run, "--online.address=tcp://127.0.0.1:0", *flags))
    learner = Learner(cfg, 0, progress=False, env=describe_env(cfg), agents=agents)
    server = LearnerServer(learner, cfg.online.address).start()
    domain = new_domain()
    sim = Spun("sim_robot_node", SimRobotNode, domain, transport, "state_rate_hz:=50.0")
    iv = Spun("intervention_node", InterventionNode, domain, transport, "rate_hz:=20.0")
    node = make_node("hil_test", parse_args(node_flags(domain, transport), "t"))
    joy = node.publisher(msgs.Joy, "/joy")
    status: list[dict] = []
    node.subscribe(msgs.String, "/robot_rl/actor/status", lambda m: status.append(json.loads(m.data)))
    actor_flags = " ".join(overrides(run, f"--online.address={server.address}", *flags))
    log = open(tmp_path / "actor.log", "wb")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    actor = subprocess.Popen(
        [*ROBOT_RL, "ros2", "actor_node", *node_flags(domain, transport), f"overrides:={actor_flags}"]
        + ["status_hz:=5.0"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    try:
        t0 = time.monotonic()
        # the human holds RB with the stick up for 0.5 s of every 1.2 s, from the actor's start to its end
        while actor.poll() is None and time.monotonic() - t0 < 150.0:
            phase = (time.monotonic() - t0) % 1.2
            joy.publish(_held(1.0) if phase < 0.5 else _joy())
            node.spin_once(0.05)
        out = (tmp_path / "actor.log").read_text(errors="replace")[-3000:]
        assert actor.returncode == 0, out
        assert any(s["state"] == "acting" for s in status), status[-3:]
        assert status[-1]["state"] == "done" and status[-1]["episodes"] >= 1, status[-1]
        # the learner holds the episode, and the actor's log marks the human's steps as interventions
        assert learner.replay.num_steps >= 16
        logs = list(run.glob("online/*/actor0/episodes"))
        assert len(logs) == 1, logs
        group = zarr.open_group(str(logs[0]), mode="r")
        n = int(group.attrs["committed"]["frames"])
        assert n >= 16
        iv_steps = np.asarray(group[keys.INTERVENTION][:n]).astype(bool)
        actions = np.asarray(group[keys.ACTION][:n])
        assert iv_steps.any() and (~iv_steps).any(), iv_steps  # human steps and policy chunks
        # stick up: the full +x step; at a start/stop edge a step may pair "active" with the neighbouring
        # tick's twist (two topics), so a human step is the full step or none, most of them the full one
        high_x, x = cfg_high_x(cfg), actions[iv_steps, 0]
        full = np.isclose(x, high_x, rtol=1e-5)
        assert np.all(full | np.isclose(x, 0.0, atol=1e-7)), x
        assert full.sum() >= max(1, len(x) // 2), x
        assert status[-1]["interventions"] == int(iv_steps.sum())
    finally:
        if actor.poll() is None:
            os.killpg(actor.pid, signal.SIGTERM)
            actor.wait(timeout=15)
        node.close()
        iv.close()
        sim.close()
        server.close()


def cfg_high_x(cfg) -> float:
    """The largest +x step of the env's action box (m)."""
    from robot_rl.sim import make_env

    env = make_env(cfg.env)
    try:
        return float(env.action_space.high[0])
    finally:
        env.close()
