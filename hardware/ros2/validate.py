"""Checks on incoming ROS 2 messages, before anything reaches a robot or an observation.

Each check returns the message's content as arrays or raises :class:`Rejected` with the reason; the node
that received the message logs the reason (``rejected <topic>: <reason>``), counts it and drops the
message. A header stamp of zero means "now" (ROS' convention for commands); any other stamp more than
``stale_s`` away from the receiver's clock (past or future) is stale (:func:`check_stamp`), or, where the
sender's clock may differ from the receiver's, more than ``stale_s`` away once the clocks' offset measured
on the topic's first message is taken off (:class:`Freshness`).
"""

from __future__ import annotations

import logging

import numpy as np

from robot_rl.hardware.ros2 import msgs


class Rejected(ValueError):
    """An incoming message that must not be used; the message is the reason."""


def check_stamp(header: msgs.Header, now: float, stale_s: float) -> None:
    """Raise :class:`Rejected` when ``header.stamp`` (s) is non-zero and more than ``stale_s`` s from
    ``now`` (s since the epoch)."""
    t = msgs.seconds(header.stamp)
    if t != 0.0 and abs(now - t) > stale_s:
        raise Rejected(f"stale timestamp: {now - t:+.3f} s old (limit {stale_s} s)")


class Freshness:
    """Header-stamp freshness of a node's incoming topics, with unsynchronised clocks allowed for.

    A topic's first stamp within ``skew_s`` of the receiver's clock: clocks are synchronised, and a stamp
    more than ``stale_s`` from ``now`` is stale (as :func:`check_stamp`). Further off (another host's clock
    not synchronised, or ``sim_time``: the sender stamps with a simulated clock): that first offset is
    taken as the clocks' difference and subtracted from every later stamp of the topic, so freshness is
    judged by receive time (a message delayed by more than ``stale_s`` relative to the first is still
    stale); a warning is logged once per topic (not with ``sim_time``, where it is expected).

    Args:
        stale_s: the largest age (s) of a message. skew_s: the largest clock offset (s) taken as synchronised.
        sim_time: the sender's stamps are on a simulated clock. log: where the warning goes.
    """

    def __init__(self, stale_s: float, skew_s: float, sim_time: bool, log: logging.Logger) -> None:
        self.stale_s, self.skew_s, self.sim_time, self.log = stale_s, skew_s, sim_time, log
        self.offsets: dict[str, float] = {}
        """The clock offset (s, receiver minus sender) subtracted per topic; 0 where clocks agree."""

    def check(self, topic: str, header: msgs.Header, now: float) -> None:
        """Raise :class:`Rejected` when ``header``'s stamp on ``topic`` is stale at ``now`` (s since the
        epoch); a zero stamp means "now"."""
        t = msgs.seconds(header.stamp)
        if t == 0.0:
            return
        if topic not in self.offsets:
            offset = now - t
            synced = abs(offset) <= self.skew_s and not self.sim_time
            self.offsets[topic] = 0.0 if synced else offset
            if not synced and not self.sim_time:
                self.log.warning(
                    "%s: header stamps are %+.3f s off this host's clock (more than env.robot.ros2."
                    "clock_skew_s=%g): clocks not synchronised, judging freshness by receive time "
                    "(synchronise the clocks, e.g. chrony, or set use_sim_time for a simulated clock)",
                    topic,
                    offset,
                    self.skew_s,
                )
        age = now - t - self.offsets[topic]
        if abs(age) > self.stale_s:
            raise Rejected(f"stale timestamp: {age:+.3f} s old (limit {self.stale_s} s)")


