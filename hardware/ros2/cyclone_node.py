"""The ``cyclonedds`` transport of :class:`robot_rl.hardware.ros2.node.Node`: plain DDS with ROS 2's wire
names (``rt/<topic>``, ``<pkg>::msg::dds_::<Type>_``, XCDR1), so a ROS 2 system on ``rmw_cyclonedds_cpp``
sees these nodes as ROS 2 nodes' topics.

``--dds-loopback`` (:data:`LOOPBACK_CONFIG`) keeps the domain on 127.0.0.1 with unicast discovery and no
multicast, as tests and CI use it; otherwise the domain uses ``CYCLONEDDS_URI`` (cyclonedds' default:
multicast discovery on the default interface), as ROS 2 would.

Wrong-type publishers: DDS matches a reader only with writers of its type name, so a message of another
type on a topic never reaches a callback (tested). Logging such a writer at discovery would need the
``DCPSPublication`` builtin-topic reader, whose ``take`` segfaults in cyclonedds 11.0.1's Python binding,
so it is not done.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from cyclonedds.core import InstanceState, Policy, Qos, ReadCondition, SampleState, ViewState, WaitSet
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader, InvalidSample
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from robot_rl.hardware.ros2.msgs import dds_topic, ros_type
from robot_rl.hardware.ros2.node import Node, NodeArgs, Publisher

LOOPBACK_CONFIG = (
    '<CycloneDDS><Domain Id="any"><General><Interfaces><NetworkInterface address="127.0.0.1"/></Interfaces>'
    "<AllowMulticast>false</AllowMulticast></General><Discovery><ParticipantIndex>auto</ParticipantIndex>"
    '<MaxAutoParticipantIndex>60</MaxAutoParticipantIndex><Peers><Peer address="127.0.0.1"/></Peers>'
    "</Discovery></Domain></CycloneDDS>"
)
"""Cyclone DDS config: loopback interface only, no multicast, unicast discovery of up to 60 participants
on this host."""
MAX_TAKE = 64
"""Most samples taken from one reader per spin."""


def _qos(depth: int, reliable: bool) -> Qos:
    rel = (
        Policy.Reliability.Reliable(duration(milliseconds=100)) if reliable else Policy.Reliability.BestEffort
    )
    return Qos(rel, Policy.History.KeepLast(depth), Policy.Durability.Volatile)


class _Writer(Publisher):
    def __init__(self, writer: DataWriter, msg_type: type, topic: str) -> None:
        self._writer, self._type, self._topic = writer, msg_type, topic

    def publish(self, msg: Any) -> None:
        """Write ``msg`` (an instance of the publisher's type).

        Raises:
            TypeError: ``msg`` is another type (names the topic).
        """
        if type(msg) is not self._type:
            raise TypeError(f"{self._topic}: publisher of {ros_type(self._type)} got {type(msg).__name__}")
        self._writer.write(msg)

    def subscription_count(self) -> int:
        return len(self._writer.get_matched_subscriptions())


class CycloneNode(Node):
    """A node on a cyclonedds ``DomainParticipant`` of ``args.domain_id`` (module doc)."""

    transport = "cyclonedds"

    def __init__(self, name: str, args: NodeArgs) -> None:
        super().__init__(name, args)
        if args.loopback:  # read when the process first joins a domain (a Domain(id, config) object did
            os.environ["CYCLONEDDS_URI"] = LOOPBACK_CONFIG  # not reach other processes here)
        self._dp = DomainParticipant(args.domain_id)
        self._waitset = WaitSet(self._dp)
        self._readers: list[tuple[DataReader, Callable[[Any], None]]] = []
        self._topics: dict[str, Topic] = {}

    def _topic(self, msg_type: type, topic: str) -> Topic:
        name = dds_topic(topic)
        if name not in self._topics:
            self._topics[name] = Topic(self._dp, name, msg_type)
        elif self._topics[name].data_type is not msg_type:
            raise TypeError(f"{self.name}: topic {topic} already used with another type in this node")
        return self._topics[name]

    def publisher(self, msg_type: type, topic: str, depth: int = 10) -> Publisher:
        writer = DataWriter(self._dp, self._topic(msg_type, topic), qos=_qos(depth, reliable=True))
        return _Writer(writer, msg_type, topic)

    def subscribe(self, msg_type: type, topic: str, callback: Callable[[Any], None], depth: int = 10) -> None:
        reader = DataReader(self._dp, self._topic(msg_type, topic), qos=_qos(depth, reliable=False))
        self._waitset.attach(ReadCondition(reader, SampleState.NotRead | ViewState.Any | InstanceState.Any))
        self._readers.append((reader, callback))

    def spin_once(self, timeout_s: float = 0.1) -> None:
        wait = min(timeout_s, self._run_timers())
        if self._readers and wait > 0:
            self._waitset.wait(duration(microseconds=max(1, int(wait * 1e6))))
        elif wait > 0:
            time.sleep(wait)
        for reader, callback in self._readers:
            for msg in reader.take(N=MAX_TAKE):
                if not isinstance(msg, InvalidSample):  # disposal notices carry no data
                    callback(msg)
        self._run_timers()

    def close(self) -> None:
        self._readers.clear()
        self._topics.clear()
        self._dp = None
