"""The ``cyclonedds`` transport of :class:`robot_rl.hardware.ros2.node.Node`: plain DDS with ROS 2's wire
names (``rt/<topic>``, ``<pkg>::msg::dds_::<Type>_``, XCDR1), so a ROS 2 system on ``rmw_cyclonedds_cpp``
sees these nodes as ROS 2 nodes' topics.

``--dds-loopback`` (:data:`LOOPBACK_CONFIG`) keeps the domain on 127.0.0.1 with unicast discovery and no
multicast, as tests and CI use it; otherwise the domain uses ``CYCLONEDDS_URI`` (cyclonedds' default:
multicast discovery on the default interface), as ROS 2 would.

Interop with ROS 2's default middleware (Fast DDS, vendor id 1.15): Fast DDS 3 (ROS 2 Kilted) announces XTypes
type information whose collection element flags leave TRY_CONSTRUCT unset (0). The type hash of every
message with a sequence field (``JointState``, ``Image``, ``JointTrajectory``...) then differs from the one
cyclonedds computes (TRY_CONSTRUCT1, DISCARD), so cyclonedds fetches Fast DDS's type object, rejects it
("invalid member flags 0 ... ddsi_xt_type_init_impl with invalid type object"), and, with that allowed,
fails the assignability check ("wr type not delimited"): no reader or writer of such a type ever matched
a Fast DDS peer, in either direction, while sequence-free types (``Bool``, ``PoseStamped``) did. Fast DDS
2.14 (Jazzy) sends no type information, so it matched by name. Every participant here therefore joins with
:data:`INTEROP_CONFIG` (cyclonedds' ``Compatibility/IgnoreTypeInformation`` for vendor 1.15), which
matches Fast DDS endpoints by type name, as ROS 2 itself does across RMWs
(``tests/hardware/ros2/test_ros2_interop.py``).

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

from robot_rl.hardware.ros2.msgs import check_type, dds_topic
from robot_rl.hardware.ros2.node import Node, NodeArgs, Publisher

LOOPBACK_CONFIG = (
    '<CycloneDDS><Domain Id="any"><General><Interfaces><NetworkInterface address="127.0.0.1"/></Interfaces>'
    "<AllowMulticast>false</AllowMulticast></General><Discovery><ParticipantIndex>auto</ParticipantIndex>"
    '<MaxAutoParticipantIndex>60</MaxAutoParticipantIndex><Peers><Peer address="127.0.0.1"/></Peers>'
    "</Discovery></Domain></CycloneDDS>"
)
"""Cyclone DDS config: loopback interface only, no multicast, unicast discovery of up to 60 participants
on this host."""
INTEROP_CONFIG = (
    '<CycloneDDS><Domain Id="any"><Compatibility><IgnoreTypeInformation>1.15</IgnoreTypeInformation>'
    "</Compatibility></Domain></CycloneDDS>"
)
"""Cyclone DDS config fragment: match Fast DDS (vendor 1.15) endpoints by type name (module doc)."""


def cyclone_uri(loopback: bool, user_uri: str | None) -> str:
    """The ``CYCLONEDDS_URI`` a node joins with: :data:`LOOPBACK_CONFIG` (``--dds-loopback``) or the user's
    own ``CYCLONEDDS_URI`` (if any), then :data:`INTEROP_CONFIG` (cyclonedds merges a comma-separated list
    in order)."""
    first = LOOPBACK_CONFIG if loopback else (user_uri or "")
    return ",".join(part for part in (first, INTEROP_CONFIG) if part)


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
        """Write ``msg`` (an instance of the publisher's type; :func:`msgs.check_type`)."""
        check_type(self._topic, self._type, msg)
        self._writer.write(msg)

    def subscription_count(self) -> int:
        return len(self._writer.get_matched_subscriptions())


class CycloneNode(Node):
    """A node on a cyclonedds ``DomainParticipant`` of ``args.domain_id`` (module doc)."""

    transport = "cyclonedds"

    def __init__(self, name: str, args: NodeArgs) -> None:
        super().__init__(name, args)
        # read when the process first joins a domain (a Domain(id, config) object did not reach other
        # processes here); the fragment an earlier node (or the parent process) added is not added twice
        user_uri = os.environ.get("CYCLONEDDS_URI", "").removesuffix(INTEROP_CONFIG).rstrip(",")
        os.environ["CYCLONEDDS_URI"] = cyclone_uri(args.loopback, user_uri)
        self._dp = DomainParticipant(args.domain_id)
        self._waitset = WaitSet(self._dp)
        self._readers: list[tuple[DataReader, Callable[[Any], None]]] = []
        self._topics: dict[str, Topic] = {}

    def _topic(self, msg_type: type, topic: str) -> Topic:
        name = dds_topic(self.remapped(topic))
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