def _finite(values, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise Rejected(f"{what} has NaN or inf: {arr.tolist()}")
    return arr


def joint_state(
    msg: msgs.JointState, joints: list[str], now: float, stale_s: float
) -> tuple[np.ndarray, ...]:
    """``(position, velocity)`` float64 (n,) of ``joints`` (in that order) from ``msg``; velocity zeros when
    the message has none.

    Raises:
        Rejected: stale stamp, a joint of ``joints`` missing, value lists not matching ``name``, NaN/inf.
    """
    check_stamp(msg.header, now, stale_s)
    missing = [j for j in joints if j not in msg.name]
    if missing:
        raise Rejected(f"joint state misses joints {missing} (has {list(msg.name)})")
    if len(msg.position) != len(msg.name) or len(msg.velocity) not in (0, len(msg.name)):
        raise Rejected(
            f"joint state has {len(msg.name)} names but {len(msg.position)} positions, "
            f"{len(msg.velocity)} velocities"
        )
    index = [list(msg.name).index(j) for j in joints]
    pos = _finite(msg.position, "joint state position")[index]
    vel = _finite(msg.velocity, "joint state velocity")[index] if len(msg.velocity) else np.zeros(len(joints))
    return pos, vel


def image(msg: msgs.Image, width: int, height: int, now: float, stale_s: float) -> np.ndarray:
    """RGB uint8 (height, width, 3) of an ``rgb8``/``bgr8`` image message.

    Raises:
        Rejected: stale stamp, another encoding, another size than ``width`` x ``height``, or ``data`` not
            ``height * step`` bytes with ``step == 3 * width``.
    """
    check_stamp(msg.header, now, stale_s)
    if msg.encoding not in ("rgb8", "bgr8"):
        raise Rejected(f"image encoding {msg.encoding!r} not supported (rgb8, bgr8)")
    if (msg.width, msg.height) != (width, height):
        raise Rejected(f"image is {msg.width}x{msg.height}, expected {width}x{height}")
    data = np.frombuffer(bytes(msg.data), dtype=np.uint8)
    if msg.step != 3 * width or data.size != height * msg.step:
        raise Rejected(f"image data is {data.size} bytes with step {msg.step}, expected {height * 3 * width}")
    out = data.reshape(height, width, 3)
    return out[..., ::-1].copy() if msg.encoding == "bgr8" else out


def positions(values, joints: list[str], names: list[str] | None = None) -> tuple[np.ndarray, float | None]:
    """``(joint positions (n,), gripper or None)`` of a position command: ``values`` n (or n+1 with the
    gripper closure last, in [0, 1]) in ``joints`` order, or named by ``names`` (a trajectory's
    ``joint_names``, which may add ``gripper``).

    Raises:
        Rejected: a joint missing from ``names``, wrong count, NaN/inf, gripper outside [0, 1].
    """
    arr = _finite(values, "position command")
    n = len(joints)
    grip = None
    if names is not None:
        missing = [j for j in joints if j not in names]
        if missing or len(names) != arr.size:
            raise Rejected(
                f"command joint_names {list(names)} miss {missing} or do not match {arr.size} values"
            )
        if "gripper" in names:
            grip = float(arr[list(names).index("gripper")])
        arr = arr[[list(names).index(j) for j in joints]]
    elif arr.size == n + 1:
        arr, grip = arr[:n], float(arr[n])
    elif arr.size != n:
        raise Rejected(f"position command has {arr.size} values, expected {n} (or {n + 1} with the gripper)")
    if grip is not None and not 0.0 <= grip <= 1.0:
        raise Rejected(f"gripper command {grip} outside [0, 1]")
    return arr, grip


def twist(msg: msgs.TwistStamped, now: float, stale_s: float) -> np.ndarray:
    """float64 (6,) linear (m/s) then angular (rad/s) of a twist command.

    Raises:
        Rejected: stale stamp or NaN/inf.
    """
    check_stamp(msg.header, now, stale_s)
    lin, ang = msg.twist.linear, msg.twist.angular
    return _finite([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z], "twist command")


def joy(msg: msgs.Joy, num_axes: int, num_buttons: int, now: float, stale_s: float) -> tuple[np.ndarray, ...]:
    """``(axes float64 (n_axes,), buttons int64 (n_buttons,))`` of a ``sensor_msgs/Joy`` reading that a
    mapping needing axis indices below ``num_axes`` and button indices below ``num_buttons`` can use.

    Raises:
        Rejected: stale stamp, fewer axes or buttons than the mapping needs (another pad or driver), an axis
            NaN/inf or outside [-1, 1], a button other than 0/1.
    """
    check_stamp(msg.header, now, stale_s)
    if len(msg.axes) < num_axes or len(msg.buttons) < num_buttons:
        raise Rejected(
            f"joy has {len(msg.axes)} axes and {len(msg.buttons)} buttons; the mapping needs {num_axes} and "
            f"{num_buttons} (set the node's axes/button parameters for this pad)"
        )
    axes = _finite(msg.axes, "joy axes")
    if np.any(np.abs(axes) > 1.0 + 1e-6):
        raise Rejected(f"joy axes outside [-1, 1]: {axes.tolist()}")
    buttons = np.asarray(msg.buttons, dtype=np.int64)
    if np.any((buttons != 0) & (buttons != 1)):
        raise Rejected(f"joy buttons must be 0 or 1: {buttons.tolist()}")
    return axes, buttons


def reset_request(text: str) -> tuple[int | None, str]:
    """A ``<sim_prefix>/reset_scene`` request (std_msgs/String ``"<seed>@<id>"``, either part may be empty)
    as (seed or None, request id). The id lets ``sim_robot_node`` answer a re-sent request without resetting
    twice (the bridge re-sends until answered: a reader drops data from a writer it has not discovered yet,
    so the first request can be lost); a request without ``@`` has no id (older clients).

    Raises:
        Rejected: a seed that is not an integer in [0, 2**32), or an id that is not 1-64 characters of
            letters, digits and ``-``.
    """
    seed, at, request_id = text.strip().partition("@")
    if seed and not (seed.isdigit() and int(seed) < 2**32):
        raise Rejected(f"reset_scene seed must be empty or an integer in [0, 2**32), got {seed!r:.40}")
    if at and not (0 < len(request_id) <= 64 and request_id.replace("-", "").isalnum()):
        raise Rejected(f"reset_scene request id must be 1-64 letters, digits or '-', got {request_id!r:.40}")
    return (int(seed) if seed else None), request_id
