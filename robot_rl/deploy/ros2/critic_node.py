"""``critic_node``: a trained progress critic (:mod:`robot_rl.rewards`; the compact critic is CPU-fast)
scoring camera images under a task instruction, published for anything on the ROS 2 graph (a display, a
supervisor, a reward logger).

Subscribes to ``image_topics`` (sensor_msgs/Image rgb8/bgr8, one per camera the critic reads, in the order
of its ``image_keys``; frames must have the critic's image size) and ``<prefix>/reset`` (std_msgs/String,
any content: a new episode starts, progress back to 0). At up to ``rate_hz``, once every camera has a new
frame, the critic scores (previous frames, current frames, ``task``), exactly as the online reward wrapper
does (:class:`~robot_rl.rewards.shaping.CriticRewardWrapper`): progress advances by the VLAC rule
(``rule``, docs/algorithms.md §9) from 0 at the first frames after start or reset.

Publishes ``<prefix>/progress`` (std_msgs/Float32, in [0, 1]) and ``<prefix>/done`` (std_msgs/Float32, the
done head's probability in [0, 1]) for each scored pair (the first frames after a reset publish progress 0
and done 0). A bad image (size, encoding, stale) is logged (``rejected <topic>: ...``) and never scored; a
non-finite score is logged and not published.

Parameters: ``checkpoint`` (a critic checkpoint folder, required), ``task`` (the instruction, required),
``image_topics``, ``rate_hz`` (Hz), ``stale_s`` (s), ``prefix``, ``rule`` (``scale``/``mix``), ``device``
(torch device). A critic that also reads ``observation.state`` is refused at start (image critics only).
"""

from __future__ import annotations

import sys

import numpy as np

from robot_rl.deploy.ros2.cli import run_node
from robot_rl.hardware.ros2 import msgs, validate
from robot_rl.hardware.ros2.node import Node
from robot_rl.rewards.base import CriticScoreError
from robot_rl.rewards.progress import vlac_step
from robot_rl.rewards.registry import load_critic

PARAMETERS: dict = {
    "checkpoint": "",
    "task": "",
    "image_topics": ["/camera/front/image_raw"],
    "rate_hz": 5.0,
    "stale_s": 1.0,
    "prefix": "/robot_rl/critic",
    "rule": "scale",
    "device": "cpu",
}
"""The node's parameters and defaults (module doc)."""


class CriticNode:
    """The node's state and callbacks on ``node`` (module doc).

    Raises:
        ParameterError: a wrongly typed or unknown parameter. ValueError: no checkpoint or task, a critic
            that reads the state, image topics not one per critic camera, a bad rule or rate.
        CriticInputError: ``checkpoint`` is not a critic checkpoint.
    """

    def __init__(self, node: Node) -> None:
        self.node = node
        p = node.params(PARAMETERS)
        if not p["checkpoint"] or not p["task"].strip():
            raise ValueError("critic_node: checkpoint:=<critic folder> and task:=<instruction> are required")
        if p["rule"] not in ("scale", "mix"):
            raise ValueError(f"critic_node: rule must be scale or mix, got {p['rule']!r}")
        self.critic = load_critic(p["checkpoint"], p["device"])
        if self.critic.state_key is not None:
            raise ValueError(
                f"critic_node: {p['checkpoint']} also reads {self.critic.state_key}; only image critics "
                "are served here (train one with reward_model.use_state=false)"
            )
        keys, topics = list(self.critic.image_keys), list(p["image_topics"])
        if len(topics) != len(keys):
            raise ValueError(
                f"critic_node: image_topics {topics} must name one topic per critic camera {keys}"
            )
        self.task, self.rule, self.stale_s = p["task"], p["rule"], p["stale_s"]
        self.size = tuple(self.critic.image_size)  # (H, W)
        self.rejected = 0
        self.scored = 0
        self.progress = 0.0
        self._latest: dict[str, np.ndarray] = {}
        self._last: dict[str, np.ndarray] | None = None
        prefix = p["prefix"]
        self.pub_progress = node.publisher(msgs.Float32, f"{prefix}/progress")
        self.pub_done = node.publisher(msgs.Float32, f"{prefix}/done")
        for key, topic in zip(keys, topics, strict=True):
            node.subscribe(msgs.Image, topic, lambda m, k=key, t=topic: self._on_image(k, t, m), depth=2)
        node.subscribe(msgs.String, f"{prefix}/reset", self._on_reset)
        node.timer(1.0 / p["rate_hz"], self._tick)

    def _on_image(self, key: str, topic: str, msg: msgs.Image) -> None:
        h, w = self.size
        try:
            self._latest[key] = validate.image(msg, w, h, self.node.now(), self.stale_s)[None].copy()
        except validate.Rejected as err:
            self.rejected += 1
            self.node.log.warning("rejected %s: %s", topic, err)

    def _on_reset(self, _msg: msgs.String) -> None:
        self._last, self.progress = None, 0.0

    def _tick(self) -> None:
        if len(self._latest) < len(self.critic.image_keys):
            return  # a new frame of every camera since the last score
        current, self._latest = self._latest, {}
        if self._last is None:
            self._last, self.progress = current, 0.0
            done = 0.0
        else:
            try:
                out = self.critic.predict(self._last, current, self.task)
            except CriticScoreError as err:
                self.node.log.warning("critic score rejected, not published: %s", err)
                return
            self.progress = float(np.clip(vlac_step(self.progress, float(out.delta[0]), self.rule), 0, 1))
            done, self._last = float(out.done[0]), current
        self.scored += 1
        self.pub_progress.publish(msgs.Float32(self.progress))
        self.pub_done.publish(msgs.Float32(done))

    def close(self) -> None:
        self.node.close()


def main(argv: list[str] | None = None) -> int:
    """``robot-rl ros2 critic_node [--ros-args -p name:=value ...]``; runs until SIGINT/SIGTERM."""
    return run_node("critic_node", CriticNode, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
